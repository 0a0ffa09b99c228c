"""Routing benchmarks: rate ladders over several systems, in virtual time (DES) or over HTTP,
and their reports."""
