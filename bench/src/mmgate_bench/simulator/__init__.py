"""Benchmarks of the simulated fleet itself, over HTTP: calibration against measured stage times,
capacity, metrics."""
