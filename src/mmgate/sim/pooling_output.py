"""Answers of the APIs that do not generate: embeddings, pooling, classify, score, rerank (run
through the engine as a prefill) and tokenize / detokenize (answered at once, as vLLM's frontend
does), in vLLM's response shapes. Vectors and scores are deterministic per request and input, so a
test can compare two answers; they mean nothing else.
"""

from __future__ import annotations

import base64
import random
import struct
import time
from typing import Any

import orjson

from mmgate.request.view import Api
from mmgate.sim.output import completion_text

DEFAULT_DIMENSIONS = 32


def pooling_body(
    api: Api,
    request_id: str,
    model: str,
    *,
    items: int,
    prompt_tokens: int,
    dimensions: int | None = None,
    encoding_format: str = "float",
    top_n: int = 0,
) -> bytes:
    """The JSON body for ``items`` inputs (or pairs) of one pooling-API request."""
    rng = random.Random(f"{request_id}/{api.value}")
    created = int(time.time())
    usage = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
    }
    head: dict[str, Any] = {"id": f"embd-{request_id}", "object": "list", "created": created, "model": model}
    if api is Api.EMBEDDINGS:
        size = dimensions or DEFAULT_DIMENSIONS
        data = [
            {"index": i, "object": "embedding", "embedding": _vector(rng, size, encoding_format)}
            for i in range(items)
        ]
        return orjson.dumps({**head, "data": data, "usage": usage})
    if api is Api.POOLING:
        data = [
            {"index": i, "object": "pooling", "data": _unit(rng, dimensions or DEFAULT_DIMENSIONS)}
            for i in range(items)
        ]
        return orjson.dumps({**head, "data": data, "usage": usage})
    if api is Api.CLASSIFY:
        out = []
        for i in range(items):
            p = rng.random()
            out.append(
                {
                    "index": i,
                    "label": "LABEL_0" if p >= 0.5 else "LABEL_1",
                    "probs": [p, 1 - p],
                    "num_classes": 2,
                }
            )
        return orjson.dumps({**head, "id": f"classify-{request_id}", "data": out, "usage": usage})
    scores = [rng.random() for _ in range(items)]
    if api is Api.SCORE:
        rows = [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)]
        return orjson.dumps({**head, "id": f"score-{request_id}", "data": rows, "usage": usage})
    ranked = sorted(range(items), key=lambda i: -scores[i])
    if top_n > 0:
        ranked = ranked[:top_n]
    results: list[dict[str, Any]] = [
        {"index": i, "document": {"text": None}, "relevance_score": scores[i]} for i in ranked
    ]
    return orjson.dumps(
        {
            "id": f"rerank-{request_id}",
            "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
            "results": results,
        }
    )


def tokenizer_body(api: Api, token_ids: list[int], max_model_len: int) -> bytes:
    """``/tokenize``: the prompt's token ids (the pod's own sequence); ``/detokenize``: some text."""
    if api is Api.DETOKENIZE:
        return orjson.dumps({"prompt": completion_text(len(token_ids)).strip()})
    return orjson.dumps(
        {"count": len(token_ids), "max_model_len": max_model_len, "tokens": token_ids, "token_strs": None}
    )


def _unit(rng: random.Random, size: int) -> list[float]:
    values = [rng.uniform(-1.0, 1.0) for _ in range(size)]
    norm = sum(v * v for v in values) ** 0.5 or 1.0
    return [v / norm for v in values]


def _vector(rng: random.Random, size: int, encoding_format: str) -> list[float] | str:
    values = _unit(rng, size)
    if encoding_format == "base64":  # little-endian float32, as vLLM and the openai client decode it
        return base64.b64encode(struct.pack(f"<{size}f", *values)).decode()
    return values
