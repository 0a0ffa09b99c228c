"""mmgate: a multimodal-aware inference gateway for vLLM and SGLang fleets."""

__version__ = "0.1.0"
