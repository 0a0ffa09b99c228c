"""mmgate: a multimodal-aware inference gateway for vLLM and SGLang fleets."""

from mmgate import compiled

__version__ = "0.1.0"

# Before anything imports a compiled module: a stale or unwanted build must not load.
compiled.install()
