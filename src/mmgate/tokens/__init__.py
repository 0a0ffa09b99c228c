"""Pricing a request in tokens per served model family and per hosted API."""
