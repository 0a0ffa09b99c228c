"""The overhead benchmark end to end at a tiny scale: null upstream, load client, report files.

Checks the report's shape and that its numbers are sane (every request answered, latencies and
rates positive, added latency computed against direct), never speed thresholds: speed lives in
docs/benchmarks/overhead.md.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support.processes import mmgate_command, subprocess_env

BODIES = ("text", "image-1", "stream-100")


def test_quick_run_writes_a_sane_report(tmp_path: Path) -> None:
    out = tmp_path / "overhead"
    args = [
        "--quick",
        "--no-peers",
        "--sidecar",
        "--out",
        str(out),
        "--bodies",
        ",".join(BODIES),
        "--sweep-bodies",
        "text",
    ]
    command = mmgate_command("bench", "overhead", *args)
    done = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    raw = json.loads((out / "overhead.json").read_text())
    systems = {s["name"]: s for s in raw["systems"]}
    assert systems["direct"]["status"] == "ok"
    for name, system in systems.items():
        # A system is either measured or skipped with a reason a user can act on.
        assert system["status"] in ("ok", "skipped")
        assert system["status"] == "ok" or system["reason"], name
    assert not any(s["kind"] == "peer" for s in raw["systems"])  # --no-peers
    assert systems["mmgate sidecar"]["kind"] == "sidecar" and systems["mmgate sidecar"]["status"] == "ok"
    assert raw["bodies"]["image-1"]["bytes"] > 500_000 > raw["bodies"]["text"]["bytes"]

    live = [name for name, s in systems.items() if s["status"] == "ok"]
    for cell in raw["cells"]:
        assert cell["system"] in live and cell["body"] in BODIES
        assert cell["latency"]["errors"] == 0 and cell["throughput"]["errors"] == 0, cell
        assert cell["latency"]["ok"] == 10  # --quick sends 10 sequential requests per cell
        assert all(0 < v < 10_000 for v in cell["latency"]["latencies_ms"])
        assert all(
            t <= v for t, v in zip(cell["latency"]["ttfb_ms"], cell["latency"]["latencies_ms"], strict=True)
        )
        assert cell["throughput"]["ok"] > 0
    assert {(c["system"], c["body"]) for c in raw["cells"]} == {(s, b) for s in live for b in BODIES}

    # The sweep offers the same rates to every live system, and they are served.
    sweep = raw["sweep"]
    assert {p["system"] for p in sweep} == set(live)
    rates = {p["offered_rps"] for p in sweep}
    assert len(rates) == 2
    for point in sweep:
        assert point["errors"] == 0 and point["ok"] > 0 and point["p50_ms"] > 0

    # Routers (mmgate here) are charged CPU and memory read from /proc; direct has no router.
    for name in live:
        cells = [c for c in raw["cells"] if c["system"] == name]
        cpu = [c["throughput"]["router_cpu_s"] for c in cells]
        if systems[name]["kind"] == "direct":
            assert cpu == [None] * len(cells) and systems[name]["peak_rss_mb"] is None
        else:
            assert all(v is not None and v >= 0 for v in cpu) and sum(cpu) > 0
            assert systems[name]["peak_rss_mb"] > 10

    markdown = (out / "overhead.md").read_text()
    for body in BODIES:
        assert f"### {body}:" in markdown
    assert (out / "overhead.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for system in raw["systems"]:
        assert system["name"] in markdown  # measured ones in the tables, skipped ones with why
