"""A model server's ``/metrics``, with vLLM's metric names and labels.

Hand-written Prometheus text rather than ``prometheus_client``: a gateway scrapes eight pods every
50 ms, and token-level histograms are observed once per engine step for a whole batch
(``observe(value, n)``), which ``prometheus_client`` cannot do without a loop. The rendered text is
cached until something changes (see ``docs/benchmarks/sim.md`` for the measured cost).

vLLM has no encoder-cache metric, so the encoder-cache counters are mmgate's own, under the
server's namespace (``mmgate_sim:`` for a simulated pod, ``mmgate_engine:`` for the reference
engine); everything else is spelt as vLLM spells it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Protocol

# Bucket bounds as vLLM defines them (vllm/v1/metrics/loggers.py and buckets.py).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
"""vLLM's ``request_latency_buckets``: end-to-end, queue, prefill, decode and inference time."""


class Histogram:
    """Cumulative-on-render histogram; ``observe(v, n)`` records ``n`` equal observations at once."""

    __slots__ = ("_counts", "_text", "_text_count", "bounds", "count", "les", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.les = (*(repr(float(b)) for b in self.bounds), "+Inf")
        self._counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum = 0.0
        self._text = ""
        self._text_count = -1

    def observe(self, value: float, n: int = 1) -> None:
        self._counts[bisect_left(self.bounds, value)] += n
        self.count += n
        self.sum += value * n

    def samples(self, name: str, labels: str) -> str:
        """The ``_bucket``/``_count``/``_sum`` lines, re-rendered only after an observation (most
        request-level histograms change once per finished request, not every step)."""
        if self._text_count != self.count:
            lines = [
                f'{name}_bucket{{{labels},le="{le}"}} {_num(c)}'
                for le, c in zip(self.les, self.cumulative(), strict=True)
            ]
            lines.append(f"{name}_count{{{labels}}} {_num(self.count)}")
            lines.append(f"{name}_sum{{{labels}}} {_num(self.sum)}")
            self._text = "\n".join(lines)
            self._text_count = self.count
        return self._text

    def cumulative(self) -> list[int]:
        out: list[int] = []
        running = 0
        for c in self._counts:
            running += c
            out.append(running)
        return out


class ServerStats(Protocol):
    """The counters ``/metrics`` shows, as one snapshot (:class:`mmgate.modelserver.stats.EngineStats`,
    which both engines fill, or anything shaped like it). Cache counters are cumulative: prefix
    cache in tokens, encoder and processor caches in media items."""

    @property
    def num_running(self) -> int: ...
    @property
    def num_waiting(self) -> int: ...
    @property
    def kv_cache_usage(self) -> float: ...
    @property
    def prefix_cache_queries(self) -> int: ...
    @property
    def prefix_cache_hits(self) -> int: ...
    @property
    def processor_cache_queries(self) -> int: ...
    @property
    def processor_cache_hits(self) -> int: ...
    @property
    def encoder_cache_queries(self) -> int: ...
    @property
    def encoder_cache_hits(self) -> int: ...
    @property
    def num_preemptions(self) -> int: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def generation_tokens(self) -> int: ...
    @property
    def num_gpu_blocks(self) -> int: ...
    @property
    def block_size(self) -> int: ...


class MetricLines:
    """The Prometheus text of one scrape, family by family, with the server's labels on every
    sample."""

    __slots__ = ("labels", "lines")

    def __init__(self, labels: str) -> None:
        self.labels = labels
        self.lines: list[str] = []

    def head(self, name: str, kind: str, text: str) -> None:
        self.lines.append(f"# HELP {name} {text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def gauge(self, name: str, value: float, text: str) -> None:
        self.head(name, "gauge", text)
        self.lines.append(f"{name}{{{self.labels}}} {_num(value)}")

    def counter(self, name: str, value: float, text: str) -> None:
        # prometheus_client (so vLLM) declares counters under their ``_total`` sample name
        self.head(name + "_total", "counter", text)
        self.lines.append(f"{name}_total{{{self.labels}}} {_num(value)}")

    def histogram(self, name: str, h: Histogram, text: str) -> None:
        self.head(name, "histogram", text)
        self.lines.append(h.samples(name, self.labels))

    def text(self) -> bytes:
        return ("\n".join(self.lines) + "\n").encode()


class ServerMetrics:
    """Counters and histograms of one model server, rendered as vLLM names them. ``namespace``
    prefixes mmgate's own families (the encoder-cache counters, and a subclass's :meth:`extra`);
    ``describe`` starts their help texts (e.g. "mmgate simulator")."""

    def __init__(
        self,
        *,
        model_name: str,
        prefix_caching: bool = True,
        engine: str = "0",
        namespace: str = "mmgate_sim",
        describe: str = "mmgate simulator",
    ) -> None:
        self.labels = f'engine="{_esc(engine)}",model_name="{_esc(model_name)}"'
        self.prefix_caching = prefix_caching
        self.engine = engine
        self.namespace = namespace
        self.describe = describe
        self.request_success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        # Per-request phases, observed when a request finishes (vLLM's FinishedRequestStats).
        self.queue_time = Histogram(E2E_BUCKETS)
        self.prefill_time = Histogram(E2E_BUCKETS)
        self.decode_time = Histogram(E2E_BUCKETS)
        self.inference_time = Histogram(E2E_BUCKETS)
        self.tpot = Histogram(ITL_BUCKETS)  # each request's mean time per output token
        self._version = 0
        self._cached_version = -1
        self._cached = b""

    def finished(
        self,
        arrival: float,
        queued: float,
        scheduled: float | None,
        first_token: float | None,
        last_token: float,
        generated: int,
    ) -> None:
        """Observe one finished request, with vLLM's phase boundaries (the server's seconds):
        queue = queued → first scheduled, prefill = first scheduled → first token, decode = first
        → last token, inference = first scheduled → last token, TPOT = decode / (tokens - 1)."""
        scheduled = queued if scheduled is None else scheduled
        first = last_token if first_token is None else first_token
        decode = last_token - first
        self.e2e.observe(last_token - arrival)
        self.queue_time.observe(scheduled - queued)
        self.prefill_time.observe(first - scheduled)
        self.decode_time.observe(decode)
        self.inference_time.observe(last_token - scheduled)
        self.tpot.observe(decode / (generated - 1) if generated > 1 else 0.0)

    def touch(self) -> None:
        """Mark the rendered text stale (call after any change)."""
        self._version += 1

    def render(self, stats: Callable[[], ServerStats]) -> bytes:
        if self._cached_version == self._version:
            return self._cached
        g = stats()
        out = MetricLines(self.labels)
        gauge, counter, histogram = out.gauge, out.counter, out.histogram
        gauge("vllm:num_requests_running", g.num_running, "Number of requests in model execution batches.")
        gauge("vllm:num_requests_waiting", g.num_waiting, "Number of requests waiting to be processed.")
        gauge("vllm:kv_cache_usage_perc", g.kv_cache_usage, "KV-cache usage. 1 means 100 percent usage.")
        counter("vllm:prefix_cache_queries", g.prefix_cache_queries, "Prefix cache queries, in tokens.")
        counter("vllm:prefix_cache_hits", g.prefix_cache_hits, "Prefix cache hits, in tokens.")
        counter(
            "vllm:mm_cache_queries", g.processor_cache_queries, "Multi-modal processor cache queries, items."
        )
        counter("vllm:mm_cache_hits", g.processor_cache_hits, "Multi-modal processor cache hits, items.")
        counter("vllm:num_preemptions", g.num_preemptions, "Cumulative number of preemptions.")
        counter("vllm:prompt_tokens", g.prompt_tokens, "Number of prefill tokens processed.")
        counter("vllm:generation_tokens", g.generation_tokens, "Number of generation tokens processed.")
        out.head("vllm:request_success_total", "counter", "Count of successfully processed requests.")
        lab = self.labels
        for reason, n in self.request_success.items():
            out.lines.append(f'vllm:request_success_total{{{lab},finished_reason="{reason}"}} {_num(n)}')
        histogram("vllm:time_to_first_token_seconds", self.ttft, "Histogram of time to first token.")
        histogram("vllm:inter_token_latency_seconds", self.itl, "Histogram of inter-token latency.")
        histogram("vllm:e2e_request_latency_seconds", self.e2e, "Histogram of end-to-end request latency.")
        histogram(
            "vllm:request_queue_time_seconds",
            self.queue_time,
            "Histogram of time spent in WAITING phase for request.",
        )
        histogram(
            "vllm:request_inference_time_seconds",
            self.inference_time,
            "Histogram of time spent in RUNNING phase for request.",
        )
        histogram(
            "vllm:request_prefill_time_seconds",
            self.prefill_time,
            "Histogram of time spent in PREFILL phase for request.",
        )
        histogram(
            "vllm:request_decode_time_seconds",
            self.decode_time,
            "Histogram of time spent in DECODE phase for request.",
        )
        histogram(
            "vllm:request_time_per_output_token_seconds",
            self.tpot,
            "Histogram of time_per_output_token_seconds per request.",
        )
        out.head("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig.")
        out.lines.append(
            f'vllm:cache_config_info{{block_size="{g.block_size}",enable_prefix_caching="{self.prefix_caching}",'
            f'engine="{_esc(self.engine)}",num_gpu_blocks="{g.num_gpu_blocks}"}} 1.0'
        )
        ns, who = self.namespace, self.describe
        counter(
            f"{ns}:encoder_cache_queries",
            g.encoder_cache_queries,
            f"{who}: encoder-cache lookups, in media items (vLLM has no such metric).",
        )
        counter(
            f"{ns}:encoder_cache_hits",
            g.encoder_cache_hits,
            f"{who}: encoder-cache hits, in media items (the encoder was skipped).",
        )
        self.extra(out)
        text = out.text()
        self._cached = text
        self._cached_version = self._version
        return text

    def extra(self, out: MetricLines) -> None:
        """A subclass's own families, after vLLM's (none here)."""


def _num(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return f"{float(value)!r}"
    return repr(float(value))


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
