"""Per-plugin processing time: every plugin a timed decision ran is one series of the histogram."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from mmgate.config import parse_config
from mmgate.gateway.plugin_times import PluginTimes
from mmgate.scheduling import build_scheduler
from mmgate.scheduling.scheduler import TIMED_EVERY
from support.scheduling import endpoints, request


def test_one_decision_in_sixteen_times_each_plugin_under_its_extension_point_and_name() -> None:
    config = parse_config(
        {
            "plugins": [
                {"type": "token-producer"},
                {"type": "queue-scorer"},
                {"type": "kv-cache-utilization-scorer", "name": "kv"},
                {"type": "max-score-picker"},
            ],
            "schedulingProfiles": [
                {"name": "default", "plugins": [{"pluginRef": "queue-scorer"}, {"pluginRef": "kv"}]}
            ],
        }
    )
    times = PluginTimes()
    registry = CollectorRegistry()
    times.register(registry)
    scheduler = build_scheduler(config.picker, seed=1, plugin_timer=times)
    for i in range(2 * TIMED_EVERY + 1):  # the 1st, 17th and 33rd decisions are timed
        scheduler.schedule(request(rid=f"r{i}"), endpoints(2), float(i))
    page = generate_latest(registry).decode()
    metric = "mmgate_scheduler_plugin_duration_seconds_count"
    assert (
        f'{metric}{{extension_point="scorer",plugin_name="queue-scorer",plugin_type="queue-scorer"}} 3.0'
        in page
    )
    assert (
        f'{metric}{{extension_point="scorer",plugin_name="kv",plugin_type="kv-cache-utilization-scorer"}} 3.0'
        in page
    )
    picker = 'extension_point="picker",plugin_name="max-score-picker",plugin_type="max-score-picker"'
    assert f"{metric}{{{picker}}} 3.0" in page
    assert 'extension_point="producer",plugin_name="token-producer"' in page


def test_no_timer_means_no_timing_and_the_same_decisions() -> None:
    config = parse_config({"plugins": [{"type": "queue-scorer"}]})
    timed = build_scheduler(config.picker, seed=7, plugin_timer=PluginTimes())
    plain = build_scheduler(config.picker, seed=7)
    eps_a, eps_b = endpoints(4), endpoints(4)
    picks_a = [timed.schedule(request(rid=f"r{i}"), eps_a, 0.0).target.name for i in range(20)]
    picks_b = [plain.schedule(request(rid=f"r{i}"), eps_b, 0.0).target.name for i in range(20)]
    assert picks_a == picks_b
