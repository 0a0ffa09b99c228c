"""``mmgate bench topologies``: the same accelerators arranged four ways, on two kinds of traffic.

Topologies (``--accelerators`` of them, a pod counting as many as its profile's
``tensor_parallel_size``):

- **aggregated**: every pod encodes, prefills and decodes (``examples/aggregated.yaml``);
- **encoder-dp**: the same, each replica's encoder running data parallel over its GPUs
  (vLLM's ``--mm-encoder-tp-mode data``);
- **encoder-affinity**: aggregated pods behind ``examples/encoder-affinity.yaml`` (a request goes
  to the pod whose encoder cache holds its images), the aggregated answer to reused images;
- **e-pd**: a quarter of the pods (at least one) encode only, the rest prefill and decode
  (``examples/e-pd.yaml``);
- **e-p-d**: a quarter encode, a quarter prefill, the rest decode (``examples/e-p-d.yaml``);
- ``e-pd:2+6``, ``e-p-d:1+2+1``: the same with the split in pods stated;
- ``NAME@CONFIG``: a topology running another gateway config (a file or an example name) than
  its own example, to compare scheduler settings on one layout (``e-pd@my-e-pd.yaml``).

A stage pod is a replica of the same shape as any other (the profile's accelerators per pod).

Workloads: **image-heavy** (four unique 1-2.5 MP photos per request, a short question: cold,
encoder-bound), **image-light** (one small image under a long text) and **image-heavy-reuse**
(image-heavy with the photos drawn from a catalogue of 300, Zipf(1.0) popularity: reused). Each
runs a rate ladder in the discrete-event mode, through the gateway's controller and orchestration;
``--http`` adds a reduced run of the same topologies over loopback (``mmgate serve`` in front of
``mmgate sim`` pods with roles, time-scaled): the gateway runs the encode and prefill legs itself
(``--orchestrators gateway``, the default), or an ``mmgate sidecar`` process in front of each PD
or decode pod runs them from the routing headers the gateway sets (``sidecar``: llm-d's layout);
``gateway,sidecar`` runs both, the sidecar runs labelled ``NAME [sidecar]``.

Reported per topology and rate: TTFT and TPOT p50/p90, output tokens/s per accelerator, and
goodput: requests per second that met the SLO (TTFT <= ``--ttft-slo`` and TPOT <= ``--tpot-slo``),
per accelerator; a topology *sustains* a rate when at least 90 % of its requests met the SLO.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from mmgate.sim.profiles import ProfileError, load_profile
from mmgate_bench.processes import Managed
from mmgate_bench.results import markdown_table
from mmgate_bench.routing import report
from mmgate_bench.routing.des import DesOptions, run_des
from mmgate_bench.routing.http_mode import HttpOptions, prerender, start_fleet, start_router, start_sidecars
from mmgate_bench.routing.loadgen import Target, raw_bodies, run_ladder, workload_bodies
from mmgate_bench.routing.records import Ladder, RungResult, arrival_times, parse_rates
from mmgate_bench.routing.systems import System, resolve
from mmgate_bench.workloads.media import MediaCache
from mmgate_bench.workloads.synthetic import RawItem, Workload, build, load_jsonl, scaled

PROFILE = "qwen3-vl-32b-h200-tp2"
ACCELERATORS = 8
TTFT_SLO_S = 2.0
TPOT_SLO_S = 0.05
ATTAINMENT = 0.9
NAMES = ("aggregated", "encoder-dp", "e-pd", "e-p-d")
AGGREGATED = {"aggregated": "aggregated", "encoder-dp": "aggregated", "encoder-affinity": "encoder-affinity"}
"""The topologies of aggregated pods, and the example config each runs."""
ENCODER_DP = {"mm_encoder_tp_mode": "data"}
"""The engine setting that makes a replica's encoder data parallel (vLLM's ``--mm-encoder-tp-mode
data``)."""


@dataclass(frozen=True, slots=True)
class Shape:
    """A workload of the comparison (``name``: the generator ``workload`` with ``params``) and the
    ladder that brackets its saturation on 8 H200."""

    name: str
    workload: str
    rates: str
    params: dict[str, Any] = field(default_factory=dict)


JSONL = "jsonl"
"""A :class:`Shape`'s workload when it replays a recorded file (``--jsonl``)."""

REUSE_POOL = 300
"""Photos in the image-heavy-reuse catalogue (the headline image-reuse workload's pool)."""

WORKLOADS = {
    "image-heavy": Shape("image-heavy", "image-heavy", "1,2,3,4,5,6"),
    "image-light": Shape("image-light", "image-light", "4,8,12,16,20,24"),
    "image-heavy-reuse": Shape("image-heavy-reuse", "image-heavy", "2,3,4,5,6,8", {"pool": REUSE_POOL}),
    "mixed": Shape("mixed", "image-mixed", "2,4,6,8,10,12"),
}


@dataclass(frozen=True, slots=True)
class Topology:
    name: str
    system: str  # the example config the gateway runs
    roles: tuple[str, ...]  # per pod; empty: every pod does everything
    accelerators: int
    engine: dict[str, Any] = field(default_factory=dict)
    profiles: tuple[str, ...] = ()  # per pod, a fleet of mixed hardware ("": the run's profile)

    @property
    def pods(self) -> int:
        return len(self.roles)

    @property
    def layout(self) -> str:
        """``2 E + 6 PD``: how many pods of each role (``4 E [profile]``: pods of another profile)."""
        short = {"encode": "E", "prefill": "P", "decode": "D", "prefill-decode": "PD", "": "EPD"}
        counts: dict[str, int] = {}
        profiles = self.profiles or ("",) * len(self.roles)
        for role, profile in zip(self.roles, profiles, strict=True):
            key = f"{short[role]} [{profile}]" if profile else short[role]
            counts[key] = counts.get(key, 0) + 1
        return " + ".join(f"{n} {r}" for r, n in counts.items())


def accelerators_per_pod(profile: str) -> int:
    """A pod's accelerators: its profile's ``tensor_parallel_size`` (GPUs of one replica)."""
    return load_profile(profile).tensor_parallel_size


STAGES = {"e-pd": ("encode", "prefill-decode"), "e-p-d": ("encode", "prefill", "decode")}


def topologies(
    accelerators: int, per_pod: int, names: Sequence[str] = NAMES, *, encoder_profile: str | None = None
) -> list[Topology]:
    """The named topologies over ``accelerators``. A disaggregated one gives a quarter of the pods
    (at least one) to each stage before the last, unless its name states the split in pods
    (``e-pd:2+6``, ``e-p-d:1+2+1``), which must add up. With ``encoder_profile`` the encode pods
    run that profile (other hardware) on top of ``accelerators``, so the split must state them
    (``e-pd:4+3``: four such encoders and three pods that make the accelerators). ``ValueError``
    for what does not fit."""
    pods = accelerators // per_pod
    if pods < 1 or pods * per_pod != accelerators:
        raise ValueError(f"{accelerators} accelerators are not a whole number of {per_pod}-accelerator pods")
    out = []
    for name in names:
        layout, at, config = name.partition("@")
        if at and not config:
            raise ValueError(f"{name}: name a gateway config after '@'")
        kind, _, split = layout.partition(":")
        if kind in AGGREGATED and not split:
            roles: tuple[str, ...] = ("",) * pods
        elif kind in STAGES:
            stages = STAGES[kind]
            if encoder_profile is not None:
                if not split:
                    raise ValueError(f"{name}: with --encoder-profile, state the split ({kind}:4+3)")
                counts = _split(name, split, len(stages), pods, extra_first=True)
            else:
                counts = _split(name, split, len(stages), pods) if split else _quarters(len(stages), pods)
            if min(counts) < 1:
                raise ValueError(
                    f"{name} needs more than {accelerators} accelerators of {per_pod}-accelerator pods"
                )
            roles = tuple(role for role, n in zip(stages, counts, strict=True) for _ in range(n))
        else:
            raise ValueError(f"unknown topology {name!r}; choose from {', '.join([*AGGREGATED, *STAGES])} "
                             "(e-pd and e-p-d may state their split in pods, e-p-d:1+2+1)")  # fmt: skip
        engine = dict(ENCODER_DP) if kind == "encoder-dp" else {}
        system = config or AGGREGATED.get(kind, kind)
        profiles: tuple[str, ...] = ()
        if encoder_profile is not None and any(roles):
            profiles = tuple(encoder_profile if role == "encode" else "" for role in roles)
        out.append(Topology(name, system, roles, accelerators, engine, profiles))
    return out


def _quarters(stages: int, pods: int) -> list[int]:
    first = [max(1, pods // 4)] * (stages - 1)
    return [*first, pods - sum(first)]


def _split(name: str, split: str, stages: int, pods: int, *, extra_first: bool = False) -> list[int]:
    """The pods per stage ``split`` states; they make ``pods`` (but the first stage's, with
    ``extra_first``: pods of another profile, on top of the accelerators)."""
    parts = split.split("+")
    if len(parts) != stages or not all(p.isdigit() for p in parts):
        raise ValueError(f"{name}: the split is {stages} pod counts joined by '+'")
    counts = [int(p) for p in parts]
    counted = sum(counts[1:]) if extra_first else sum(counts)
    if counted != pods:
        what = "besides the encoders " if extra_first else ""
        raise ValueError(f"{name}: the split adds up to {counted} pods {what}, the accelerators make {pods}")
    return counts


def _system(topology: Topology) -> System:
    return System(name=topology.name, config=resolve(topology.system).config)


def slo_fields(rung: RungResult, accelerators: int, ttft_slo_s: float, tpot_slo_s: float) -> dict[str, Any]:
    """What the topology comparison adds to a rung's report record: goodput (requests per second
    that met both SLOs, every failure a miss), attainment, and per-accelerator rates."""
    ok = [r for r in rung.records if r.ok]
    met = sum(
        1
        for r in ok
        if r.ttft_s is not None and r.ttft_s <= ttft_slo_s and (r.tpot_s is None or r.tpot_s <= tpot_slo_s)
    )
    span = rung.span_s if rung.span_s > 0 else rung.duration_s
    out_tps = sum(r.output_tokens for r in ok) / span
    return {
        "slo_attainment": met / len(rung.records) if rung.records else None,
        "goodput_rps": met / span,
        "goodput_rps_per_accelerator": met / span / accelerators,
        "output_tokens_per_s_per_accelerator": out_tps / accelerators,
        "accelerators": accelerators,
    }


def run_des_topologies(
    workload: Workload,
    shapes: Sequence[Topology],
    ladder: Ladder,
    profile: str,
    *,
    ttft_slo_s: float = TTFT_SLO_S,
    tpot_slo_s: float = TPOT_SLO_S,
    progress: bool = True,
    log: Callable[[str], None] = print,
    replay: Sequence[RawItem] | None = None,
) -> list[dict[str, Any]]:
    """Every topology over the ladder in the DES: one report record per topology and rate
    (``replay``: recorded requests, cycled, instead of ``workload``'s)."""
    records = []
    for topo in shapes:
        roles = topo.roles if any(topo.roles) else ()  # aggregated pods carry no role
        opts = DesOptions(
            profile=profile, pods=topo.pods, roles=roles, engine=dict(topo.engine),
            profiles=tuple(p or profile for p in topo.profiles),
        )  # fmt: skip
        rungs = run_des(workload, [_system(topo)], ladder, opts, replay=replay, progress=progress, log=log)
        records += [_record(rung, topo, workload.name, ttft_slo_s, tpot_slo_s) for rung in rungs]
    return records


def _record(
    rung: RungResult, topo: Topology, workload: str, ttft_slo_s: float, tpot_slo_s: float
) -> dict[str, Any]:
    rec = report.summarize(rung, workload)
    rec.update(slo_fields(rung, topo.accelerators, ttft_slo_s, tpot_slo_s))
    rec["layout"] = topo.layout
    return rec


def sent_by(ladder: Ladder) -> int:
    """How many requests the ladder sends (warm-up included; Poisson arrivals get a margin)."""
    sent = sum(len(arrival_times(rate, duration, "constant", 0)) for _, rate, duration, _ in ladder.rungs())
    return sent if ladder.arrival == "constant" else int(sent * 1.2) + 10


ORCHESTRATORS = ("gateway", "sidecar")
"""Who runs a disaggregated request's legs over HTTP (``mmgate.disaggregation.orchestrator``)."""


def gateway_config(
    topology: Topology, urls: Sequence[str], folder: Path, orchestrator: str = "gateway"
) -> Path:
    """The topology's example config listing ``urls`` with their roles, the legs run by
    ``orchestrator`` when there are stages (``gateway``: the gateway itself; ``sidecar``: the
    routing sidecars ``urls`` name in place of the decode-side pods): written into ``folder``."""
    source = resolve(topology.system).config
    assert source is not None
    doc = yaml.safe_load(source.read_text())
    section = doc.setdefault("mmgate", {})
    section["endpoints"] = [
        {"url": url, "role": role} if role else {"url": url}
        for url, role in zip(urls, topology.roles, strict=True)
    ]
    if any(topology.roles):
        section["disaggregation"] = {**section.get("disaggregation", {}), "orchestrator": orchestrator}
    suffix = "" if orchestrator == "gateway" else f"-{orchestrator}"
    path = folder / f"{topology.name}{suffix}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_http_topologies(
    workload: Workload,
    shapes: Sequence[Topology],
    ladder: Ladder,
    profile: str,
    speedup: float,
    *,
    ttft_slo_s: float = TTFT_SLO_S,
    tpot_slo_s: float = TPOT_SLO_S,
    progress: bool = True,
    log: Callable[[str], None] = print,
    replay: Sequence[RawItem] | None = None,
    orchestrators: Sequence[str] = ("gateway",),
    keep_logs: Path | None = None,
) -> list[dict[str, Any]]:
    """Every topology over the ladder on loopback: a fresh simulated fleet with the topology's
    roles (``speedup`` times real time), ``mmgate serve`` in front of it, the load generator; a
    topology with stages once per orchestrator (``sidecar``: an ``mmgate sidecar`` process in
    front of each decode-side pod). The workload is cut to the requests the ladder sends, and
    every one of its images rendered before the first rung, so the client renders nothing while
    it measures. ``keep_logs``: every process's log is kept there, one folder per run, with the
    gateway's access log (one line per request: its encode decision, the costs compared, the
    predicted TTFT), to see why a run went as it did; without it they go with the run."""
    workload = scaled(workload, sent_by(ladder))
    media = MediaCache(capacity=max(512, workload.distinct_media()))
    spec = load_profile(profile)
    model = spec.model or spec.name
    prerender(workload, media, log)
    records = []
    with tempfile.TemporaryDirectory(prefix="mmgate-topologies-") as tmp:
        for topo in shapes:
            roles = topo.roles if any(topo.roles) else ()
            for orchestrator in orchestrators if roles else ("",):
                label = f"{topo.name} [{orchestrator}]" if orchestrator == "sidecar" else topo.name
                logs = Path(tmp)
                if keep_logs is not None:
                    logs = keep_logs / label.replace(" [", "-").replace("]", "").replace("@", "-")
                    logs.mkdir(parents=True, exist_ok=True)
                opts = HttpOptions(
                    profile=profile, pods=topo.pods, speedup=speedup, roles=roles, engine=topo.engine
                )
                fleet, urls = start_fleet(opts, logs)
                router = None
                cars: list[Managed] = []
                try:
                    listed, admin = urls, list[str]()
                    if orchestrator == "sidecar":
                        cars, listed, admin = start_sidecars(urls, roles, logs, model)
                    config = gateway_config(topo, listed, logs, orchestrator or "gateway")
                    system = System(label.replace(" ", "_"), config=config)
                    router, base, note = start_router(
                        system, [], logs, model, access_log=keep_logs is not None
                    )
                    if router is None:
                        log(note)
                        continue
                    bodies = (
                        raw_bodies(replay)
                        if replay is not None
                        else workload_bodies(workload, model=model, media=media)
                    )
                    counted = (base, *admin) if roles else ()
                    target = Target(base, pods=tuple(urls), stage_metrics=counted)
                    rungs = asyncio.run(
                        run_ladder(target, label, ladder, bodies, speedup=speedup, progress=progress)
                    )
                finally:
                    if router is not None:
                        router.stop()
                    for car in cars:
                        car.stop()
                    fleet.stop()
                for rung in rungs:
                    rec = _record(rung, topo, workload.name, ttft_slo_s, tpot_slo_s)
                    if orchestrator:
                        rec["orchestrator"] = orchestrator
                    records.append(rec)
    return records


# -- reporting ------------------------------------------------------------------------------------


def sustained(records: Sequence[dict[str, Any]]) -> float | None:
    """The highest rate up to which every rung kept SLO attainment >= 90 % (None: not even the first)."""
    best = None
    for rec in sorted(records, key=lambda r: r["rate"]):
        if (rec["slo_attainment"] or 0.0) < ATTAINMENT:
            break
        best = rec["rate"]
    return best


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v * 1000:,.0f}"


def _s(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def summary_table(records: Sequence[dict[str, Any]]) -> tuple[float, list[str]]:
    """The comparison at one rate (the highest every topology sustains, else the lowest), with
    each topology's sustained rate and best goodput per accelerator."""
    groups = report.by_system(records)
    rates = sorted({r["rate"] for r in records})
    kept = [sustained(recs) for recs in groups.values()]
    common = (
        min((k for k in kept if k is not None), default=None) if all(k is not None for k in kept) else None
    )
    at = common if common is not None else rates[0]
    rows = []
    for name, recs in groups.items():
        rec = next(r for r in recs if r["rate"] == at)
        best = max(recs, key=lambda r: r["goodput_rps_per_accelerator"])
        keep = sustained(recs)
        rows.append([
            f"**{name}**", rec["layout"], _s(rec["ttft_p50_s"]), _s(rec["ttft_p90_s"]),
            _ms(rec["tpot_p50_s"]), _ms(rec["tpot_p90_s"]),
            f"{rec['output_tokens_per_s_per_accelerator']:,.0f}",
            f"{rec['goodput_rps_per_accelerator']:.3f}", "—" if keep is None else f"{keep:g}",
            f"{best['goodput_rps_per_accelerator']:.3f} @ {best['rate']:g}",
        ])  # fmt: skip
    header = [
        "topology", "pods", "TTFT p50 (s)", "TTFT p90 (s)", "TPOT p50 (ms)", "TPOT p90 (ms)",
        "out tok/s/acc", "goodput/acc (req/s)", "sustained (req/s)", "best goodput/acc @ rate",
    ]  # fmt: skip
    return at, markdown_table(header, rows)


def rate_table(records: Sequence[dict[str, Any]], key: str, fmt: Callable[[float | None], str]) -> list[str]:
    groups = report.by_system(records)
    rates = sorted({r["rate"] for r in records})
    rows = []
    for name, recs in groups.items():
        row = {r["rate"]: r.get(key) for r in recs}
        rows.append([name, *(fmt(row.get(rate)) for rate in rates)])
    return markdown_table(["topology \\ req/s", *(f"{r:g}" for r in rates)], rows)


def markdown(records: Sequence[dict[str, Any]], title: str, meta: dict[str, Any]) -> str:
    at, table = summary_table(records)
    slo = f"TTFT ≤ {meta['ttft_slo_s']:g} s and TPOT ≤ {meta['tpot_slo_s'] * 1000:g} ms"
    note = (
        f"At {at:g} req/s; goodput counts requests that met {slo}; sustained: every rung up to it "
        f"had ≥ {ATTAINMENT:.0%} of requests within the SLO."
    )
    lines = [f"### {title}", "", note, ""]
    lines += table
    for key, label, fmt in (
        ("ttft_p90_s", "TTFT p90 (s)", _s),
        ("tpot_p90_s", "TPOT p90 (ms)", _ms),
        ("output_tokens_per_s_per_accelerator", "output tokens/s per accelerator", _int),
        ("goodput_rps_per_accelerator", "goodput per accelerator (req/s)", _g3),
    ):
        lines += ["", f"{label} by rate:", ""]
        lines += rate_table(records, key, fmt)
    return "\n".join(lines) + "\n"


def _int(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f}"


def _g3(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def plot(records: Sequence[dict[str, Any]], path: Path, title: str) -> Path:
    """Four panels against the offered rate: TTFT p90, TPOT p90, output tokens/s per accelerator,
    goodput per accelerator; one line per topology."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    panels = (
        ("ttft_p90_s", "TTFT p90 (s)", 1.0),
        ("tpot_p90_s", "TPOT p90 (ms)", 1000.0),
        ("output_tokens_per_s_per_accelerator", "output tokens/s per accelerator", 1.0),
        ("goodput_rps_per_accelerator", "goodput per accelerator (req/s in SLO)", 1.0),
    )
    for ax, (key, label, scale) in zip(axes.flat, panels, strict=True):
        for name, recs in report.by_system(records).items():
            xs = [r["rate"] for r in recs]
            ys = [r[key] * scale if r.get(key) is not None else float("nan") for r in recs]
            ax.plot(xs, ys, marker="o", label=f"{name} ({recs[0]['layout']})")
        ax.set_xlabel("offered rate (req/s)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if key == "ttft_p90_s":
            ax.set_yscale("log")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- the command ----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description, parser.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    parser.add_argument("--out", type=Path, default=Path("results/topologies"), help="output folder")
    parser.add_argument("--profile", default=PROFILE, help=f"simulator profile (default {PROFILE})")
    parser.add_argument("--accelerators", type=int, default=ACCELERATORS, help="per topology (default 8)")
    parser.add_argument(
        "--encoder-profile", default=None,
        help="the encode pods run this profile (other hardware), on top of --accelerators; "
        "disaggregated topologies then state their split (e-pd:4+3); DES only",
    )  # fmt: skip
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"of {', '.join(WORKLOADS)}")
    parser.add_argument(
        "--jsonl", type=Path, default=None,
        help="replay recorded OpenAI chat requests (JSONL, as bench run --jsonl) as the one workload, "
        "named after the file; its ladder is --rates (default 1,2,4,6,8)",
    )  # fmt: skip
    parser.add_argument(
        "--topologies", default=",".join(NAMES), help=f"of {', '.join([*AGGREGATED, *STAGES])}"
    )
    parser.add_argument(
        "--rates", default=None, help="one DES ladder for every workload (default: each its own)"
    )
    parser.add_argument("--duration", type=float, default=60.0, help="simulated seconds per DES rung (60)")
    parser.add_argument(
        "--seed", type=int, default=0,
        help="the workload generator's seed (0): another draw of the same traffic, to see how far a "
        "comparison moves with the requests drawn",
    )  # fmt: skip
    parser.add_argument(
        "--ttft-slo", type=float, default=TTFT_SLO_S, help=f"seconds (default {TTFT_SLO_S:g})"
    )
    parser.add_argument(
        "--tpot-slo", type=float, default=TPOT_SLO_S, help=f"seconds (default {TPOT_SLO_S:g})"
    )
    http = parser.add_argument_group("the reduced HTTP run (real processes on loopback)")
    http.add_argument("--http", action="store_true", help="also run each topology over HTTP")
    http.add_argument("--http-only", action="store_true", help="the HTTP run alone")
    http.add_argument("--http-rates", default=None, help="default: the DES ladder's two lowest rates")
    http.add_argument("--http-duration", type=float, default=20.0, help="simulated seconds per rung (20)")
    http.add_argument("--speedup", type=float, default=2.0, help="pods simulate this times real time (2)")
    http.add_argument(
        "--logs", type=Path, default=None,
        help="keep every process's log in this folder (one subfolder per topology and "
        "orchestrator), the gateway's with its access log: each request's encode decision and "
        "the costs it compared",
    )  # fmt: skip
    http.add_argument(
        "--orchestrators", default="gateway",
        help="who runs the legs of a topology with stages, of gateway, sidecar (an mmgate sidecar "
        "in front of each PD or decode pod); both: gateway,sidecar (default gateway)",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a small smoke version (seconds)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


@dataclass(frozen=True, slots=True)
class _Plan:
    shapes: list[Topology]
    workloads: list[Shape]
    orchestrators: tuple[str, ...] = ("gateway",)


def _plan(args: argparse.Namespace) -> _Plan:
    load_profile(args.profile)
    names = [n.strip() for n in args.topologies.split(",") if n.strip()]
    if args.encoder_profile is not None:
        load_profile(args.encoder_profile)
        if args.http or args.http_only:
            raise ValueError("--encoder-profile runs in the DES only (the HTTP fleet has one profile)")
    shapes = topologies(
        args.accelerators, accelerators_per_pod(args.profile), names, encoder_profile=args.encoder_profile
    )
    for shape in shapes:
        resolve(shape.system)  # a config that does not exist or does not load: exit 2 now
    workloads = []
    if args.jsonl is not None:
        if not args.jsonl.is_file():
            raise ValueError(f"--jsonl {args.jsonl}: no such file")
        return _Plan(
            shapes, [Shape(args.jsonl.stem, JSONL, args.rates or "1,2,4,6,8", {"jsonl": str(args.jsonl)})]
        )
    for name in (w.strip() for w in args.workloads.split(",") if w.strip()):
        if name not in WORKLOADS:
            raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
        workloads.append(WORKLOADS[name])
    for rates in (args.rates, args.http_rates):
        if rates is not None:
            parse_rates(rates)
    if min(args.duration, args.http_duration, args.ttft_slo, args.tpot_slo, args.speedup) <= 0:
        raise ValueError("--duration, --http-duration, --ttft-slo, --tpot-slo and --speedup must be > 0")
    return _Plan(shapes, workloads, _orchestrators(args.orchestrators))


def _orchestrators(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in ORCHESTRATORS]
    if unknown or not names:
        raise ValueError(f"--orchestrators: {', '.join(unknown) or 'none given'}; choose from "
                         f"{', '.join(ORCHESTRATORS)}")  # fmt: skip
    return names


def run(args: argparse.Namespace) -> int:
    try:
        plan = _plan(args)
    except (ValueError, ProfileError) as exc:
        print(f"mmgate bench topologies: {exc}", file=sys.stderr)
        return 2
    console = Console(stderr=True)
    args.out.mkdir(parents=True, exist_ok=True)
    # Under overload, legs time out and fall back by design; the count is in the report, not the log.
    logging.getLogger("mmgate.disagg").setLevel(logging.ERROR)
    sections: list[str] = []
    modes = (["des"] if not args.http_only else []) + (["http"] if args.http or args.http_only else [])
    for shape in plan.workloads:
        des_rates = parse_rates("1,2" if args.quick else (args.rates or shape.rates))
        for mode in modes:
            if mode == "des":
                rates, duration = des_rates, 5.0 if args.quick else args.duration
            else:
                rates = parse_rates(args.http_rates) if args.http_rates else des_rates[:2]
                duration = 4.0 if args.quick else args.http_duration
            ladder = Ladder(rates=rates, duration_s=duration, drain_timeout_s=120.0)
            replay = None
            if shape.workload == JSONL:  # recorded requests, cycled in file order
                replay = load_jsonl(Path(shape.params["jsonl"]))
                workload = Workload(shape.name, [], "cycle", params=dict(shape.params))
            else:
                # As many requests as the ladder sends: none repeats, so a cold workload stays cold.
                built = build(shape.workload, args.seed, **{**shape.params, "requests": sent_by(ladder)})
                workload = replace(built, name=shape.name)  # the records name the comparison's workload
            layouts = ", ".join(f"{t.name} ({t.layout})" for t in plan.shapes)
            console.print(
                f"{shape.name} ({mode}): {layouts} on {args.accelerators} accelerators ({args.profile}), "
                f"rates {', '.join(f'{r:g}' for r in rates)}, {duration:g} s per rung"
            )
            started = time.perf_counter()
            common: dict[str, Any] = {
                "ttft_slo_s": args.ttft_slo, "tpot_slo_s": args.tpot_slo, "progress": not args.quiet,
                "log": console.print, "replay": replay,
            }  # fmt: skip
            if mode == "des":
                records = run_des_topologies(workload, plan.shapes, ladder, args.profile, **common)
            else:
                records = run_http_topologies(
                    workload, plan.shapes, ladder, args.profile, args.speedup,
                    orchestrators=plan.orchestrators, keep_logs=args.logs, **common,
                )  # fmt: skip
            meta = {
                "workload": shape.name, "workload_params": workload.params, "mode": mode,
                "profile": args.profile, "accelerators": args.accelerators,
                "accelerators_per_pod": accelerators_per_pod(args.profile),
                "topologies": {t.name: {"layout": t.layout, "config": t.system, "engine": t.engine}
                               for t in plan.shapes},
                "encoder_profile": args.encoder_profile,
                "seed": args.seed,
                "ladder": {"rates": list(rates), "duration_s": duration, "arrival": ladder.arrival},
                "ttft_slo_s": args.ttft_slo, "tpot_slo_s": args.tpot_slo, "attainment": ATTAINMENT,
                "speedup": args.speedup if mode == "http" else None,
                "orchestrators": list(plan.orchestrators) if mode == "http" else ["gateway"],
                "wall_s": round(time.perf_counter() - started, 1),
            }  # fmt: skip
            if records:
                sections.append(_write(args.out / f"{shape.name}-{mode}", records, meta))
    summary = "\n".join(sections)
    (args.out / "summary.md").write_text(summary)
    print(summary)
    console.print(f"wrote {args.out}/summary.md and <workload>-<mode>/report.{{json,md}}, topologies.png")
    return 0


def _write(folder: Path, records: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """report.json (records + meta), report.md and topologies.png in ``folder``; the markdown."""
    folder.mkdir(parents=True, exist_ok=True)
    report.write_json(records, folder / "report.json", meta)
    where = f"{meta['accelerators']} accelerators, {meta['profile']}"
    text = markdown(records, f"{meta['workload']} ({meta['mode'].upper()}, {where})", meta)
    (folder / "report.md").write_text(text)
    plot(records, folder / "topologies.png", f"{meta['workload']} ({meta['mode'].upper()}): {where}")
    return text
