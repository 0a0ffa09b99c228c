"""The reference engine: a real vision-language model on CPU behind the simulator's HTTP surface.

It exists to show that the caches mmgate routes for are real and harmless: a repeated image skips
the processor and the vision encoder (caches keyed by the gateway's own media identity), a follow-up
turn prefills only the tokens past its longest cached block-aligned prefix (blocks keyed as vLLM
keys them), and the replies stay the same. Needs the ``mmgate[engine]`` extra (torch, transformers);
importing this package alone imports neither.
"""
