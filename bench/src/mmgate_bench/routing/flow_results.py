"""What ``mmgate bench flow-control`` reports per tenant and system, from request records (the
DES's or the HTTP clients'): the same tally for both, so their tables compare.

A tenant's *fleet share* is its requests completed within the arrival window over its capacity
(requests/s the fleet serves of its shape alone): shares add up to the fleet's busy fraction
whatever the request shapes, and a share is the tenant's part of the fleet's served cost. The
*prefill share* counts requests whose first token came within the window instead: the prompt
and media work, most of a multimodal request's cost, without the decode that a crowded batch
stretches past the window's end.
*Goodput* is every completion, in capacity units, over the time until the last one finished.
Every request ends in one answer: completed, refused with a status (429, 503: the gateway
answered), or lost (no answer: a timeout, a dropped connection, an empty stream).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mmgate_bench.routing.flow_scenarios import Plan
from mmgate_bench.routing.records import RequestRecord
from mmgate_bench.stats import percentile


@dataclass
class Tenant:
    sent: int = 0
    served: int = 0  # completed within the arrival window
    prefilled: int = 0  # first token within the arrival window
    completed: int = 0  # completed at all
    refused: Counter[str] = field(default_factory=Counter)  # answered with an error status, by status
    lost: Counter[str] = field(default_factory=Counter)  # no answer, by why
    last_end: float = 0.0  # when its last request finished
    ttfts: list[float] = field(default_factory=list)
    e2es: list[float] = field(default_factory=list)


def tally(records: Sequence[RequestRecord], window_s: float) -> dict[str, Tenant]:
    """Per tenant (the item id's prefix before ``-``)."""
    out: dict[str, Tenant] = {}
    for r in records:
        t = out.setdefault(r.item_id.split("-")[0], Tenant())
        t.sent += 1
        if r.error is not None:
            if r.error.startswith("http_"):
                t.refused[r.error.removeprefix("http_")] += 1
            else:
                t.lost[r.error] += 1
            continue
        t.completed += 1
        if r.ttft_s is not None:
            t.ttfts.append(r.ttft_s)
            t.prefilled += r.sent_s + r.ttft_s <= window_s
        if r.e2e_s is not None:
            t.e2es.append(r.e2e_s)
            end = r.sent_s + r.e2e_s
            t.last_end = max(t.last_end, end)
            t.served += end <= window_s
    return out


def rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def summary(t: Tenant, window_s: float, cap: float) -> dict[str, Any]:
    """``served_rps``: completions over the time until the tenant's last one (its arrivals span
    the window: a tenant served at its offered rate finishes soon after the window closes)."""
    return {
        "sent": t.sent,
        "completed": t.completed,
        "refused": dict(sorted(t.refused.items())),
        "lost": dict(sorted(t.lost.items())),
        "served_in_window_rps": round(t.served / window_s, 3),
        "fleet_share": round(t.served / window_s / cap, 3),
        "prefill_share": round(t.prefilled / window_s / cap, 3),
        "served_rps": round(t.completed / max(window_s, t.last_end), 3),
        "last_end_s": round(t.last_end, 1),
        "ttft_p50_s": rounded(percentile(t.ttfts, 50)),
        "ttft_p90_s": rounded(percentile(t.ttfts, 90)),
        "e2e_p90_s": rounded(percentile(t.e2es, 90)),
    }


def system_row(tenants: dict[str, Tenant], window_s: float, capacity: dict[str, float]) -> dict[str, Any]:
    """One system's row: each tenant's summary, goodput (the fleet busy with useful work
    throughout: 1.0) and when the last request finished."""
    row: dict[str, Any] = {k: summary(t, window_s, capacity[k]) for k, t in sorted(tenants.items())}
    end = max((t.last_end for t in tenants.values()), default=0.0)
    work = sum(t.completed / capacity[k] for k, t in tenants.items())
    row["goodput"] = round(work / end, 3) if end else 0.0
    row["last_end_s"] = round(end, 1)
    return row


def compact(records: Sequence[RequestRecord]) -> list[list[Any]]:
    """Every request of a run, for the raw JSON: [id, sent s, TTFT s, end-to-end s, error]."""
    rows = sorted(records, key=lambda r: r.sent_s)
    return [[r.item_id, round(r.sent_s, 3), rounded(r.ttft_s), rounded(r.e2e_s), r.error] for r in rows]


def to_json(report: dict[str, Any]) -> str:
    """The report, indented, with each innermost list on one line (a run's requests one a line)."""
    text = json.dumps(report, indent=2)
    return re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


def report_head(args: argparse.Namespace, scenario: Plan, mode: str) -> dict[str, Any]:
    """What every report starts with: the scenario, the fleet and the offered load."""
    return {
        "mode": mode,
        "scenario": scenario.scenario,
        "profile": args.profile,
        "pods": args.pods,
        "duration_s": args.duration,
        "capacity_rps": {k: round(v, 3) for k, v in scenario.capacity.items()},
        "offered_rps": {k: round(v, 3) for k, v in scenario.offered.items()},
        "max_inflight_tokens": args.max_inflight_tokens,
    }


def print_report(report: dict[str, Any]) -> None:
    print(
        f"scenario {report['scenario']} ({report.get('mode', 'des')}): {report['pods']} x "
        f"{report['profile']}, capacity A {report['capacity_rps']['A']}/s B "
        f"{report['capacity_rps']['B']}/s, offered A {report['offered_rps']['A']}/s B "
        f"{report['offered_rps']['B']}/s"
    )
    print(f"A alone: TTFT p90 {report['a_alone']['ttft_p90_s']} s")
    base = report["systems"].get("none", {}).get("A", {}).get("ttft_p90_s")
    print(
        f"{'system':<12} {'A p90 s':>8} {'vs none':>8} {'B p90 s':>8} {'A share':>8} {'B share':>8} "
        f"{'goodput':>8} {'refused':>8} {'lost':>5}"
    )
    for name, row in report["systems"].items():
        a, b = row.get("A", {}), row.get("B", {})
        p90 = a.get("ttft_p90_s")
        ratio = f"{p90 / base:.2f}x" if p90 is not None and base else "-"
        refused = sum(sum(t.get("refused", {}).values()) for t in (a, b))
        lost = sum(sum(t.get("lost", {}).values()) for t in (a, b))
        print(
            f"{name:<12} {p90!s:>8} {ratio:>8} {b.get('ttft_p90_s')!s:>8} {a.get('fleet_share')!s:>8} "
            f"{b.get('fleet_share')!s:>8} {row.get('goodput')!s:>8} {refused:>8} {lost:>5}"
        )
