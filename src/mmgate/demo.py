"""``mmgate demo``: what ``make run`` starts until the gateway is assembled.

It reads the bundled example requests (examples/requests/), parses each exactly as the gateway
will, and prints what it sees: parts, media sizes and durations from headers only, content
identities, and the visual/audio token estimate for one model family when pricing is available.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mmgate.errors import RequestError
from mmgate.request import Modality, RequestView, parse_request
from mmgate.request.cli import guess_api, table

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "requests"

# Headers a client would send with a video it does not inline (llm-d's names): they fill what the
# gateway cannot probe from a URL it never fetches.
HEADERS = {
    "video-audio-chat.json": {
        "x-llm-d-video-resolution": "1280x720",
        "x-llm-d-video-duration-seconds": "600",
        "x-llm-d-video-fps": "30",
    }
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Parse the bundled example requests the way the gateway does and show what it reads: "
        "text, media assets with their probed sizes and durations, identities and token estimates."
    )
    parser.add_argument(
        "--port", type=int, default=8080, help="gateway port (used once the gateway is wired in)"
    )
    parser.add_argument("--examples", type=Path, default=EXAMPLES, help="folder of example request bodies")
    parser.add_argument("--details", action="store_true", help="also print each request's part-by-part table")
    parser.add_argument(
        "--family", default="qwen3-vl", help="model family for token estimates (default qwen3-vl)"
    )


def _tokens(view: RequestView, family: str) -> str:
    try:
        from mmgate.tokens import PricingConfig, price
    except ImportError:  # pricing not in this build
        return "—"
    try:
        pricing = price(view, PricingConfig(family=family))
    except (RequestError, ValueError, KeyError) as exc:
        return f"n/a ({exc})"
    media = pricing.total_tokens - pricing.text_tokens
    return f"{pricing.text_tokens} + {media}"


def _media(view: RequestView) -> str:
    counts = {m: 0 for m in (Modality.IMAGE, Modality.VIDEO, Modality.AUDIO)}
    for a in view.assets:
        if a.modality in counts:
            counts[a.modality] += 1
    text = ", ".join(f"{n} {m.value}" for m, n in counts.items() if n) or "text only"
    sizes = []
    for a in view.assets:
        if a.width and a.height:
            sizes.append(f"{a.width}x{a.height}" + (f" {a.duration_s:g}s" if a.duration_s else ""))
        elif a.duration_s:
            sizes.append(f"{a.duration_s:g}s")
        else:
            sizes.append("?")
    return text + (f" [{', '.join(sizes)}]" if sizes else "")


def run(args: argparse.Namespace) -> int:
    console = Console()
    files = sorted(Path(args.examples).glob("*.json"))
    if not files:
        console.print(f"[red]no example requests under {args.examples}[/]")
        return 1
    overview = Table(title="What the gateway reads from each example request", title_justify="left")
    for name in (
        "request",
        "api",
        "media (probed size)",
        "unprobed",
        "unique",
        f"tokens text + media ({args.family})",
    ):
        overview.add_column(name)
    for path in files:
        body = path.read_bytes()
        try:
            view = parse_request(body, HEADERS.get(path.name, {}), api=guess_api(body))
        except RequestError as exc:
            overview.add_row(path.name, "—", f"[red]refused: {exc.message}[/]", "", "", "")
            continue
        unique = len({a.identity for a in view.assets})
        overview.add_row(
            path.name,
            view.api.value,
            _media(view),
            str(view.unprobed_assets),
            str(unique),
            _tokens(view, args.family),
        )
        if args.details:
            console.print(table(view, path.name))
    console.print(overview)
    console.print(
        "Unprobed assets are URLs (never fetched): pricing applies its configured default size. "
        "Try: mmgate inspect examples/requests/images-url-and-repeat.json",
        style="dim",
    )
    return 0
