"""Measuring routing policies: workloads, load generation, discrete-event runs, reports."""
