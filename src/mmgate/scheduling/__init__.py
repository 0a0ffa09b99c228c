"""The endpoint picker: a pure, llm-d-compatible plugin pipeline."""
