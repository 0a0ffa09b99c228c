"""``mmgate extproc``: mmgate as the endpoint picker (EPP) of an Envoy-based inference gateway.

The same configuration, endpoints and discovery options as ``mmgate serve``; the difference is
the transport: Envoy asks over gRPC (ext_proc) where each request goes, instead of clients
sending requests to mmgate.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from mmgate.arguments import port as port_number
from mmgate.arguments import seconds
from mmgate.config import ConfigError
from mmgate.gateway import cli as serve_cli
from mmgate.gateway.app import build_gateway
from mmgate.gateway.extproc.envoy_config import LB_POLICIES, REQUEST_BODY_MODES, render
from mmgate.gateway.extproc.transport import TRANSPORTS
from mmgate.gateway.malloc_tuning import keep_large_buffers
from mmgate.gateway.server import Gateway
from mmgate.gateway.workers import serve_workers
from mmgate.logs import configure_logging
from mmgate.process import listen_failure, run_forever, wait_for_signal

log = logging.getLogger("mmgate.extproc")

DEFAULT_PORT = 9002  # GIE's endpoint-picker port
DEFAULT_ADMIN_PORT = 9090
DEFAULT_DRAIN_S = 2.0  # twice the picker health-check interval of --print-envoy-config
DEFAULT_GRACE_S = 15.0  # with Kubernetes' 10 s preStop and the drain, inside its default 30 s

EPILOG = """\
examples:
  mmgate extproc --config examples/aggregated.yaml --endpoints 10.0.0.5:8000,10.0.0.6:8000
  mmgate extproc --config examples/aggregated.yaml --pool-name qwen3-vl --pool-namespace llm
  mmgate extproc --print-envoy-config --envoy-port 8080 --endpoints 10.0.0.5:8000,10.0.0.6:8000
  mmgate extproc --print-envoy-config --envoy-lb original-dst --envoy-request-body buffered

gRPC (ext_proc, health: liveness, readiness, envoy.service.ext_proc.v3.ExternalProcessor) on
--port (default 9002); /metrics, /ready and /health over HTTP on --admin-port (default 9090).
Serving needs the extproc extra (pip install 'mmgate[extproc]'). See docs/envoy.md.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    serve_cli.add_arguments(
        parser,
        port_help=f"gRPC port of the picker (default {DEFAULT_PORT}, GIE's; 0 picks a free one)",
        admin_port_help=f"/metrics, /ready and /health over HTTP on this port (default {DEFAULT_ADMIN_PORT})",
    )
    parser.epilog = EPILOG
    parser.set_defaults(admin_port=None)
    parser.add_argument(
        "--print-envoy-config",
        action="store_true",
        help="print an Envoy configuration that uses this picker (with --envoy-port, --port, --endpoints) "
        "and exit",
    )
    parser.add_argument(
        "--envoy-port",
        type=port_number,
        default=8080,
        metavar="PORT",
        help="Envoy's listener port (default 8080)",
    )
    parser.add_argument(
        "--envoy-dns",
        metavar="HOST:PORT",
        help="with --print-envoy-config: find the model servers by DNS (a headless Service) instead of "
        "--endpoints",
    )
    parser.add_argument(
        "--fail-open",
        action="store_true",
        help="with --print-envoy-config: Envoy keeps routing (round-robin) while the picker is down",
    )
    parser.add_argument(
        "--envoy-pickers",
        metavar="HOST:PORT,...",
        help="with --print-envoy-config: several picker replicas (active-active, health-checked) "
        "instead of the one at --host/--port; a name (a headless Service) stands for every address "
        "it resolves to",
    )
    parser.add_argument(
        "--envoy-lb",
        choices=LB_POLICIES,
        default="override-host",
        help="with --print-envoy-config: how Envoy reads the destination: override-host (a list, "
        "walked on retry; the default) or original-dst (one address, llm-d's standalone chart)",
    )
    parser.add_argument(
        "--envoy-request-body",
        choices=REQUEST_BODY_MODES,
        default="streamed",
        help="with --print-envoy-config: the request body FULL_DUPLEX_STREAMED (streamed, the "
        "protocol's default) or BUFFERED (crosses the picker once; see docs/envoy.md)",
    )
    parser.add_argument(
        "--max-endpoints",
        type=_positive,
        metavar="N",
        help="put up to N endpoints (the chosen one, then fallbacks) in x-gateway-destination-endpoint; "
        "default: as many as the picker chose (its maxNumOfEndpoints, 1 by default). More than one "
        "needs a proxy that walks the list (Envoy's override_host policy)",
    )

    parser.add_argument(
        "--grpc",
        choices=TRANSPORTS,
        default="lean",
        help="the gRPC server: lean (mmgate's own HTTP/2 layer, the default) or grpcio (grpc.aio, "
        "several times the CPU per request; for comparison)",
    )
    parser.add_argument(
        "--drain-seconds",
        type=seconds,
        default=DEFAULT_DRAIN_S,
        metavar="S",
        help="on SIGTERM, answer NOT_SERVING on every health service and keep serving for S seconds "
        f"before closing (default {DEFAULT_DRAIN_S:g}: an Envoy health-checking its picker cluster, "
        "1 s apart in --print-envoy-config, moves its new streams to another replica first)",
    )
    parser.add_argument(
        "--grace-seconds",
        type=seconds,
        default=DEFAULT_GRACE_S,
        metavar="S",
        help="after the drain, refuse new streams (HTTP/2 GOAWAY) and give the open ones (a streamed "
        "generation holds its stream) up to S seconds to finish before cutting them "
        f"(default {DEFAULT_GRACE_S:g})",
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    port = DEFAULT_PORT if args.port is None else args.port
    if args.print_envoy_config:
        endpoints = [e.strip() for e in (args.endpoints or "").split(",") if e.strip()]
        endpoints = [e.split("://", 1)[-1].rstrip("/") for e in endpoints]
        try:
            text = render(
                listen_port=args.envoy_port,
                extproc=[a.strip() for a in args.envoy_pickers.split(",") if a.strip()]
                if args.envoy_pickers
                else f"{args.host or '127.0.0.1'}:{port}",
                endpoints=endpoints,
                dns=args.envoy_dns,
                fail_open=args.fail_open,
                lb=args.envoy_lb,
                request_body=args.envoy_request_body,
            )
        except ValueError as exc:
            print(f"mmgate extproc: {exc}", file=sys.stderr)
            return 2
        sys.stdout.write(text)
        return 0
    if args.workers < 1:
        print("mmgate extproc: --workers must be at least 1", file=sys.stderr)
        return 2
    # grpc (the extproc extra) only from here on: --help and --print-envoy-config work without it.
    from mmgate.gateway.extproc import server

    configure_logging(args.log_level, json=args.log_format == "json")
    args.port = None  # the file's mmgate.port is the HTTP gateway's; the gRPC port is --port
    try:
        config = serve_cli.load(args)
        gateway = build_gateway(config)
    except ConfigError as exc:
        print(f"mmgate extproc: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"mmgate extproc: {config.source}: {exc}", file=sys.stderr)
        return 2
    admin_port = config.mmgate.adminPort if config.mmgate.adminPort is not None else DEFAULT_ADMIN_PORT
    host = config.mmgate.host
    keep_large_buffers()  # the body crosses the picker as megabytes: reuse heap pages, not fresh mmaps

    async def main(gateway: Gateway, port: int, reuse_port: bool) -> None:
        running = await server.start(
            gateway,
            host=host,
            port=port,
            admin_port=admin_port,
            max_endpoints=args.max_endpoints,
            transport=args.grpc,
            reuse_port=reuse_port,
        )
        fields: dict[str, object] = {"grpc_port": running.port, "admin_port": running.admin_port}
        if reuse_port:
            fields["worker_pid"] = os.getpid()
        log.info("listening", extra={"fields": fields})
        try:
            await wait_for_signal()
        finally:
            await running.stop(drain_s=args.drain_seconds, grace_s=args.grace_seconds)

    if args.workers > 1:

        def serve_one(port: int) -> int:
            # Each worker builds its own gateway: nothing bound to an event loop crosses fork().
            run_forever(lambda: main(build_gateway(config), port, True))
            return 0

        try:
            return serve_workers(args.workers, host, port, serve_one)
        except OSError as exc:
            print(f"mmgate extproc: {listen_failure(exc, host, port)}", file=sys.stderr)
            return 2
    try:
        run_forever(lambda: main(gateway, port, False))
    except ConfigError as exc:
        print(f"mmgate extproc: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"mmgate extproc: {listen_failure(exc, host, port)}", file=sys.stderr)
        return 2
    return 0
