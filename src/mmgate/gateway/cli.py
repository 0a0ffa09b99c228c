"""``mmgate serve``: run the gateway in front of a fleet of OpenAI-compatible model servers."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import textwrap

import msgspec

from mmgate.arguments import port
from mmgate.config import ConfigError, GatewayConfig, parse_config
from mmgate.config.schema import KubernetesSpec, TracingSpec
from mmgate.gateway.app import Running, build_gateway, serve_until_signal
from mmgate.gateway.config_check import load_checked
from mmgate.gateway.malloc_tuning import keep_large_buffers
from mmgate.gateway.server import route_list
from mmgate.gateway.workers import serve_workers
from mmgate.logs import configure_logging
from mmgate.process import listen_failure, run_forever

log = logging.getLogger("mmgate.gateway")


def _epilog() -> str:
    """The examples (each one runs as written, given servers at those addresses) and every route,
    from the route table itself."""
    posts = ", ".join(path for method, path in route_list() if method == "POST")
    gets = ", ".join(path for method, path in route_list() if method == "GET")
    routes = textwrap.fill(f"Routes: POST {posts}; GET (and HEAD) {gets}.", 100)
    return f"""\
examples:
  mmgate serve --endpoints 127.0.0.1:8001,127.0.0.1:8002
  mmgate serve --config examples/aggregated.yaml --endpoints 127.0.0.1:8001 --port 8080
  mmgate serve --config my.yaml --endpoints-file /etc/mmgate/endpoints.yaml

The config file is an llm-d EndpointPickerConfig (apiVersion llm-d.ai/v1alpha1 or v1) with an
optional `mmgate:` section (host, port, endpoints, endpointsFile, limits, pricing, ...).
Flags override the file. Endpoints are host:port or http(s)://host:port.
{routes}
With --admin-port, /ready and /metrics move there. See docs/gateway.md and docs/operations.md.
"""


def add_arguments(
    parser: argparse.ArgumentParser,
    *,
    port_help: str = "port to listen on (default 8080; 0 picks a free one)",
    admin_port_help: str = "serve /metrics and /ready on this port instead of the API port "
    "(default: mmgate.adminPort)",
) -> None:
    """The flags of ``mmgate serve``; ``mmgate extproc`` shares them with its own port defaults."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _epilog()
    parser.add_argument("--config", metavar="FILE.yaml", help="EndpointPickerConfig + mmgate section")
    parser.add_argument(
        "--endpoints",
        metavar="URL,URL,...",
        help="comma-separated model servers; replaces the file's mmgate.endpoints",
    )
    parser.add_argument(
        "--endpoints-file",
        metavar="FILE",
        help="a watched file listing endpoints (YAML list or one per line)",
    )
    parser.add_argument(
        "--pool-name",
        metavar="NAME",
        help="route to the pods of this InferencePool (Kubernetes discovery; GIE's EPP flag)",
    )
    parser.add_argument(
        "--pool-namespace", metavar="NS", help="namespace of the InferencePool or pods (default: default)"
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="talk to the Kubernetes API with this kubeconfig (default: the in-cluster service account)",
    )
    parser.add_argument("--port", type=port, help=port_help)
    parser.add_argument("--host", help="address to bind (default 127.0.0.1; 0.0.0.0 for all)")
    parser.add_argument(
        "--max-inflight",
        type=int,
        default=None,
        metavar="N",
        help="answer 429 + Retry-After beyond N requests in flight (default: mmgate.admission.maxInflight, "
        "0 = no limit)",
    )
    parser.add_argument(
        "--admin-port",
        type=port,
        metavar="PORT",
        help=admin_port_help,
    )
    parser.add_argument(
        "--otlp-traces-endpoint",
        metavar="URL",
        help="trace requests with OpenTelemetry, exporting to this OTLP/HTTP collector (e.g. "
        "http://localhost:4318; vLLM's flag name); needs the tracing extra (default: mmgate.tracing)",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument(
        "--log-format", default="json", choices=["json", "text"], help="request log format (default json)"
    )
    parser.add_argument("--no-access-log", action="store_true", help="do not log one line per request")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="gateway processes sharing the port (SO_REUSEPORT); each scrapes the fleet and keeps its own "
        "load counts, and its own affinity indexes unless mmgate.sharedIndex shares them through Redis "
        "(default 1; see mmgate/gateway/workers.py)",
    )


def load(args: argparse.Namespace) -> GatewayConfig:
    """The config file with the flags applied: flags override the file's ``mmgate:`` section, and
    everything after (the gateway, each worker) is built from the result."""
    config = load_checked(args.config) if args.config else parse_config({}, source="<defaults>")
    section = config.mmgate
    changes: dict[str, object] = {}
    if args.endpoints is not None:
        changes["endpoints"] = [e for e in args.endpoints.split(",") if e.strip()]
    if args.endpoints_file is not None:
        changes["endpointsFile"] = args.endpoints_file
    if args.port is not None:
        changes["port"] = args.port
    if args.host is not None:
        changes["host"] = args.host
    if args.admin_port is not None:
        changes["adminPort"] = args.admin_port
    if args.no_access_log:
        changes["accessLog"] = False
    if args.otlp_traces_endpoint is not None:
        tracing = section.tracing or TracingSpec()
        changes["tracing"] = msgspec.structs.replace(tracing, endpoint=args.otlp_traces_endpoint)
    if args.max_inflight is not None:
        admission = msgspec.structs.replace(section.admission, maxInflight=max(0, args.max_inflight))
        changes["admission"] = admission
    pool: dict[str, object] = {}
    if args.pool_name is not None:  # an InferencePool replaces the file's podSelector
        pool.update(inferencePool=args.pool_name, podSelector=None, targetPorts=[])
    if args.pool_namespace is not None:
        pool["namespace"] = args.pool_namespace
    if args.kubeconfig is not None:
        pool["kubeconfig"] = args.kubeconfig
    if pool:
        changes["kubernetes"] = msgspec.structs.replace(section.kubernetes or KubernetesSpec(), **pool)
    return msgspec.structs.replace(config, mmgate=msgspec.structs.replace(section, **changes))


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, json=args.log_format == "json")
    try:
        config = load(args)
    except ConfigError as exc:
        return _config_errors(exc)
    try:
        gateway = build_gateway(config)
    except ConfigError as exc:
        return _config_errors(config.locate(exc))
    except ValueError as exc:  # a flag's value (the file's were checked when it was loaded)
        print(f"mmgate serve: {exc}", file=sys.stderr)
        return 2
    if not config.mmgate.endpoints and not config.mmgate.endpointsFile and config.mmgate.kubernetes is None:
        print(
            "mmgate serve: no endpoints; give --endpoints HOST:PORT,... or mmgate.endpoints in the config",
            file=sys.stderr,
        )
        return 2
    if args.workers < 1:
        print("mmgate serve: --workers must be at least 1", file=sys.stderr)
        return 2
    keep_large_buffers()  # multi-MB bodies: reuse heap pages instead of fresh mmaps per request

    def ready(running: Running) -> None:
        fields = {"url": running.url, "port": running.port, "endpoints": len(gateway.data.registry)}
        if running.admin_port is not None:
            fields["admin_port"] = running.admin_port
        if args.workers > 1:
            fields["worker_pid"] = os.getpid()
        log.info("listening", extra={"fields": fields})

    if args.workers > 1:
        section = config.mmgate

        def serve_one(port: int) -> int:
            # Each worker builds its own gateway: nothing bound to an event loop crosses fork().
            worker = build_gateway(config)
            run_forever(lambda: serve_until_signal(worker, ready, port=port, reuse_port=True))
            return 0

        try:
            return serve_workers(args.workers, section.host, section.port, serve_one)
        except OSError as exc:
            print(f"mmgate serve: {listen_failure(exc, section.host, section.port)}", file=sys.stderr)
            return 2
    try:
        run_forever(lambda: serve_until_signal(gateway, ready))
    except ConfigError as exc:  # found only on start, e.g. a kubeconfig that does not load
        return _config_errors(config.locate(exc))
    except FileNotFoundError as exc:
        print(f"mmgate serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"mmgate serve: {listen_failure(exc, config.mmgate.host, config.mmgate.port)}", file=sys.stderr)
        return 2
    return 0


def _config_errors(error: ConfigError) -> int:
    """Every mistake, one per line in file order, each naming the file (and line) it is in, then
    the command that checks a file without starting anything; exit status 2."""
    for one in error.errors:
        print(f"mmgate serve: {one}", file=sys.stderr)
    files = sorted({one.source for one in error.errors if one.source and not one.source.startswith("<")})
    if files:
        count = len(error.errors)
        noun = "mistake" if count == 1 else "mistakes"
        print(
            f"mmgate serve: {count} {noun}; `mmgate check {' '.join(files)}` lists a config's "
            "mistakes (or the scheduler it becomes) without starting the gateway",
            file=sys.stderr,
        )
    return 2
