"""An Envoy configuration that asks mmgate where each request goes (``mmgate extproc
--print-envoy-config``); the files under ``deploy/envoy/`` are this function's output.

Three configurations, one picker (the proxy configures the filter, the picker adapts to it):

- ``lb="override-host"`` (mmgate's own, the default): the model servers as one cluster whose
  load balancer is Envoy's ``override_host`` policy, made for the endpoint-picker protocol: it
  sends the request to the first endpoint of the ``x-gateway-destination-endpoint`` header (or
  the same key in the ``envoy.lb`` dynamic metadata) and, on a retry, to the next one of that
  list. With it, a route retry policy for failures before the first response byte (connect
  failure, reset, refused stream): a pod that dies under a request costs a retry on the next
  endpoint of the list (when the picker sends one: ``mmgate extproc --max-endpoints``).
- ``lb="original-dst"`` (llm-d's standalone chart): an ``ORIGINAL_DST`` cluster that reads the
  destination header as one ``ip:port`` (``original_dst_lb_config.use_http_header``); a list in
  the header is no address to it (``503 no healthy upstream``), so the picker must send one
  endpoint, its default. No list, so no retry policy: a retry would go to the same address.
- ``request_body="buffered"``: the request body in ``BUFFERED`` mode instead of
  ``FULL_DUPLEX_STREAMED``: Envoy holds the body and sends it to the picker in one message; the
  picker's answer carries the routing headers and, only when it changed the body, the new body.
  The body crosses the picker once instead of twice. The response body goes ``STREAMED``: each
  chunk is shown to the picker (first token, usage) and needs no echo. The route's buffer limit
  is raised to ``max_body_bytes`` (Envoy answers 413 beyond it).

Common to all: the ``ext_proc`` filter, headers and trailers sent, over an HTTP/2 cluster to
mmgate, and ``failure_mode_allow``: ``false`` (fail closed: no picker, a 500 — the safe default
when the picker enforces limits or routes disaggregated requests); ``true`` (fail open: Envoy
keeps routing with the cluster's own policy while mmgate is down — round-robin for
``override_host``; nothing for ``ORIGINAL_DST``, which has no address without the header).

Several picker replicas (``extproc`` a list, or a name resolving to every replica: a headless
Service, found by DNS) sharing their affinity indexes through Redis: the picker cluster lists
them all, health-checked with gRPC health
(``envoy.service.ext_proc.v3.ExternalProcessor``, ``no_traffic_interval`` included), and each
ext_proc stream goes to the less busy healthy replica. ``update_merge_window: 0s`` makes a
health change reach the streams at once (Envoy's default of 1 s merges health changes and
delivers them to the worker threads' load balancers up to a second late, while the admin
``/clusters`` page already shows them; every stream opened in between still goes to a dead
replica). Outlier detection on local-origin failures (a refused connection, a reset) ejects a
replica that died between two checks at its first failed stream instead of at its next check.

The model servers are listed statically (``endpoints``) or found by DNS (``dns``: a headless
Service name resolving to every pod, the usual Kubernetes setup); ``override_host`` can only pick
hosts the cluster knows. ``ORIGINAL_DST`` connects to whatever address the header names, so it
lists none (the picker's own discovery decides which pods exist).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any, Literal

import yaml

DESTINATION = "x-gateway-destination-endpoint"
DEFAULT_DNS = "vllm.mmgate-demo.svc.cluster.local:8000"
LB_POLICIES = ("override-host", "original-dst")
REQUEST_BODY_MODES = ("streamed", "buffered")
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024  # the buffered mode's route limit (mmgate's default)


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def envoy_config(
    *,
    listen_port: int = 8080,
    listen_host: str = "0.0.0.0",
    extproc: str | Sequence[str] = "127.0.0.1:9002",
    admin_port: int = 9901,
    endpoints: Sequence[str] = (),
    dns: str | None = None,
    fail_open: bool = False,
    retries: int = 2,
    timeout_s: float = 600.0,
    picker_health_interval_s: float = 1.0,
    lb: Literal["override-host", "original-dst"] = "override-host",
    request_body: Literal["streamed", "buffered"] = "streamed",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> dict[str, Any]:
    """The configuration as a document (see the module docstring for each choice)."""
    if endpoints and dns:
        raise ValueError("give endpoints or dns, not both")
    if lb not in LB_POLICIES:
        raise ValueError(f"the load-balancing policy is one of {', '.join(LB_POLICIES)}, not {lb!r}")
    if request_body not in REQUEST_BODY_MODES:
        raise ValueError(
            f"the request body mode is one of {', '.join(REQUEST_BODY_MODES)}, not {request_body!r}"
        )
    buffered = request_body == "buffered"
    target = dns if dns is not None or endpoints else DEFAULT_DNS
    if target is not None:
        host, port = _host_port(target)
        lb_endpoints = [{"endpoint": {"address": _address(host, port)}}]
        discovery = "STRICT_DNS"
    else:
        lb_endpoints = [{"endpoint": {"address": _address(*_host_port(e))}} for e in endpoints]
        discovery = "STATIC"
    pickers = [extproc] if isinstance(extproc, str) else list(extproc)
    if not pickers:
        raise ValueError("give at least one picker address")
    picker_hosts = [_host_port(a) for a in pickers]
    picker_endpoints = [{"endpoint": {"address": _address(*hp)}} for hp in picker_hosts]
    # A name (a headless Service) may stand for every replica: Envoy resolves it (STRICT_DNS),
    # one host per address, and the replicas are then health-checked as listed ones are.
    picker_dns = not all(_is_ip(host) for host, _ in picker_hosts)
    several_pickers = len(pickers) > 1 or picker_dns
    ext_proc_filter = {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": "mmgate_extproc"}, "timeout": f"{timeout_s:g}s"},
            "failure_mode_allow": fail_open,
            "message_timeout": f"{timeout_s:g}s",
            "processing_mode": {
                "request_header_mode": "SEND",
                "response_header_mode": "SEND",
                "request_body_mode": "BUFFERED" if buffered else "FULL_DUPLEX_STREAMED",
                "response_body_mode": "STREAMED" if buffered else "FULL_DUPLEX_STREAMED",
                "request_trailer_mode": "SEND",
                "response_trailer_mode": "SEND",
            },
            # The endpoint that served (after Envoy's retries) goes back to mmgate on the response:
            # as the upstream address attribute, and as envoy.lb metadata where a proxy sets it.
            "response_attributes": ["upstream.address"],
            "metadata_options": {"receiving_namespaces": {"untyped": ["envoy.lb"]}},
        },
    }
    action: dict[str, Any] = {
        "cluster": "model_servers",
        "timeout": "0s",  # streams may run long; mmgate and the clients bound them
    }
    if lb == "override-host":
        action["retry_policy"] = {"retry_on": "connect-failure,reset,refused-stream", "num_retries": retries}
    route: dict[str, Any] = {"match": {"prefix": "/"}, "route": action}
    if buffered:  # Envoy holds the whole body for the picker: up to the gateway's body limit
        route["per_request_buffer_limit_bytes"] = max_body_bytes
    manager = {
        "stat_prefix": "mmgate_ingress",
        "codec_type": "AUTO",
        "stream_idle_timeout": f"{timeout_s:g}s",
        "route_config": {
            "name": "mmgate",
            "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [route]}],
        },
        "http_filters": [
            ext_proc_filter,
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                },
            },
        ],
    }
    override_host = {
        "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost",
        "override_host_sources": [
            {"header": DESTINATION},
            {"metadata": {"key": "envoy.lb", "path": [{"key": DESTINATION}]}},
        ],
        "fallback_policy": {
            "policies": [
                {
                    "typed_extension_config": {
                        "name": "envoy.load_balancing_policies.round_robin",
                        "typed_config": {
                            "@type": "type.googleapis.com/"
                            "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"
                        },
                    }
                }
            ]
        },
    }
    model_servers: dict[str, Any]
    if lb == "original-dst":
        model_servers = {
            "name": "model_servers",
            "type": "ORIGINAL_DST",
            "connect_timeout": "3s",
            "lb_policy": "CLUSTER_PROVIDED",
            "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION},
        }
    else:
        model_servers = {
            "name": "model_servers",
            "type": discovery,
            "connect_timeout": "3s",
            "load_balancing_policy": {
                "policies": [
                    {
                        "typed_extension_config": {
                            "name": "envoy.load_balancing_policies.override_host",
                            "typed_config": override_host,
                        }
                    }
                ]
            },
            "load_assignment": {
                "cluster_name": "model_servers",
                "endpoints": [{"lb_endpoints": lb_endpoints}],
            },
        }
    return {
        "admin": {"address": _address("127.0.0.1", admin_port)},
        "static_resources": {
            "listeners": [
                {
                    "name": "mmgate_ingress",
                    "address": _address(listen_host, listen_port),
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": {
                                        "@type": "type.googleapis.com/envoy.extensions.filters.network."
                                        "http_connection_manager.v3.HttpConnectionManager",
                                        **manager,
                                    },
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [
                model_servers,
                {
                    "name": "mmgate_extproc",
                    "type": "STRICT_DNS" if picker_dns else "STATIC",
                    "connect_timeout": "1s",
                    "typed_extension_protocol_options": {
                        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                            "@type": "type.googleapis.com/"
                            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                            "explicit_http_config": {"http2_protocol_options": {}},
                        }
                    },
                    "load_assignment": {
                        "cluster_name": "mmgate_extproc",
                        "endpoints": [{"lb_endpoints": picker_endpoints}],
                    },
                    **(_picker_health(picker_health_interval_s) if several_pickers else {}),
                },
            ],
        },
    }


def _picker_health(interval_s: float) -> dict[str, Any]:
    """Active gRPC health checks on the picker replicas (active-active: every replica whose
    ``envoy.service.ext_proc.v3.ExternalProcessor`` service answers SERVING takes streams), also
    while no stream goes to a replica (``no_traffic_interval``), one failure marking it down.

    Envoy's ``common_lb_config.update_merge_window`` (1 s unless set) merges health-check changes
    on the main thread and hands them to the workers' load balancers when the window ends; the
    admin ``/clusters`` page shows the new state at once. With a few picker hosts there is nothing
    to save by merging, and a stale worker view sends every new stream to a replica already
    known dead (fail closed: a 500 each), so the window is off."""
    every = f"{interval_s:g}s"
    # The picker answers a check from memory; a timeout shorter than a second would mark a busy
    # but live replica down (a dead one is marked down by the refused connection, not the timeout).
    timeout = f"{max(interval_s, 1.0):g}s"
    return {
        "lb_policy": "LEAST_REQUEST",  # as llm-d's chart: a stream goes to the less busy replica
        "common_lb_config": {
            # Never route to a replica marked down (Envoy's default panic mode spreads over every
            # host once too few are healthy; with two replicas, one down is already that).
            "healthy_panic_threshold": {"value": 0},
            "update_merge_window": "0s",  # a health change reaches the workers at once
        },
        # A replica that dies refuses connections before its next check: the first refused (or
        # reset) stream ejects it, so the requests of the rest of that interval go to a live one.
        # Never more than half the replicas, and a passing check brings one back early
        # (successful_active_health_check_uneject_host, on by default).
        "outlier_detection": {
            "split_external_local_origin_errors": True,
            "consecutive_local_origin_failure": 1,
            "max_ejection_percent": 50,
        },
        "health_checks": [
            {
                "timeout": timeout,
                "interval": every,
                "no_traffic_interval": every,
                "unhealthy_threshold": 1,
                "healthy_threshold": 1,
                "grpc_health_check": {"service_name": "envoy.service.ext_proc.v3.ExternalProcessor"},
            }
        ],
    }


def render(**options: Any) -> str:
    """The configuration as YAML text (:func:`envoy_config`'s options), with a header saying what
    it was made for."""
    document = envoy_config(**options)
    cluster = document["static_resources"]["clusters"][0]
    found = {
        "STRICT_DNS": "by DNS (a headless Service: every pod), override_host on the destination list",
        "STATIC": "listed statically, override_host on the destination list",
        "ORIGINAL_DST": "ORIGINAL_DST on the destination header (one endpoint, llm-d's standalone chart)",
    }[cluster["type"]]
    mode = "open (Envoy routes round-robin while mmgate is down)" if options.get("fail_open") else "closed"
    bodies = (
        "request BUFFERED, response STREAMED"
        if options.get("request_body") == "buffered"
        else ("FULL_DUPLEX_STREAMED both ways")
    )
    pickers = document["static_resources"]["clusters"][1]
    replicas = (
        "# Pickers: several replicas, health-checked (docs/envoy.md, several picker replicas).\n"
        if "health_checks" in pickers
        else ""
    )
    header = (
        "# Envoy in front of a vLLM fleet, with mmgate as its endpoint picker (ext_proc).\n"
        "# Written by `mmgate extproc --print-envoy-config`; see docs/envoy.md for each choice.\n"
        f"# Model servers: {found}.\n# Bodies: {bodies}. Failure mode: fail {mode}.\n{replicas}"
    )
    return header + yaml.safe_dump(document, sort_keys=False, width=120)
