"""A vLLM-compatible simulated model server and fleet."""
