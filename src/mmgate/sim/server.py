"""One simulated vLLM pod: the OpenAI HTTP API, ``/metrics``, KV events, roles and faults.

Every response carries ``x-mmgate-sim-pod: <name>`` so a test can see where a request landed.
Client mistakes get OpenAI-shaped 4xx errors naming the field; injected faults get 429/500/503 or a
reset connection; ``/admin/faults`` changes the faults while running.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import json
import socket
import struct
import uuid
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import orjson
from aiohttp import web

from mmgate.errors import RequestError
from mmgate.modelserver import routes
from mmgate.modelserver.kv_publisher import KVEventPublisher, kv_topic
from mmgate.modelserver.openai_output import Usage
from mmgate.modelserver.stats import EngineStats
from mmgate.modelserver.transfer import encoder_response_params, prefill_response_params
from mmgate.request.view import API_PATHS, Api, Modality
from mmgate.sim.answers import writer_for
from mmgate.sim.core import Engine
from mmgate.sim.core.media import payloads_of
from mmgate.sim.core.types import SimRequest, StepOutput
from mmgate.sim.driver import Driver, Flight
from mmgate.sim.encode_only import EncodeOnly
from mmgate.sim.faults import ERROR_STATUS, ERROR_TYPE, Faults, Outcome
from mmgate.sim.ingest import Ingested, ingest
from mmgate.sim.lora import LoraSlots
from mmgate.sim.metrics import PodMetrics
from mmgate.sim.output import Writer
from mmgate.sim.pooling_output import pooling_body, tokenizer_body
from mmgate.sim.profiles import family_of, load_profile
from mmgate.sim.roles import Role, transfer_seconds
from mmgate.sim.spec import PodSpec, engine_config, transfer_times
from mmgate.tokens import PricingConfig
from mmgate.vllm.blocks import LoRA

if TYPE_CHECKING:
    from mmgate.tokens.exact.tokenizer import EngineTokenizer

POD_HEADER = "x-mmgate-sim-pod"
_ID_PREFIX = {Api.CHAT: "chatcmpl", Api.COMPLETIONS: "cmpl"}  # the others' writers add their own
TRACE_PARENTS_KEPT = 256


def error_response(err: RequestError, pod: str) -> web.Response:
    return routes.error_response(err, {POD_HEADER: pod})


class SimPod:
    """A simulated pod bound to one port. ``await start()``, then ``url``; ``await stop()``."""

    def __init__(self, spec: PodSpec) -> None:
        spec.validate()
        self.spec = spec
        self.name = spec.name
        self.profile = load_profile(spec.profile)
        self.model = spec.model or self.profile.model or self.profile.name
        self.pricing = PricingConfig(family=spec.family or family_of(self.profile))
        self.tokenizer = self._tokenizer(spec)
        self.config = engine_config(spec)
        self.kv_transfer_s, self.ec_transfer_s = transfer_times(spec, self.profile)
        self.engine = Engine(self.profile, self.config)
        self.encoder = (
            EncodeOnly(
                self.profile,
                mode=self.config.mm_encoder_tp_mode,
                lanes=self.config.tensor_parallel_size,
                front_workers=self.config.preprocess_workers,
            )
            if spec.role is Role.ENCODE
            else None
        )
        self.faults = Faults(spec.faults, seed=spec.seed)
        self.metrics = PodMetrics(model_name=self.model, prefix_caching=self.config.enable_prefix_caching)
        self.lora: LoraSlots | None = None
        if spec.lora_modules:
            self.lora = self.metrics.lora = LoraSlots(spec.lora_modules, spec.max_loras, spec.lora_load_s)
        self._lora_freed = asyncio.Event()
        self.engine_id = f"{spec.name}-{uuid.uuid4().hex[:8]}"
        self.publisher: KVEventPublisher | None = None
        self.driver: Driver | None = None
        self.port = spec.port
        self._runner: web.AppRunner | None = None
        self._ids = itertools.count()
        self._trace_parents: collections.deque[str] = collections.deque(maxlen=TRACE_PARENTS_KEPT)

    @property
    def trace_parents(self) -> tuple[str, ...]:
        """The W3C ``traceparent`` of the latest requests that carried one, oldest first: where
        vLLM would hang its own spans (``--otlp-traces-endpoint``), for tests to check."""
        return tuple(self._trace_parents)

    def _tokenizer(self, spec: PodSpec) -> EngineTokenizer | None:
        """The model folder's tokenizer (``--tokenizer``), checked against the pod's family."""
        if not spec.tokenizer:
            return None
        from mmgate.tokens.exact.tokenizer import load_engine_tokenizer

        try:
            tokenizer = load_engine_tokenizer(spec.tokenizer)
            tokenizer.placeholder_ids(self.pricing.family)
        except ValueError as exc:
            raise ValueError(f"pod {spec.name}: tokenizer: {exc}") from None
        return tokenizer

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.spec.host}:{self.port}"

    @property
    def kv_endpoint(self) -> str | None:
        return None if self.publisher is None else self.publisher.endpoint

    @property
    def kv_replay_endpoint(self) -> str | None:
        return None if self.publisher is None else self.publisher.replay_endpoint

    async def start(self) -> None:
        self.driver = Driver(
            self.engine,
            metrics=self.metrics,
            faults=self.faults,
            time_scale=self.spec.time_scale,
            on_step=self._after_step,
        )
        self.driver.start()
        app = web.Application(client_max_size=256 * 1024 * 1024)
        for path, api in API_PATHS.items():
            app.router.add_post(path, self._handler(api))
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/admin/faults", self._get_faults)
        app.router.add_post("/admin/faults", self._set_faults)
        app.router.add_post("/reset_prefix_cache", self._reset_prefix_cache)
        self._runner, self.port = await routes.listen(app, self.spec.host, self.spec.port)
        kv = self.spec.kv_events
        if kv is not None and kv.active:
            topic = kv_topic(kv.topic, pod=self.name, host=self.spec.host, port=self.port, model=self.model)
            kv = msgspec.structs.replace(kv, topic=topic)
            self.publisher = KVEventPublisher(
                kv, fmt=self.spec.kv_events_format, int_hashes=self.spec.kv_events_int_hashes
            )
            self.publisher.start()

    async def stop(self) -> None:
        if self.driver is not None:
            await self.driver.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.publisher is not None:
            await self.publisher.close()

    def _after_step(self, out: StepOutput) -> None:
        if self.publisher is not None and out.events:
            self.publisher.publish(out.events)

    # --- small endpoints ---------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        if self.driver is not None and self.driver.failed is not None:
            return web.Response(status=503, text="engine failed\n", headers={POD_HEADER: self.name})
        return web.Response(headers={POD_HEADER: self.name})

    async def _models(self, request: web.Request) -> web.Response:
        adapters = None if self.lora is None else self.lora.modules
        headers = {POD_HEADER: self.name}
        return routes.models_response(self.model, self.profile.engine.max_model_len, headers, adapters)

    async def _metrics(self, request: web.Request) -> web.Response:
        return routes.metrics_response(self.metrics.render(self.stats), {POD_HEADER: self.name})

    def stats(self) -> EngineStats:
        """The pod's counters as ``/metrics`` shows them (engine, plus the encoder's cache)."""
        stats = self.engine.stats()
        if self.encoder is not None:
            stats = self.encoder.merge_stats(stats)
        return stats

    async def _reset_prefix_cache(self, request: web.Request) -> web.Response:
        """vLLM's dev endpoint: drop every cached block (refused while blocks are in use)."""
        if not self.engine.reset_prefix_cache():
            err = RequestError("prefix cache is in use by running requests", status=409, type="conflict")
            return error_response(err, self.name)
        self.metrics.touch()  # AllBlocksCleared goes out with the next step's batch, as in vLLM
        return web.Response(headers={POD_HEADER: self.name})

    async def _get_faults(self, request: web.Request) -> web.Response:
        return web.json_response(self.faults.snapshot(), headers={POD_HEADER: self.name})

    async def _set_faults(self, request: web.Request) -> web.Response:
        try:
            changes = json.loads(await request.read() or b"{}")
            if not isinstance(changes, dict):
                raise ValueError("body must be a JSON object")
            self.faults.update(changes)
        except ValueError as exc:
            return error_response(RequestError(str(exc)), self.name)
        if self.driver is not None:
            self.driver.nudge()
        return web.json_response(self.faults.snapshot(), headers={POD_HEADER: self.name})

    # --- the APIs ----------------------------------------------------------------------------

    def _handler(self, api: Api) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(request: web.Request) -> web.StreamResponse:
            return await self._serve(request, api)

        return handler

    async def _serve(self, request: web.Request, api: Api) -> web.StreamResponse:
        body = await request.read()
        traceparent = request.headers.get("traceparent")
        if traceparent is not None:
            self._trace_parents.append(traceparent)
        try:
            job = ingest(
                body,
                request.headers,
                api,
                self.pricing,
                natural_output_tokens=self.spec.natural_output_tokens,
                tokenizer=self.tokenizer,
            )
            adapter = self._adapter_of(job.view.model)
            if job.view.model and job.view.model != self.model and adapter is None:
                raise routes.unknown_model(job.view.model)
        except RequestError as err:
            return error_response(err, self.name)
        outcome = self.faults.draw()
        if outcome in ERROR_STATUS:
            fault = RequestError(
                f"simulated fault: {outcome.value}", status=ERROR_STATUS[outcome], type=ERROR_TYPE[outcome]
            )
            return error_response(fault, self.name)
        # The client's x-request-id names the response; the engine gets a pod-unique id so two
        # requests with the same header (retries, fan-out) never collide.
        n = next(self._ids)
        request_id = (
            request.headers.get("x-request-id") or f"{_ID_PREFIX.get(api, api.value)}-{self.name}-{n}"
        )
        if api in (Api.TOKENIZE, Api.DETOKENIZE):  # vLLM's frontend answers these; the engine never sees them
            tokens = list(job.view.prompt_token_ids or job.sequence.token_ids)
            body = tokenizer_body(api, tokens, self.profile.engine.max_model_len)
            return web.Response(body=body, headers={POD_HEADER: self.name}, content_type="application/json")
        if self.spec.role is Role.ENCODE:
            return await self._encode_only(request, job, request_id)
        if adapter is not None:
            await self._load_adapter(adapter)
        try:
            return await self._generate(
                request, job, request_id, f"{request_id}#{n}", api, outcome is Outcome.RESET
            )
        finally:
            if adapter is not None:
                self._release_adapter(adapter)

    # --- LoRA adapters -----------------------------------------------------------------------

    def _lora_key(self, model: str) -> LoRA | None:
        """The adapter as vLLM keys its requests' blocks (name and path), None for the base model."""
        if self.lora is None or model not in self.lora.modules:
            return None
        return LoRA(model, self.lora.modules[model])

    def _adapter_of(self, model: str) -> str | None:
        """``model`` when it names one of the pod's adapters (vLLM serves them by name)."""
        return model if self.lora is not None and model in self.lora.modules else None

    async def _load_adapter(self, name: str) -> None:
        """Take an adapter slot: wait while every slot is busy with other adapters, then pay the
        load time when the adapter was not resident."""
        assert self.lora is not None
        slots = self.lora
        cost = slots.acquire(name)
        if cost is None:
            slots.wait(name)
            self.metrics.touch()
            try:
                while (cost := slots.acquire(name)) is None:
                    self._lora_freed.clear()
                    await self._lora_freed.wait()
            finally:
                slots.wait(name, -1)
        self.metrics.touch()
        if cost:
            try:
                await asyncio.sleep(cost * self.spec.time_scale)
            except BaseException:  # the client left while the adapter loaded: give the slot back
                self._release_adapter(name)
                raise

    def _release_adapter(self, name: str) -> None:
        assert self.lora is not None
        self.lora.release(name)
        self.metrics.touch()
        self._lora_freed.set()

    async def _generate(
        self, request: web.Request, job: Ingested, request_id: str, engine_id: str, api: Api, reset: bool
    ) -> web.StreamResponse:
        assert self.driver is not None
        driver = self.driver
        transfer = job.transfer
        n_out = 1 if transfer.remote_decode else job.output_tokens
        reason = "length" if transfer.remote_decode else job.reason
        prompt_tokens = len(job.sequence)
        block_size = self.engine.block_size
        seq = job.sequence
        # The KV cache, or the encoder outputs, arrive over the wire instead of being computed here.
        wire_s = transfer_seconds(
            transfer,
            prompt_tokens,
            seq.mm_items,
            kv_s_per_token=self.kv_transfer_s,
            ec_s_per_token=self.ec_transfer_s,
        )
        if wire_s > 0:
            await asyncio.sleep(wire_s * self.spec.time_scale)
        sim = SimRequest(
            engine_id,
            seq.token_ids,
            seq.mm_items,
            n_out,
            job.view.cache_salt,
            remote_prefill=transfer.remote_prefill,
            remote_encoded=transfer.remote_encoded,
            media=payloads_of(job.view.assets),
            lora=self._lora_key(job.view.model),
        )
        choices = 1
        if api in (Api.CHAT, Api.COMPLETIONS):
            try:
                choices = job.knobs.checked_choices(streamable=False)
            except RequestError as err:
                return error_response(err, self.name)
        arrival = await driver.preprocess(sim)
        # n choices are n sequences of one prompt, as vLLM runs them: the later ones find the
        # prompt's blocks cached by the first.
        siblings = [dataclasses.replace(sim, request_id=f"{engine_id}/{i}") for i in range(1, choices)]
        flights: list[Flight] = []
        try:
            for sequence in (sim, *siblings):
                flights.append(driver.submit(sequence, arrival))
        except (ValueError, RuntimeError) as exc:
            for submitted in flights:
                driver.abort(submitted)
            if isinstance(exc, ValueError):
                return error_response(RequestError(str(exc), param="messages"), self.name)
            return error_response(RequestError(str(exc), status=503, type="service_unavailable"), self.name)
        flight, others = flights[0], flights[1:]
        audio = [a.duration_s or 0.0 for a in job.pricing.assets if a.modality is Modality.AUDIO]
        # vLLM answers with the model the request named: the adapter's name for a LoRA request.
        served = self.model if self._adapter_of(job.view.model) is None else job.view.model
        writer = writer_for(
            api,
            request_id,
            served,
            offset=zlib.crc32(request_id.encode()) & 0xFF,
            include_usage=job.knobs.include_usage,
            prompt_tokens=prompt_tokens,
            duration_s=sum(audio),
        )
        extra: dict[str, Any] | None = None
        if transfer.remote_decode:
            extra = {
                "kv_transfer_params": prefill_response_params(
                    engine_id=self.engine_id,
                    request_id=request_id,
                    host=self.spec.host,
                    port=self.port,
                    block_ids=list(range(-(-prompt_tokens // block_size))),
                    num_tokens=prompt_tokens,
                )
            }
        try:
            if job.knobs.stream:
                return await self._stream(request, flight, writer, job, reason, extra, reset)
            for each in (flight, *others):
                while not each.finished:
                    await each.wait()
                if each.reason == "abort":
                    raise RequestError("request aborted", status=503, type="server_error")
            usage = self._usage(flight, prompt_tokens)
            if reset:
                _reset(request)
            if not api.generates:
                knobs = job.knobs
                body = pooling_body(
                    api,
                    request_id,
                    self.model,
                    items=int(str(job.view.extra.get("prompt_count", 1))),
                    prompt_tokens=prompt_tokens,
                    dimensions=knobs.dimensions,
                    encoding_format=knobs.encoding_format,
                    top_n=knobs.top_n,
                )
            elif others:
                body = self._choices_body(api, request_id, job, (flight, *others), reason, usage, extra)
            else:
                body = writer.body(flight.emitted, reason, usage, extra)
            return web.Response(body=body, headers={POD_HEADER: self.name}, content_type="application/json")
        except RequestError as err:
            return error_response(err, self.name)
        finally:
            driver.abort(flight)
            for other in others:
                driver.abort(other)

    def _choices_body(
        self,
        api: Api,
        request_id: str,
        job: Ingested,
        flights: Sequence[Flight],
        reason: str,
        usage: Usage,
        extra: dict[str, Any] | None,
    ) -> bytes:
        """One answer with a choice per flight (``n``), each its own text; usage counts every
        choice's tokens, as vLLM's does."""
        out: dict[str, Any] = {}
        for index, each in enumerate(flights):
            offset = zlib.crc32(f"{request_id}/{index}".encode()) & 0xFF
            writer = writer_for(api, request_id, self.model, offset=offset)
            doc = orjson.loads(writer.body(each.emitted, reason, usage, extra))
            doc["choices"][0]["index"] = index
            if not out:
                out = doc
            else:
                out["choices"].append(doc["choices"][0])
        completion = sum(each.emitted for each in flights)
        out["usage"] = Usage(usage.prompt_tokens, completion, usage.cached_tokens).to_dict()
        return orjson.dumps(out)

    async def _stream(
        self,
        request: web.Request,
        flight: Flight,
        writer: Writer,
        job: Ingested,
        reason: str,
        extra: dict[str, Any] | None,
        reset: bool,
    ) -> web.StreamResponse:
        # Like vLLM, nothing (not even headers or the role chunk) goes out before the first token:
        # a gateway may still retry elsewhere until then.
        resp = web.StreamResponse(headers={**routes.SSE_HEADERS, POD_HEADER: self.name})
        while not flight.emitted and not flight.finished:
            await flight.wait()
        if flight.reason == "abort":
            raise RequestError("the pod is shutting down", status=503, type="service_unavailable")
        sink = _TokenSink(writer, request.transport)
        try:
            await resp.prepare(request)
            await resp.write(writer.role_chunk() + sink.take(flight))
            if reset:
                _reset(request)
                return resp
            if resp.headers.get("Transfer-Encoding") == "chunked":
                flight.sink = sink  # from now on tokens go to the socket at each step's end
            while not flight.finished and not sink.broken:
                if flight.sink is None:
                    data = sink.take(flight)
                    if data:
                        await resp.write(data)
                await flight.wait()
            flight.sink = None
            if sink.broken or flight.reason == "abort":
                _reset(request)
                return resp
            tail = sink.take(flight)
            usage = self._usage(flight, len(job.sequence))
            # The last events and the end of the body in one write, as a client reads them.
            await resp.write_eof(tail + writer.finish(reason, usage, extra))
        except ConnectionResetError:
            # The client went away (as vLLM does, the request is aborted: the caller's finally).
            flight.sink = None
        return resp

    def _usage(self, flight: Flight, prompt_tokens: int) -> Usage:
        return Usage(prompt_tokens, flight.emitted, flight.cached_tokens)

    async def _encode_only(self, request: web.Request, job: Ingested, request_id: str) -> web.StreamResponse:
        """``--mm-encoder-only``: load the media, run the encoder for the items, answer with
        ``ec_transfer_params``."""
        assert self.encoder is not None
        items = [(item.identity, item.length, item.modality.value) for item in job.sequence.mm_items]
        media = payloads_of(job.view.assets)
        await self.encoder.encode(items, self.faults, self.spec.time_scale, media)
        self.metrics.touch()
        triples = [(a.identity, a.modality.value, a.tokens) for a in job.pricing.assets]
        params = encoder_response_params(triples, host=self.spec.host, port=self.port)
        writer = writer_for(job.view.api, request_id, self.model)
        usage = Usage(len(job.sequence), 0, 0)
        return web.Response(
            body=writer.body(0, "length", usage, {"ec_transfer_params": params}),
            headers={POD_HEADER: self.name},
            content_type="application/json",
        )


class _TokenSink:
    """Writes a stream's new tokens to its socket as one HTTP/1.1 chunk per engine step.

    Called synchronously by the driver; a gone or hopelessly slow client marks the stream broken
    and wakes its handler, which then aborts the request.
    """

    MAX_BUFFER = 8 << 20  # bytes queued for a client that does not read

    __slots__ = ("broken", "sent", "transport", "writer")

    def __init__(self, writer: Writer, transport: asyncio.Transport | None) -> None:
        self.writer = writer
        self.transport = transport
        self.sent = 0
        self.broken = False

    def take(self, flight: Flight) -> bytes:
        """SSE bytes of the tokens emitted since the last call."""
        n = flight.emitted - self.sent
        if n <= 0:
            return b""
        data = self.writer.tokens(self.sent, n)
        self.sent = flight.emitted
        return data

    def __call__(self, flight: Flight) -> None:
        data = self.take(flight)
        if not data:
            return  # an empty HTTP chunk would end the response
        t = self.transport
        if t is None or t.is_closing() or t.get_write_buffer_size() > self.MAX_BUFFER:
            self.broken = True
            flight.wake()
            return
        t.write(b"%x\r\n%b\r\n" % (len(data), data))


def _reset(request: web.Request) -> None:
    """Drop the connection with a TCP reset (SO_LINGER 0), as a crashing server would."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
