"""``mmgate sidecar``: run the routing sidecar beside one decode (or PD) model server."""

from __future__ import annotations

import argparse
import logging
import sys

from mmgate.arguments import port as port_number
from mmgate.disagg.orchestrate import OrchestrationSettings
from mmgate.disagg.plan import parse_hosts
from mmgate.disagg.sidecar import Sidecar, SidecarSettings
from mmgate.disagg.stages import AllowList
from mmgate.logs import configure_logging
from mmgate.process import listen_failure, run_forever, wait_for_signal

log = logging.getLogger("mmgate.sidecar")

EPILOG = """\
example (beside a vLLM decode server on port 8200, two encoders and one prefill pod allowed):
  mmgate sidecar --port 8000 --upstream http://127.0.0.1:8200 \\
      --allow 10.0.0.11:8000,10.0.0.12:8000,10.0.0.21:8000

Reads and strips x-encoder-hosts-ports and x-prefiller-host-port (llm-d's routing sidecar
contract), runs the encode and prefill legs on allow-listed hosts only, forwards to --upstream.
Its own /health, /ready and /metrics are on --admin-port. See docs/disaggregation.md.
"""


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}")
    return int(text)


def _hosts(text: str) -> list[str]:
    hosts = parse_hosts(text)
    try:
        AllowList(hosts)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return hosts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--port", type=port_number, default=8000, help="API port (default 8000, llm-d's)")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    parser.add_argument(
        "--admin-port", type=port_number, default=9091, help="/health, /ready, /metrics (9091)"
    )
    parser.add_argument(
        "--upstream", required=True, metavar="URL", help="the local model server, http://host:port"
    )
    parser.add_argument(
        "--allow", type=_hosts, default=[], metavar="HOST:PORT,...",
        help="encode and prefill pods the sidecar may contact, host:port or CIDR:port (a pod network); "
        "anything else is refused",
    )  # fmt: skip
    parser.add_argument(
        "--encode-timeout", type=_positive, default=30.0, metavar="S", help="per encode leg (30)"
    )
    parser.add_argument(
        "--prefill-timeout", type=_positive, default=120.0, metavar="S", help="prefill leg (120)"
    )
    parser.add_argument(
        "--stage-retries", type=_count, default=1, metavar="N",
        help="retries of a failed leg, each on another pod of its stage (default 1)",
    )  # fmt: skip
    parser.add_argument(
        "--fallback", choices=("local", "fail"), default="local",
        help="a stage that cannot be done: the local server does it (local, default) or 503 (fail)",
    )  # fmt: skip
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    settings = SidecarSettings(
        upstream=args.upstream,
        allow=args.allow,
        host=args.host,
        port=args.port,
        admin_port=args.admin_port,
        orchestration=OrchestrationSettings(
            encode_timeout_s=args.encode_timeout,
            prefill_timeout_s=args.prefill_timeout,
            stage_retries=args.stage_retries,
            fallback=args.fallback,
        ),
    )
    try:
        sidecar = Sidecar(settings)
    except ValueError as exc:
        print(f"mmgate sidecar: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        await sidecar.start()
        log.info("listening", extra={"fields": {"port": sidecar.port, "admin_port": sidecar.admin_port}})
        try:
            await wait_for_signal()
        finally:
            await sidecar.stop()

    try:
        run_forever(main)
    except OSError as exc:
        print(f"mmgate sidecar: {listen_failure(exc, args.host, args.port)}", file=sys.stderr)
        return 2
    return 0
