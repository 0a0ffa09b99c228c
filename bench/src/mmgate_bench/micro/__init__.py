"""Micro-benchmarks, one component each, in-process: hot path, upstream client, parse, decision,
pricing, engine."""
