"""The shipped Envoy configuration is the template's output, and a real Envoy accepts it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from mmgate.gateway.extproc.envoy_config import envoy_config, render
from support.envoy import envoy_binary
from support.processes import REPO, mmgate_command, subprocess_env

SHIPPED = REPO / "deploy" / "envoy"
SHIPPED_FILES = {
    "envoy.yaml": {},
    "envoy-original-dst.yaml": {"lb": "original-dst"},
    "envoy-buffered.yaml": {"request_body": "buffered"},
    # one Envoy in front of every picker replica, found through a headless Service
    "envoy-pickers.yaml": {
        "lb": "original-dst",
        "extproc": ["mmgate-epp-pods.mmgate-pool.svc.cluster.local:9002"],
    },
}


@pytest.mark.parametrize("name", list(SHIPPED_FILES))
def test_the_shipped_files_are_the_templates_output(name: str) -> None:
    assert (SHIPPED / name).read_text() == render(**SHIPPED_FILES[name])


def test_llm_d_s_configuration_reads_one_address_from_the_header_and_streams_both_ways() -> None:
    doc = envoy_config(lb="original-dst")
    cluster = doc["static_resources"]["clusters"][0]
    assert cluster["type"] == "ORIGINAL_DST" and cluster["lb_policy"] == "CLUSTER_PROVIDED"
    assert cluster["original_dst_lb_config"] == {
        "use_http_header": True,
        "http_header_name": "x-gateway-destination-endpoint",
    }
    manager = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    mode = manager["http_filters"][0]["typed_config"]["processing_mode"]
    assert mode["request_body_mode"] == mode["response_body_mode"] == "FULL_DUPLEX_STREAMED"
    assert "retry_policy" not in manager["route_config"]["virtual_hosts"][0]["routes"][0]["route"]


def test_the_buffered_configuration_holds_the_body_up_to_the_limit() -> None:
    doc = envoy_config(request_body="buffered", max_body_bytes=1000)
    manager = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    mode = manager["http_filters"][0]["typed_config"]["processing_mode"]
    assert (mode["request_body_mode"], mode["response_body_mode"]) == ("BUFFERED", "STREAMED")
    assert manager["route_config"]["virtual_hosts"][0]["routes"][0]["per_request_buffer_limit_bytes"] == 1000


def test_print_envoy_config_writes_the_template_for_the_given_ports() -> None:
    result = subprocess.run(
        mmgate_command("extproc", "--print-envoy-config", "--envoy-port", "8081", "--port", "9100",
                       "--endpoints", "10.0.0.5:8000,http://10.0.0.6:8000"),
        capture_output=True, text=True, env=subprocess_env(), timeout=60, check=True,
    )  # fmt: skip
    assert result.stdout == render(
        listen_port=8081, extproc="127.0.0.1:9100", endpoints=["10.0.0.5:8000", "10.0.0.6:8000"]
    )
    doc = yaml.safe_load(result.stdout)
    hosts = doc["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert [h["endpoint"]["address"]["socket_address"]["address"] for h in hosts] == ["10.0.0.5", "10.0.0.6"]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"fail_open": True},
        {"endpoints": ["127.0.0.1:8000"]},
        {"extproc": ["127.0.0.1:9002", "127.0.0.1:9003"]},
        *list(SHIPPED_FILES.values())[1:],
    ],
)
def test_envoy_validates_the_configuration(options: dict[str, object], tmp_path: Path) -> None:
    path = tmp_path / "envoy.yaml"
    path.write_text(render(**options))
    result = subprocess.run(
        [envoy_binary(), "--mode", "validate", "-c", str(path), "--disable-hot-restart"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def test_the_filter_streams_bodies_both_ways_and_fails_closed_by_default() -> None:
    doc = envoy_config()
    manager = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    ext_proc = manager["http_filters"][0]["typed_config"]
    mode = ext_proc["processing_mode"]
    assert mode["request_body_mode"] == mode["response_body_mode"] == "FULL_DUPLEX_STREAMED"
    assert ext_proc["failure_mode_allow"] is False
    assert envoy_config(fail_open=True)["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0][
        "typed_config"]["http_filters"][0]["typed_config"]["failure_mode_allow"] is True  # fmt: skip
    with pytest.raises(ValueError, match="not both"):
        envoy_config(endpoints=["a:1"], dns="b:2")
    with pytest.raises(ValueError, match="override-host, original-dst"):
        envoy_config(lb="maglev")  # type: ignore[arg-type]


def test_several_pickers_are_health_checked_and_a_change_reaches_every_worker_at_once() -> None:
    (one,) = [c for c in envoy_config()["static_resources"]["clusters"] if c["name"] == "mmgate_extproc"]
    assert "health_checks" not in one  # one picker: nothing to choose between
    doc = envoy_config(extproc=["10.0.0.1:9002", "10.0.0.2:9002"], picker_health_interval_s=0.2)
    (cluster,) = [c for c in doc["static_resources"]["clusters"] if c["name"] == "mmgate_extproc"]
    assert len(cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]) == 2
    # Envoy's default 1 s merge window hands health changes to the workers late: streams would
    # keep going to a replica already marked down
    assert cluster["common_lb_config"] == {
        "healthy_panic_threshold": {"value": 0},
        "update_merge_window": "0s",
    }
    assert cluster["outlier_detection"] == {  # a replica dead between two checks: out at once
        "split_external_local_origin_errors": True,
        "consecutive_local_origin_failure": 1,
        "max_ejection_percent": 50,
    }
    (check,) = cluster["health_checks"]
    assert check["grpc_health_check"] == {"service_name": "envoy.service.ext_proc.v3.ExternalProcessor"}
    assert check["interval"] == check["no_traffic_interval"] == "0.2s" and check["timeout"] == "1s"
    assert check["unhealthy_threshold"] == check["healthy_threshold"] == 1
    # a name stands for every replica it resolves to (a headless Service): health-checked too
    doc = envoy_config(extproc="mmgate-epp-pods.llm.svc.cluster.local:9002")
    (by_name,) = [c for c in doc["static_resources"]["clusters"] if c["name"] == "mmgate_extproc"]
    assert by_name["type"] == "STRICT_DNS"
    assert by_name["common_lb_config"]["update_merge_window"] == "0s"
    assert by_name["health_checks"][0]["grpc_health_check"] == check["grpc_health_check"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--print-envoy-config", "--endpoints", "no-port-here"], "HOST:PORT"),
        (["--print-envoy-config", "--envoy-lb", "maglev"], "--envoy-lb"),
        (["--max-endpoints", "0"], "--max-endpoints"),
        (["--drain-seconds", "-1"], "--drain-seconds"),
        (["--grace-seconds", "nan"], "--grace-seconds"),
    ],
)
def test_extproc_cli_mistakes_exit_2_without_a_traceback(argv: list[str], said: str) -> None:
    result = subprocess.run(
        mmgate_command("extproc", *argv), capture_output=True, text=True, env=subprocess_env(), timeout=60
    )
    assert result.returncode == 2 and said in result.stderr and "Traceback" not in result.stderr


def test_print_envoy_config_writes_llm_d_s_configuration_when_asked() -> None:
    result = subprocess.run(
        mmgate_command("extproc", "--print-envoy-config", "--envoy-lb", "original-dst",
                       "--envoy-request-body", "buffered"),
        capture_output=True, text=True, env=subprocess_env(), timeout=60, check=True,
    )  # fmt: skip
    assert result.stdout == render(lb="original-dst", request_body="buffered")
