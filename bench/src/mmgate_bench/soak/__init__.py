"""Long-running checks of the gateway process: mixed load with faults, and many idle open streams."""
