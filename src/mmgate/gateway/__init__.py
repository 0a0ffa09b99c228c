"""The data plane: HTTP gateway, proxying, telemetry."""
