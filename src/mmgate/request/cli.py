"""``mmgate inspect``: show what the gateway reads from a request body, before any routing.

Prints the prompt in order (text runs and media assets where they stand), each asset's modality,
source, content identity, probed size/duration and where it sits in the JSON (``field``). Nothing
is fetched: URL assets show as unprobed unless ``--header`` supplies llm-d's media headers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mmgate.errors import RequestError
from mmgate.request.parse import parse_request
from mmgate.request.view import Api, MediaAsset, RequestView
from mmgate.tables import Column, Table, add_format_argument, emit

_ASSET_KEYS = (
    "modality",
    "source",
    "identity",
    "field",
    "mime",
    "detected_format",
    "width",
    "height",
    "duration_s",
    "fps",
    "sample_rate",
    "channels",
    "pages",
    "probed",
    "payload_size",
    "url",
    "detail",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Show what the gateway reads from a request body: text and media parts in prompt order, "
        "each asset's content identity, size and duration (read from headers of inline media; URLs "
        "are never fetched). Exit status 1 and the OpenAI-style error if the body would be refused."
    )
    parser.add_argument("file", metavar="FILE.json", help="request body to inspect ('-' reads stdin)")
    parser.add_argument(
        "--api",
        choices=["auto", *(a.value for a in Api)],
        default="auto",
        help="body shape, named after its route (chat = /v1/chat/completions, messages = Anthropic "
        "/v1/messages, responses = /v1/responses, ...); auto guesses chat, completions, messages, "
        "responses, embeddings, score or rerank from the fields (default)",
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="K:V",
        help="a request header, e.g. x-llm-d-video-resolution:1280x720 (repeatable)",
    )
    add_format_argument(parser)


_ANTHROPIC_BLOCKS = frozenset({"image", "document", "tool_result", "tool_use"})


def guess_api(body: bytes) -> Api:
    """From the fields: ``prompt`` is completions, ``system`` or Anthropic blocks messages,
    ``query`` + ``documents`` rerank, ``text_1`` score, ``input`` embeddings when it asks for
    vectors (``encoding_format``, ``dimensions``) and responses otherwise; chat by default.
    Bodies that look alike (an embeddings ``input`` without those keys) need ``--api``."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # too deep to guess: parsing will refuse it with a 400
        return Api.CHAT
    if not isinstance(doc, dict):
        return Api.CHAT
    if "prompt" in doc and "messages" not in doc:
        return Api.COMPLETIONS
    if "query" in doc and "documents" in doc:
        return Api.RERANK
    if "text_1" in doc:
        return Api.SCORE
    if "input" in doc and "messages" not in doc:
        return Api.EMBEDDINGS if "encoding_format" in doc or "dimensions" in doc else Api.RESPONSES
    if "system" in doc:
        return Api.MESSAGES
    for msg in doc.get("messages") or []:
        content = msg.get("content") if isinstance(msg, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") in (
                "image",
                "document",
                "tool_result",
                "tool_use",
            ):
                return Api.MESSAGES
    return Api.CHAT


def describe(view: RequestView) -> dict[str, Any]:
    """A JSON-ready summary of a parsed request (the ``--json`` output)."""
    assets = [{k: _plain(getattr(a, k)) for k in _ASSET_KEYS} for a in view.assets]
    parts: list[dict[str, Any]] = []
    index = 0
    for p in view.parts:
        if isinstance(p, str):
            parts.append({"kind": "text", "bytes": len(p.encode())})
        else:
            parts.append({"kind": "asset", "asset": index})
            index += 1
    return {
        "api": view.api.value,
        "model": view.model,
        "stream": view.stream,
        "max_tokens": view.max_tokens,
        "cache_salt": view.cache_salt,
        "body_bytes": len(view.body),
        "text_bytes": view.text_bytes,
        "prompt_token_ids": len(view.prompt_token_ids) if view.prompt_token_ids is not None else None,
        "parts": parts,
        "assets": assets,
        "unique_assets": len({a.identity for a in view.assets}),
        "unprobed_assets": view.unprobed_assets,
        "decoded_bytes": view.extra.get("decoded_bytes", 0),
    }


def _plain(value: object) -> object:
    return value.value if hasattr(value, "value") else value


def _size(a: MediaAsset) -> str:
    bits = []
    if a.width and a.height:
        bits.append(f"{a.width}x{a.height}")
    if a.duration_s is not None:
        bits.append(f"{a.duration_s:g} s")
    if a.fps:
        bits.append(f"{a.fps:g} fps")
    if a.sample_rate:
        bits.append(f"{a.sample_rate} Hz" + (f" x{a.channels}" if a.channels else ""))
    if a.pages:
        bits.append(f"{a.pages} page" + ("s" if a.pages != 1 else ""))
    return ", ".join(bits) or "—"


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1024 or unit == "MB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


INSPECT_COLUMNS = (
    Column("#", numeric=True, style="dim"),
    Column("part", style="bold"),
    Column("size / length", style="green"),
    Column("identity", style="cyan"),
    Column("bytes", numeric=True),
    Column("field / text", style="dim"),
)


def table(view: RequestView, title: str, *, short_ids: bool = True) -> Table:
    """The prompt in order: one row per text run or media asset. ``short_ids`` cuts identities
    to 12 characters (for a terminal); machine formats keep them whole."""
    out = Table(INSPECT_COLUMNS, title=title)
    seen: set[str] = set()
    for i, p in enumerate(view.parts):
        if isinstance(p, str):
            preview = p.replace("\n", "⏎")
            preview = preview if len(preview) <= 40 else preview[:37] + "..."
            out.add(i, "text", "", "", _bytes(len(p.encode())), preview)
            continue
        how = " ".join(x for x in (p.source.value, p.detected_format) if x)
        repeat = ", repeat" if p.identity in seen else ""
        seen.add(p.identity)
        size = _size(p) if p.probed or p.width or p.duration_s or p.pages else "unprobed"
        ident = p.identity if not short_ids or len(p.identity) <= 12 else p.identity[:12] + "…"
        out.add(i, f"{p.modality.value} ({how}{repeat})", size, ident, _bytes(p.payload_size), p.field)
    return out


def summary(view: RequestView) -> str:
    unique = len({a.identity for a in view.assets})
    return (
        f"api={view.api.value} model={view.model or '—'} stream={view.stream} "
        f"max_tokens={view.max_tokens} body={_bytes(len(view.body))} text={_bytes(view.text_bytes)} "
        f"assets={len(view.assets)} (unique {unique}, unprobed {view.unprobed_assets}) "
        f"base64 decoded for probing={_bytes(int(str(view.extra.get('decoded_bytes', 0))))}"
    )


def run(args: argparse.Namespace) -> int:
    body = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    headers: dict[str, str] = {}
    for item in args.header:
        key, sep, value = item.partition(":")
        if not sep:
            print(f"mmgate inspect: --header wants K:V, got {item!r}", file=sys.stderr)
            return 2
        headers[key.strip()] = value.strip()
    api = guess_api(body) if args.api == "auto" else Api(args.api)
    try:
        view = parse_request(body, headers, api=api)
    except RequestError as exc:
        if args.format == "json":
            print(json.dumps(exc.to_dict() | {"status": exc.status}, indent=2))
        else:
            where = f" (param: {exc.param})" if exc.param else ""
            print(f"refused with {exc.status}: {exc.message}{where}", file=sys.stderr)
        return 1
    shown = table(view, args.file, short_ids=args.format == "table")
    emit([shown], args.format, data=describe(view), notes=[summary(view)])
    return 0
