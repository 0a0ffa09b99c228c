"""Configuration loading (llm-d EndpointPickerConfig-compatible)."""
