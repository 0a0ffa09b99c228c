"""``mmgate bench flow-control``: flow control in the DES (the same dispatcher on virtual time), the
HTTP clients (open loop, answers told from losses) and the report's plot."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from pathlib import Path

import pytest
from aiohttp import web

from mmgate_bench.routing.des import DesOptions
from mmgate_bench.routing.flow_control import add_arguments, run, run_system
from mmgate_bench.routing.flow_control_http import drive, held_times, sends_of
from mmgate_bench.routing.flow_plots import plot_report
from mmgate_bench.routing.flow_results import system_row, tally, to_json
from mmgate_bench.routing.flow_scenarios import config_of, heavy, light
from mmgate_bench.routing.records import RequestRecord
from mmgate_bench.workloads.media import MediaCache
from support.upstreams import serve

OPTS = DesOptions(profile="fast", pods=1)


def test_config_of_turns_flow_control_on_over_the_aggregated_example() -> None:
    text = config_of("media-cost", 8000)
    assert "media-cost-fairness-policy" in text and "maxInflightTokens: 8000" in text
    assert "flowControl" not in config_of("none", 8000)


def test_a_sheddable_flood_is_refused_while_critical_requests_are_all_served(tmp_path: Path) -> None:
    rng = random.Random(0)
    critical = [(0.05 * i, light(i, rng, "@critical")) for i in range(6)]
    batch = [(0.01 * i, heavy(i, rng, 8, "@batch")) for i in range(30)]
    schedule = sorted(critical + batch, key=lambda pair: pair[0])
    tenants, _ = run_system("media-cost", schedule, OPTS, (1.0, 120.0, 2000), tmp_path)
    assert tenants["A"].completed == 6 and not tenants["A"].refused
    assert tenants["B"].refused["429"] > 0  # shed while the pod was saturated
    assert tenants["B"].completed + tenants["B"].refused["429"] == 30  # every request answered
    assert not tenants["B"].lost
    none, _ = run_system("none", schedule, OPTS, (1.0, 120.0, 2000), tmp_path)
    assert none["B"].completed == 30  # without flow control the pod queues them all


def test_tally_tells_refusals_from_losses() -> None:
    records = [
        RequestRecord("A-0", 0.0, ttft_s=0.1, e2e_s=0.5),
        RequestRecord("A-1", 0.5, ttft_s=0.2, e2e_s=1.0),  # finishes after the 1 s window
        RequestRecord("B-0", 0.0, error="http_429"),
        RequestRecord("B-1", 0.1, error="http_503"),
        RequestRecord("B-2", 0.2, error="timeout"),
    ]
    tenants = tally(records, 1.0)
    assert (tenants["A"].completed, tenants["A"].served) == (2, 1)
    assert dict(tenants["B"].refused) == {"429": 1, "503": 1} and dict(tenants["B"].lost) == {"timeout": 1}
    row = system_row(tenants, 1.0, {"A": 2.0, "B": 1.0})
    assert row["A"]["fleet_share"] == 0.5 and row["B"]["completed"] == 0


async def _held_server(seen: list[str], release: asyncio.Event) -> tuple[web.AppRunner, str]:
    """Answers nothing until ``release``: a request only reaches it if the client did not wait for
    the ones before."""

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        seen.append(request.headers.get("x-gateway-inference-fairness-id", ""))
        if len(seen) == 4:
            release.set()
        await release.wait()
        if request.headers.get("x-gateway-inference-objective") == "batch":
            return web.json_response({"error": {"message": "shed"}}, status=429)
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\ndata: [DONE]\n\n')
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner, port = await serve(app)
    return runner, f"http://127.0.0.1:{port}"


def test_http_clients_send_open_loop_with_each_tenants_headers() -> None:
    rng = random.Random(0)
    schedule = [(0.0, light(0, rng, "@critical")), (0.01, light(1, rng, "@critical"))]
    schedule += [(0.02, heavy(0, rng, 1, "@batch")), (0.03, heavy(1, rng, 1, "@batch"))]
    sends = sends_of(schedule, MediaCache(capacity=4))

    async def main() -> tuple[list[str], list[RequestRecord]]:
        seen: list[str] = []
        runner, base = await _held_server(seen, asyncio.Event())
        try:
            records, _late = await drive(base, sends, timeout_s=30.0)
        finally:
            await runner.cleanup()
        return seen, records

    seen, records = asyncio.run(main())
    # all four were in flight at once (the server answered none before the fourth arrived)
    assert sorted(seen) == ["A", "A", "B", "B"]
    tenants = tally(records, 30.0)
    assert tenants["A"].completed == 2 and dict(tenants["B"].refused) == {"429": 2}
    assert [r.sent_s for r in sorted(records, key=lambda r: r.sent_s)] == [0.0, 0.01, 0.02, 0.03]


def test_plot_draws_a_png_of_a_report(tmp_path: Path) -> None:
    report = {
        "mode": "des", "scenario": "priority", "profile": "fast", "pods": 1, "duration_s": 1.0,
        "capacity_rps": {"A": 10.0, "B": 1.0}, "offered_rps": {"A": 2.0, "B": 2.5},
        "a_alone": {"ttft_p90_s": 0.05},
        "systems": {
            "none": {
                "A": {"ttft_p90_s": 4.0, "fleet_share": 0.1},
                "B": {"ttft_p90_s": 6.0, "fleet_share": 0.8},
            },
            "media-cost": {
                "A": {"ttft_p90_s": 0.2, "fleet_share": 0.2},
                "B": {"ttft_p90_s": None, "fleet_share": 0.0, "refused": {"429": 3}},
            },
        },
    }  # fmt: skip
    path = plot_report(report, tmp_path / "priority.png")
    assert path.read_bytes().startswith(b"\x89PNG")


def test_report_json_puts_each_request_on_one_line_and_reads_back() -> None:
    report = {
        "systems": {
            "none": {"requests": [["A-0", 0.0, 0.1, 0.5, None], ["B-0", 0.1, None, None, "http_429"]]}
        }
    }
    text = to_json(report)
    assert '["A-0", 0.0, 0.1, 0.5, null]' in text and json.loads(text) == report


def test_cli_mistakes_exit_2_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for argv, words in (
        (["--systems", "none,fifo"], "unknown system(s) fifo"),
        (["--pods", "0"], "--pods must be at least 1"),
        (["--overload", "-1"], "--overload, --a-rate and --a-share must be above 0"),
    ):
        assert run(parser.parse_args(argv)) == 2
        assert words in capsys.readouterr().err


def test_held_times_read_the_gateways_access_log(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    lines = [
        '{"logger":"mmgate.gateway","msg":"listening"}',
        '{"logger":"mmgate.access","status":"200","flow":"A","held_ms":250.0}',
        '{"logger":"mmgate.access","status":"200","flow":"B","held_ms":0.0}',
        '{"logger":"mmgate.access","status":"429","flow":"B","held_ms":0.0}',  # refused: not held time
        '{"logger":"mmgate.access","status":"200"}',  # no flow control
        "not json",
    ]
    log.write_text("\n".join(lines) + "\n")
    assert held_times(log) == {"A": [0.25], "B": [0.0]}
