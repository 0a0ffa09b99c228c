"""Reading the few load metrics the scheduler needs out of a model server's ``/metrics`` page.

A vLLM metrics page is tens of kilobytes (mostly histogram buckets) and we read it every 50 ms
per endpoint, so a general Prometheus parser would spend most of its time on lines we ignore.
Instead we ``bytes.find`` each wanted family name at the start of a line and parse only those
lines. Both vLLM's names and SGLang's ``sglang:`` family are understood; the engine is guessed
from whichever names the page carries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mmgate.vllm.lora import LORA_INFO, Adapter, LoraState, adapter_names

# Which snapshot field each source metric fills, per engine. Counts are summed over label sets
# (data-parallel engines, several served models); usage takes the maximum.
_VLLM_WAITING = (b"vllm:num_requests_waiting",)
_VLLM_RUNNING = (b"vllm:num_requests_running",)
# The deprecated name is still read so that older vLLM releases keep working.
_VLLM_USAGE = (b"vllm:kv_cache_usage_perc", b"vllm:gpu_cache_usage_perc")
_VLLM_CACHE_INFO = b"vllm:cache_config_info"
_VLLM_LORA_INFO = LORA_INFO.encode()
_SGLANG_WAITING = (b"sglang:num_queue_reqs",)
_SGLANG_RUNNING = (b"sglang:num_running_reqs",)
_SGLANG_USAGE = (b"sglang:token_usage",)


@dataclass(slots=True, frozen=True)
class MetricsSnapshot:
    """Load of one endpoint at one instant (``scraped_at`` is ``time.monotonic()``).

    A field is ``None`` when the page did not carry it, so the scheduler can tell "zero" from
    "unknown". ``kv_usage`` is a fraction in [0, 1]. ``lora`` joins the page's
    ``vllm:lora_requests_info`` with the adapters the endpoint's ``/v1/models`` lists (None when
    it has neither).
    """

    engine: str
    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    scraped_at: float = 0.0
    lora: LoraState | None = None

    def age(self, now: float) -> float:
        return now - self.scraped_at


def _lines_of(page: bytes, name: bytes) -> list[bytes]:
    """Every sample line of the family ``name`` (exact name: ``foo`` does not match ``foo_bar``)."""
    found: list[bytes] = []
    size = len(name)
    start = 0
    while True:
        at = page.find(name, start)
        if at < 0:
            return found
        start = at + size
        if at and page[at - 1] != 0x0A:  # not at the start of a line (e.g. inside a # HELP)
            continue
        follow = page[at + size : at + size + 1]
        if follow not in (b"{", b" "):
            continue
        end = page.find(b"\n", at)
        found.append(page[at : end if end >= 0 else len(page)])


def _value(line: bytes) -> float | None:
    """The sample value of one line: the token after the label set (a timestamp may follow)."""
    close = line.rfind(b"}")
    if close < 0:
        close = line.find(b" ")
    fields = line[close + 1 :].split() if close >= 0 else []
    if not fields:
        return None
    try:
        return float(fields[0])
    except ValueError:
        return None


def _label(line: bytes, key: bytes) -> bytes | None:
    """A label's raw value (no escape handling: the labels we read are numbers)."""
    needle = key + b'="'
    at = line.find(needle)
    while at > 0 and line[at - 1] not in b"{, ":
        at = line.find(needle, at + 1)
    if at < 0:
        return None
    start = at + len(needle)
    end = line.find(b'"', start)
    return line[start:end] if end >= 0 else None


def _total(page: bytes, names: tuple[bytes, ...], *, reduce_max: bool = False) -> float | None:
    for name in names:
        values = [v for v in map(_value, _lines_of(page, name)) if v is not None and v == v]
        if values:
            return max(values) if reduce_max else sum(values)
    return None


def _int_label(line: bytes, key: bytes) -> int | None:
    raw = _label(line, key)
    if raw is None:
        return None
    try:
        return int(float(raw))
    except ValueError:
        return None


def _lora(page: bytes, adapters: Mapping[str, Adapter]) -> LoraState | None:
    """The newest ``vllm:lora_requests_info`` sample (largest value: its update time), with the
    adapters ``/v1/models`` listed."""
    best: bytes | None = None
    newest = float("-inf")
    for line in _lines_of(page, _VLLM_LORA_INFO):
        value = _value(line)
        if value is not None and value >= newest:
            best, newest = line, value
    if best is None:
        return LoraState(adapters) if adapters else None
    running = (_label(best, b"running_lora_adapters") or b"").decode("utf-8", "replace")
    waiting = (_label(best, b"waiting_lora_adapters") or b"").decode("utf-8", "replace")
    max_loras = max(0, _int_label(best, b"max_lora") or 0)
    return LoraState(adapters, adapter_names(running), adapter_names(waiting), max_loras)


def parse_metrics(
    page: bytes, *, now: float = 0.0, adapters: Mapping[str, Adapter] | None = None
) -> MetricsSnapshot:
    """Extract a :class:`MetricsSnapshot` from a Prometheus text exposition page (``adapters``:
    the LoRA adapters the endpoint's ``/v1/models`` lists, by name).

    Never raises on odd input: unknown or malformed lines are simply not read.
    """
    sglang = b"\nsglang:" in page or page.startswith(b"sglang:")
    waiting, running, usage_names = (
        (_SGLANG_WAITING, _SGLANG_RUNNING, _SGLANG_USAGE)
        if sglang
        else (_VLLM_WAITING, _VLLM_RUNNING, _VLLM_USAGE)
    )
    block_size = num_blocks = None
    info = [] if sglang else _lines_of(page, _VLLM_CACHE_INFO)
    if info:
        block_size = _int_label(info[0], b"block_size")
        num_blocks = _int_label(info[0], b"num_gpu_blocks")
    usage = _total(page, usage_names, reduce_max=True)
    return MetricsSnapshot(
        engine="sglang" if sglang else "vllm",
        waiting=_total(page, waiting),
        running=_total(page, running),
        kv_usage=None if usage is None else min(1.0, max(0.0, usage)),
        block_size=block_size,
        num_gpu_blocks=num_blocks,
        scraped_at=now,
        lora=None if sglang else _lora(page, adapters or {}),
    )
