"""The ext_proc gRPC server: the ExternalProcessor service, gRPC health, and the admin HTTP port.

Two transports serve the same services: ``lean`` (the default: mmgate's own HTTP/2 layer,
:mod:`.lean`) and ``grpcio`` (grpc.aio, the reference implementation, several times the CPU per
request: docs/benchmarks/extproc.md).

Health uses the standard gRPC health service with the three names GIE's protocol asks for:
``liveness`` (the process serves), ``readiness`` (at least one endpoint is healthy and has answered
a scrape; re-evaluated twice a second) and ``envoy.service.ext_proc.v3.ExternalProcessor`` (the same
as readiness), so Envoy or a Kubernetes gRPC probe can tell a picker with no fleet from a live one.
``/metrics``, ``/ready`` and ``/health`` are served over HTTP on the admin port, as in serve mode.

Stopping drains before it closes (:meth:`Running.stop`): every health service answers NOT_SERVING
while streams are still served for ``drain_s``, so a proxy health-checking its picker cluster
marks this replica down and opens its new streams on another; then the gRPC connections get
GOAWAY (no new streams) and the open streams up to ``grace_s`` to finish; whatever is still open
then is cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from mmgate.gateway.extproc import lean
from mmgate.gateway.extproc.stream import RequestStream
from mmgate.gateway.extproc.transport import Transport
from mmgate.gateway.server import Gateway
from mmgate.http import h2
from mmgate.http.server import HttpServer

log = logging.getLogger("mmgate.extproc")

SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
READY_EVERY_S = 0.5


class ExternalProcessor(ep_grpc.ExternalProcessorServicer):  # type: ignore[misc]  # generated, untyped
    """One :class:`RequestStream` per gRPC stream (Envoy opens one per HTTP request)."""

    def __init__(self, gateway: Gateway, max_endpoints: int | None = None) -> None:
        self.gateway = gateway
        self.max_endpoints = max_endpoints

    async def Process(
        self, request_iterator: AsyncIterator[ep.ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[ep.ProcessingResponse]:
        stream = RequestStream(self.gateway, self.max_endpoints)
        try:
            async for message in request_iterator:
                answers = stream.on_message(message)
                if answers is None:
                    answers = await stream.admitted()
                for answer in answers:  # serialized ones parsed again: this is the reference path
                    if isinstance(answer, ep.ProcessingResponse):
                        yield answer
                    else:
                        yield ep.ProcessingResponse.FromString(
                            answer if isinstance(answer, bytes) else b"".join(answer)
                        )
        finally:
            stream.close()


@dataclass(slots=True)
class Running:
    """A started ext_proc server: its gRPC port and its admin HTTP port."""

    port: int
    admin_port: int
    gateway: Gateway
    admin: HttpServer
    _set_health: Callable[[str, int], None]
    _stop_grpc: Callable[[float], Awaitable[None]]
    _watch: asyncio.Task[None]

    async def stop(self, *, drain_s: float = 0.0, grace_s: float = 1.0) -> None:
        """Report NOT_SERVING and keep serving for ``drain_s`` (a proxy's health checks of its
        picker cluster see it and send new streams elsewhere), then GOAWAY and ``grace_s`` for the
        open streams, then close everything."""
        self._watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._watch
        for name in ("", "liveness", "readiness", SERVICE):
            self._set_health(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        if drain_s > 0:
            await asyncio.sleep(drain_s)
        await self._stop_grpc(grace_s)
        await self.admin.close()
        await self.gateway.stop()


async def start(
    gateway: Gateway,
    *,
    host: str,
    port: int,
    admin_port: int,
    max_endpoints: int | None = None,
    transport: Transport = "lean",
    reuse_port: bool = False,
) -> Running:
    """Start the data layer, the gRPC server on ``host:port`` and the admin port (0: any free).
    ``max_endpoints``: the most endpoints a destination header lists (``None``: as many as the
    picker chose); ``reuse_port``: share both ports with the other processes of ``--workers``
    (SO_REUSEPORT: the kernel spreads connections over them)."""
    await gateway.start()
    try:
        if transport == "lean":
            bound, set_health, stop_grpc = await _start_lean(gateway, host, port, max_endpoints, reuse_port)
        else:
            bound, set_health, stop_grpc = await _start_grpcio(gateway, host, port, max_endpoints)
        admin = HttpServer(gateway.dispatcher(gateway.admin_routes()), gateway.settings.server_limits())
        admin_bound = await admin.listen(host, admin_port, reuse_port=reuse_port)
    except BaseException:
        await gateway.stop()
        raise
    set_health("liveness", health_pb2.HealthCheckResponse.SERVING)
    watch = asyncio.create_task(_watch_readiness(gateway, set_health), name="mmgate-extproc-ready")
    return Running(bound, admin_bound, gateway, admin, set_health, stop_grpc, watch)


async def _start_lean(
    gateway: Gateway, host: str, port: int, max_endpoints: int | None, reuse_port: bool
) -> tuple[int, Callable[[str, int], None], Callable[[float], Awaitable[None]]]:
    statuses: dict[str, int] = {}
    loop = asyncio.get_running_loop()
    connections: set[h2.Connection] = set()  # asyncio keeps none for us; gone ones forget themselves
    serve = lean.services(gateway, statuses, max_endpoints, on_lost=connections.discard)

    def accept() -> h2.Connection:
        conn = serve()
        connections.add(conn)
        return conn

    server = await loop.create_server(accept, host, port, reuse_address=True, reuse_port=reuse_port or None)
    sock = server.sockets[0]
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def set_health(name: str, status: int) -> None:
        statuses[name] = status

    async def stop(grace_s: float) -> None:
        server.close()  # no new connections; the open ones are ours to end (Python 3.11 keeps them)
        open_ = list(connections)
        for conn in open_:
            conn.goaway()
        deadline = time.monotonic() + grace_s
        while any(not c.idle for c in open_) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for conn in open_:
            conn.close()

    return int(sock.getsockname()[1]), set_health, stop


async def _start_grpcio(
    gateway: Gateway, host: str, port: int, max_endpoints: int | None
) -> tuple[int, Callable[[str, int], None], Callable[[float], Awaitable[None]]]:
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ]
    )
    ep_grpc.add_ExternalProcessorServicer_to_server(ExternalProcessor(gateway, max_endpoints), server)
    checks = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port} for gRPC")
    await server.start()

    async def stop(grace_s: float) -> None:
        checks.enter_graceful_shutdown()
        await server.stop(grace=grace_s)  # GOAWAY, open RPCs get grace_s, then cancelled

    return bound, checks.set, stop


async def _watch_readiness(gateway: Gateway, set_health: Callable[[str, int], None]) -> None:
    serving = health_pb2.HealthCheckResponse.SERVING
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
    while True:
        status = serving if gateway.data.ready() else not_serving
        for name in ("", "readiness", SERVICE):
            set_health(name, status)
        await asyncio.sleep(READY_EVERY_S)
