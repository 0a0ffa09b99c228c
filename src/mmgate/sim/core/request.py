"""The engine's state of one request, shared by the scheduler and the caches it passes through.

A plain record (slots, no behaviour): the scheduler moves it between queues, the prefix cache
extends its block keys, the encoder stage tracks which of its media items hold encoder outputs.
"""

from __future__ import annotations

from mmgate.sim.core.types import SimRequest
from mmgate.vllm.blocks import BlockHash

WAITING, RUNNING, DONE = 0, 1, 2


class RequestState:
    """Engine-side state of one request.

    ``computed`` counts tokens whose KV exists; ``outputs`` tokens generated; ``epoch`` grows each
    time the request leaves the running set, so queued work for an older epoch is ignored.
    A decoder's computed count is ``step + decode_offset`` (nothing is updated per step).
    """

    __slots__ = (
        "admitted",
        "blocks",
        "cached_tokens",
        "computed",
        "decode_offset",
        "enc_held",
        "enc_keys",
        "enc_ms",
        "epoch",
        "finish_step",
        "hashes",
        "id",
        "items",
        "items_end",
        "lora",
        "max_tokens",
        "mm_next",
        "mm_queried",
        "n_cached_blocks",
        "outputs",
        "prompt",
        "prompt_len",
        "remote_kv",
        "salt",
        "spans",
        "status",
    )

    def __init__(self, request: SimRequest, enc_keys: list[str], enc_ms: list[float]) -> None:
        self.id = request.request_id
        self.prompt = request.token_ids
        self.prompt_len = len(request.token_ids)
        self.spans = request.mm_items
        self.items = [(s.offset, s.length) for s in request.mm_items]
        self.items_end = self.items[-1][0] + self.items[-1][1] if self.items else 0
        self.enc_keys = enc_keys
        self.enc_ms = enc_ms
        self.max_tokens = request.max_tokens
        self.salt = request.cache_salt or None
        self.lora = request.lora
        self.remote_kv = request.remote_prefill
        self.outputs = 0
        self.computed = 0
        self.blocks: list[int] = []
        self.hashes: list[BlockHash] = []
        self.n_cached_blocks = 0
        self.mm_next = 0
        self.mm_queried = 0
        self.enc_held: set[str] = set()
        self.cached_tokens = -1
        self.status = WAITING
        self.admitted = 0
        self.epoch = 0
        self.decode_offset = 0
        self.finish_step = 0

    @property
    def total(self) -> int:
        """Tokens the next prefill must cover: the prompt and what was generated before a
        preemption."""
        return self.prompt_len + self.outputs
