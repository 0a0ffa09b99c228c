"""The reference engine over HTTP: vLLM's OpenAI chat endpoint, ``/v1/models``, ``/health``,
``/metrics`` and KV events, with the simulator's shapes (:mod:`mmgate.modelserver`).

Every answer carries ``x-mmgate-engine: <name>`` so a test can see where a request landed. Like
vLLM, a stream sends nothing (not even headers) before the first token, so a request the engine
refuses while reading its images still gets a plain 400, and a gateway may retry elsewhere until
then. Decoding is greedy: ``temperature``, ``top_p`` and ``seed`` are accepted and not used.
Metric times are wall seconds on the server's monotonic clock.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson
from aiohttp import web

from mmgate.errors import RequestError
from mmgate.modelserver import routes
from mmgate.modelserver.knobs import decode_body, read_knobs
from mmgate.modelserver.kv_publisher import KVEventPublisher, kv_topic
from mmgate.modelserver.metrics import MetricLines, ServerMetrics
from mmgate.modelserver.openai_output import OpenAIWriter, Usage
from mmgate.refengine.prompt import ChatPrompt, prompt_from_messages
from mmgate.refengine.runtime import Engine, GenerateRequest, StageSeconds, StepOutput
from mmgate.refengine.server_worker import EngineWorker, Step
from mmgate.refengine.transfer import FeatureServer
from mmgate.request.view import Api
from mmgate.vllm.kv_events_config import KVEventsConfig
from mmgate.vllm.kvevents import WireFormat

ENGINE_HEADER = "x-mmgate-engine"
CHAT_PATH = "/v1/chat/completions"


class _ChatFields(msgspec.Struct):
    """What the engine reads of a chat body besides the knobs (:mod:`mmgate.modelserver.knobs`)."""

    model: str = ""
    messages: Any = None
    cache_salt: str | None = None


_CHAT_FIELDS = msgspec.json.Decoder(_ChatFields)


class EngineMetrics(ServerMetrics):
    """vLLM's families plus the engine's time per stage (cumulative wall seconds), which say where
    a request's time went: the processor, the vision encoder, prefill and decode."""

    def __init__(self, *, model_name: str, prefix_caching: bool) -> None:
        super().__init__(
            model_name=model_name,
            prefix_caching=prefix_caching,
            namespace="mmgate_engine",
            describe="mmgate engine",
        )
        self.stages = StageSeconds()

    def extra(self, out: MetricLines) -> None:
        s = self.stages
        for stage, seconds in (
            ("processor", s.processor),
            ("encoder", s.encoder),
            ("prefill", s.prefill),
            ("decode", s.decode),
        ):
            out.counter(
                f"mmgate_engine:{stage}_seconds",
                seconds,
                f"mmgate engine: wall seconds spent in the {stage}.",
            )


@dataclass(slots=True, eq=False)
class Flight:
    """One request in the engine as its handler sees it (times: ``time.monotonic()``)."""

    request_id: str
    arrival: float
    outputs: asyncio.Queue[StepOutput | RequestError] = field(default_factory=asyncio.Queue)
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished: bool = False


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """How the server is reached and what it publishes (the engine's own knobs are its config)."""

    name: str = "engine"
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str | None = None
    default_max_tokens: int = 256
    kv_events: KVEventsConfig | None = None
    kv_events_format: WireFormat = WireFormat.CURRENT
    kv_events_int_hashes: bool = True
    encoder_only: bool = False  # --mm-encoder-only: answer with ec_transfer_params, no language model
    ec_transfer_port: int = 0  # where an encode-only engine's features wait (0 = a free port)
    ec_advertised_host: str | None = None  # the address consumers are told (default: --host)


class EngineServer:
    """An engine bound to one port. ``await start()``, then ``url``; ``await stop()``."""

    def __init__(self, engine: Engine, settings: ServerSettings) -> None:
        self.engine = engine
        self.settings = settings
        self.name = settings.name
        self.model = settings.served_model_name or engine.model.name
        self.port = settings.port
        self.metrics = EngineMetrics(
            model_name=self.model, prefix_caching=engine.config.enable_prefix_caching
        )
        self.publisher: KVEventPublisher | None = None
        self.worker: EngineWorker | None = None
        self.features: FeatureServer | None = None
        self._flights: dict[str, Flight] = {}
        self._runner: web.AppRunner | None = None
        self._ids = itertools.count()
        self._headers = {ENGINE_HEADER: self.name}

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.port}"

    @property
    def kv_endpoint(self) -> str | None:
        return None if self.publisher is None else self.publisher.endpoint

    @property
    def ec_address(self) -> tuple[str, int] | None:
        """Where an encode-only engine serves the features it computed (None otherwise)."""
        return None if self.features is None else self.features.address

    async def start(self) -> None:
        self.worker = EngineWorker(self.engine, asyncio.get_running_loop(), self._after_step)
        self.worker.start()
        if self.settings.encoder_only:
            self.features = FeatureServer(
                self.settings.host,
                self.settings.ec_transfer_port,
                advertised_host=self.settings.ec_advertised_host,
            ).start()
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post(CHAT_PATH, self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        self._runner, self.port = await routes.listen(app, self.settings.host, self.settings.port)
        kv = self.settings.kv_events
        if kv is not None and kv.active:
            host = self.settings.host
            topic = kv_topic(kv.topic, pod=self.name, host=host, port=self.port, model=self.model)
            self.publisher = KVEventPublisher(
                msgspec.structs.replace(kv, topic=topic),
                fmt=self.settings.kv_events_format,
                int_hashes=self.settings.kv_events_int_hashes,
            )
            self.publisher.start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.worker is not None:
            await self.worker.stop()
        if self.publisher is not None:
            await self.publisher.close()
        if self.features is not None:
            self.features.close()

    # --- the worker's steps, on the loop ----------------------------------------------------

    def _after_step(self, step: Step) -> None:
        now = time.monotonic()
        m = self.metrics
        for request_id, err in step.refused:
            flight = self._flights.pop(request_id, None)
            if flight is not None:
                flight.finished = True
                flight.outputs.put_nowait(err)
        for out in step.outputs:
            flight = self._flights.get(out.request_id)
            if flight is None:
                continue  # aborted meanwhile
            if flight.scheduled_at is None:
                flight.scheduled_at = step.started
                flight.first_token_at = now
                m.ttft.observe(now - flight.arrival)
            elif flight.last_token_at is not None:
                m.itl.observe(now - flight.last_token_at)
            flight.last_token_at = now
            if out.finished:
                flight.finished = True
                del self._flights[out.request_id]
                reason = out.finish_reason or "stop"
                m.request_success[reason] = m.request_success.get(reason, 0) + 1
                m.finished(
                    flight.arrival,
                    flight.arrival,
                    flight.scheduled_at,
                    flight.first_token_at,
                    now,
                    out.completion_tokens,
                )
            flight.outputs.put_nowait(out)
        if step.failed is not None:
            err = RequestError("the engine failed", status=503, type="service_unavailable")
            for flight in self._flights.values():
                flight.finished = True
                flight.outputs.put_nowait(err)
            self._flights.clear()
        if self.publisher is not None and step.events:
            self.publisher.publish(step.events)
        m.stages = step.stages
        m.touch()

    # --- small endpoints --------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        if self.worker is None or self.worker.failed is not None:
            return web.Response(status=503, text="engine failed\n", headers=self._headers)
        return web.Response(headers=self._headers)

    async def _models(self, request: web.Request) -> web.Response:
        return routes.models_response(self.model, self.engine.config.max_model_len, self._headers)

    async def _metrics(self, request: web.Request) -> web.Response:
        worker = self.worker
        assert worker is not None
        return routes.metrics_response(self.metrics.render(lambda: worker.stats), self._headers)

    # --- chat -------------------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        arrival = time.monotonic()
        worker = self.worker
        assert worker is not None
        body = await request.read()
        try:
            knobs = read_knobs(body)
            limit = knobs.checked_limit()
            chat = decode_body(_CHAT_FIELDS, body)
            if chat.model and chat.model != self.model:
                raise routes.unknown_model(chat.model)
            prompt = prompt_from_messages(chat.messages)
            if worker.failed is not None:
                raise RequestError("the engine failed", status=503, type="service_unavailable")
        except RequestError as err:
            return routes.error_response(err, self._headers)
        response_id = request.headers.get("x-request-id") or f"chatcmpl-{uuid.uuid4().hex}"
        writer = OpenAIWriter(Api.CHAT, response_id, self.model, include_usage=knobs.include_usage)
        if self.features is not None:
            return await self._encode_only(worker, self.features, prompt, writer)
        n = next(self._ids)
        engine_id = f"{response_id}#{n}"  # two requests with one x-request-id never collide
        flight = Flight(engine_id, arrival)
        self._flights[engine_id] = flight
        max_tokens = limit if limit is not None else self.settings.default_max_tokens
        worker.submit(
            GenerateRequest(
                engine_id,
                prompt,
                max_tokens=max_tokens,
                ignore_eos=knobs.ignore_eos,
                cache_salt=chat.cache_salt,
                ec_transfer_params=knobs.ec_transfer_params,
            )
        )
        try:
            first = await flight.outputs.get()
            if isinstance(first, RequestError):
                return routes.error_response(first, self._headers)
            if knobs.stream:
                return await self._stream(request, flight, writer, first)
            texts = [first.text]
            last = first
            while not last.finished:
                got = await flight.outputs.get()
                if isinstance(got, RequestError):
                    return routes.error_response(got, self._headers)
                texts.append(got.text)
                last = got
            body = writer.text_body("".join(texts), last.finish_reason or "stop", _usage(last))
            return web.Response(body=body, headers=self._headers, content_type="application/json")
        finally:
            if not flight.finished:
                self._flights.pop(engine_id, None)
                worker.abort(engine_id)
                self.metrics.request_success["abort"] += 1
                self.metrics.touch()

    async def _encode_only(
        self, worker: EngineWorker, features: FeatureServer, prompt: ChatPrompt, writer: OpenAIWriter
    ) -> web.Response:
        """``--mm-encoder-only``: encode the images (processor and encoder caches as usual), hold
        the features for the prefill engine to fetch, and answer with the ``ec_transfer_params``
        naming them, as vLLM's encoder instance does (no tokens)."""
        try:
            params = await worker.call(lambda engine: features.publish(engine.encode(prompt)))
        except RequestError as err:
            return routes.error_response(err, self._headers)
        tokens = sum(int(p.get("num_tokens", 0)) for p in params.values())
        body = writer.text_body("", "length", Usage(tokens, 0, 0), {"ec_transfer_params": params})
        return web.Response(body=body, headers=self._headers, content_type="application/json")

    async def _stream(
        self, request: web.Request, flight: Flight, writer: OpenAIWriter, first: StepOutput
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={**routes.SSE_HEADERS, **self._headers})
        try:
            await resp.prepare(request)
            await resp.write(writer.role_chunk() + _delta(writer, first))
            last, tail = first, b""
            while not last.finished:
                got = await flight.outputs.get()
                if isinstance(got, RequestError):
                    # the headers are out: end the stream as vLLM reports a failure mid-stream
                    await resp.write_eof(b"data: " + orjson.dumps(got.to_dict()) + b"\n\ndata: [DONE]\n\n")
                    return resp
                last = got
                if got.finished:
                    tail = _delta(writer, got)  # the last token and the end in one write
                else:
                    data = _delta(writer, got)
                    if data:
                        await resp.write(data)
            await resp.write_eof(tail + writer.finish(last.finish_reason or "stop", _usage(last)))
        except ConnectionResetError:
            pass  # the client went away; the caller's finally aborts the request
        return resp


def _delta(writer: OpenAIWriter, out: StepOutput) -> bytes:
    """The SSE event of a step's text (nothing while a multi-byte character is incomplete)."""
    return writer.delta(out.text) if out.text else b""


def _usage(out: StepOutput) -> Usage:
    return Usage(out.prompt_tokens, out.completion_tokens, out.cached_tokens)
