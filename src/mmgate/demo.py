"""``mmgate demo`` (what ``make run`` starts): the gateway in front of an embedded simulated fleet.

Four simulated vLLM pods (a real timing profile, run faster than real time) and the gateway with
encoder-cache and prefix affinity plus token-load balancing, all in this process. It writes a
real PNG and two ready-made request bodies to a temporary folder and prints curl commands to try,
then serves until Ctrl-C.
"""

from __future__ import annotations

import argparse
import base64
import errno
import io
import shlex
import sys
import tempfile
from pathlib import Path

import msgspec
import orjson
import yaml

from mmgate.arguments import port, positive
from mmgate.config import ConfigError, parse_config
from mmgate.config.schema import TracingSpec
from mmgate.gateway.app import Running, build_gateway, serve_until_signal
from mmgate.logs import configure_logging
from mmgate.process import listen_failure, run_forever
from mmgate.sim.profiles import ProfileError, load_profile
from mmgate.tokens import family_for_model

# examples/encoder-affinity.yaml with the exact pricing rule of the family the simulated pods
# serve (Qwen3-VL by default): stick to the pod that holds the prompt's prefix or already encoded
# its images, balance by tokens.
DEMO_CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters:
    family: {family}
- type: approx-prefix-cache-producer
- type: inflight-load-producer
- type: mm-embeddings-cache-producer
- type: prefix-cache-affinity-filter
  parameters:
    peakPrefillThroughput: 15751
    affinityThreshold: 0.6
    maxTTFTPenaltyMs: 36000
- type: mm-embeddings-cache-scorer
- type: token-load-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-affinity-filter
  - pluginRef: mm-embeddings-cache-scorer
    weight: 2
  - pluginRef: token-load-scorer
"""


def demo_config_yaml(model: str) -> str:
    """The demo's gateway config for pods serving ``model``: priced by that model's family, so a
    profile of another model (``--profile qwen2.5-omni-7b-h100``) is priced and validated as such."""
    return DEMO_CONFIG.replace("{family}", family_for_model(model) or "qwen3-vl")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=port, default=8080, help="gateway port (default 8080; 0 = any free)")
    parser.add_argument("--host", default="127.0.0.1", help="gateway address (default 127.0.0.1)")
    parser.add_argument("--pods", type=int, default=4, help="simulated pods (default 4)")
    parser.add_argument(
        "--profile",
        default="qwen3-vl-32b-h200-tp2",
        help="simulator profile: the simulated hardware and the model the pods serve (default "
        "qwen3-vl-32b-h200-tp2, serving Qwen/Qwen3-VL-32B-Instruct; qwen2.5-omni-7b-h100 serves "
        "Qwen/Qwen2.5-Omni-7B, which takes audio and video; 'fast' a toy one, model 'test'; "
        "shipped profiles: docs/sim.md)",
    )
    parser.add_argument(
        "--time-scale",
        type=positive,
        default=0.1,
        help="wall seconds per simulated second (default 0.1: ten times faster than real)",
    )
    parser.add_argument(
        "--otlp-traces-endpoint",
        metavar="URL",
        help="trace requests with OpenTelemetry, exporting to this OTLP/HTTP collector "
        "(e.g. http://localhost:4318); needs the tracing extra",
    )
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])


def demo_image() -> bytes:
    """A small real PNG (a sunset: a gradient sky, a sun, the ground), made with Pillow."""
    from PIL import Image, ImageDraw

    width, height = 640, 480
    image = Image.new("RGB", (width, height))
    draw = ImageDraw.Draw(image)
    for y in range(height):
        t = y / height
        draw.line([(0, y), (width, y)], fill=(int(250 - 120 * t), int(140 - 100 * t), int(60 + 120 * t)))
    draw.ellipse([240, 240, 400, 400], fill=(255, 220, 80))
    draw.rectangle([0, 380, width, height], fill=(30, 40, 60))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def write_requests(folder: Path, model: str) -> dict[str, Path]:
    """The image and three request bodies that share it: two questions and a streamed one."""
    png = demo_image()
    (folder / "sunset.png").write_bytes(png)
    url = "data:image/png;base64," + base64.b64encode(png).decode()

    def body(question: str, max_tokens: int = 24, **extra: object) -> bytes:
        content = [{"type": "text", "text": question}, {"type": "image_url", "image_url": {"url": url}}]
        messages = [{"role": "user", "content": content}]
        return orjson.dumps({"model": model, "messages": messages, "max_tokens": max_tokens, **extra})

    paths = {
        "ask": folder / "ask.json",
        "again": folder / "ask-again.json",
        "stream": folder / "stream.json",
    }
    paths["ask"].write_bytes(body("What is in this image?"))
    paths["again"].write_bytes(body("Which colours dominate it?"))
    stream_opts = {"include_usage": True}
    paths["stream"].write_bytes(body("Describe it.", 6, stream=True, stream_options=stream_opts))
    return paths


def curl(url: str, path: Path, *, stream: bool = False) -> str:
    flags = "-sN" if stream else "-s -D -"
    return (
        f"curl {flags} {url}/v1/chat/completions -H 'Content-Type: application/json' "
        f"-d @{shlex.quote(str(path))}"
    )


def banner(running: Running, pods: int, profile: str, model: str, paths: dict[str, Path]) -> str:
    url = running.url
    return "\n".join(
        [
            f"mmgate demo: gateway on {url} in front of {pods} simulated pods "
            f"(profile {profile}, model {model})",
            "",
            f"Ask about an image ({paths['ask'].parent / 'sunset.png'}, sent inline as base64):",
            "",
            f"  {curl(url, paths['ask'])}",
            "",
            "Ask something else about the same image: x-mmgate-endpoint names the same pod,",
            "the one whose encoder cache already holds it:",
            "",
            f"  {curl(url, paths['again'])}",
            "",
            "Stream the answer token by token (with usage at the end):",
            "",
            f"  {curl(url, paths['stream'], stream=True)}",
            "",
            f"Also: {url}/v1/models  {url}/ready  {url}/metrics",
            "Press Ctrl-C to stop.",
        ]
    )


async def _main(args: argparse.Namespace, folder: Path) -> int:
    from mmgate.sim.fleet import SimFleet

    fleet = SimFleet(pods=args.pods, profile=args.profile, time_scale=args.time_scale)
    await fleet.start()
    try:
        model = fleet.pods[0].model
        paths = write_requests(folder, model)
        config = parse_config(yaml.safe_load(demo_config_yaml(model)), source="<demo>")
        section = msgspec.structs.replace(
            config.mmgate, host=args.host, port=args.port, endpoints=list(fleet.urls)
        )
        if args.otlp_traces_endpoint is not None:
            section = msgspec.structs.replace(
                section, tracing=TracingSpec(endpoint=args.otlp_traces_endpoint)
            )
        try:
            gateway = build_gateway(msgspec.structs.replace(config, mmgate=section))
        except ConfigError as exc:
            print(f"mmgate demo: {exc}", file=sys.stderr)
            return 2

        def ready(running: Running) -> None:
            print(banner(running, args.pods, args.profile, model, paths), flush=True)

        await serve_until_signal(gateway, ready)
    finally:
        await fleet.stop()
    return 0


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, json=False)
    try:
        load_profile(args.profile)  # a misspelt profile is a message, before anything starts
    except ProfileError as exc:
        print(f"mmgate demo: {exc}", file=sys.stderr)
        return 2
    if args.pods < 1:
        print("mmgate demo: --pods must be at least 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mmgate-demo-") as tmp:
        code = 0

        async def main() -> None:
            nonlocal code
            code = await _main(args, Path(tmp))

        try:
            run_forever(main)
        except OSError as exc:
            reason = listen_failure(exc, args.host, args.port)
            if exc.errno == errno.EADDRINUSE:
                reason += " (make run DEMO_ARGS='--port 8081')"
            print(f"mmgate demo: cannot start: {reason}", file=sys.stderr)
            return 2
        print("mmgate demo: stopped.")
        return code
