from mmgate.datalayer.metrics import parse_metrics
from mmgate.vllm.lora import Adapter

VLLM_PAGE = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 3.0
vllm:num_requests_running{engine="1",model_name="qwen"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen"} 7.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="qwen",reason="capacity"} 99.0
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="qwen"} 0.5
vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="2048"} 1.0
vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="qwen"} 0.0
"""


def test_vllm_counts_are_summed_usage_is_the_max_and_prefix_names_do_not_collide() -> None:
    snap = parse_metrics(VLLM_PAGE, now=12.5)
    assert snap.engine == "vllm"
    assert snap.running == 5.0
    assert snap.waiting == 7.0  # not 106: ..._by_reason is another family
    assert snap.kv_usage == 0.5
    assert (snap.block_size, snap.num_gpu_blocks) == (16, 2048)
    assert snap.age(13.0) == 0.5


def test_sglang_family_is_recognised() -> None:
    page = (
        b'sglang:num_running_reqs{model_name="m"} 4\nsglang:num_queue_reqs{model_name="m"} 9\n'
        b'sglang:token_usage{model_name="m"} 0.75\n'
    )
    snap = parse_metrics(page)
    assert (snap.engine, snap.running, snap.waiting, snap.kv_usage) == ("sglang", 4.0, 9.0, 0.75)


def test_missing_and_malformed_values_are_unknown_not_zero() -> None:
    page = (
        b"vllm:num_requests_running garbage\n"
        b"vllm:num_requests_waiting 2 1700000000000\n"
        b"vllm:kv_cache_usage_perc NaN\n"
    )
    snap = parse_metrics(page)
    assert snap.running is None
    assert snap.waiting == 2.0  # a trailing timestamp is allowed
    assert snap.kv_usage is None
    assert snap.block_size is None


def test_deprecated_vllm_usage_name_still_read() -> None:
    assert parse_metrics(b"vllm:gpu_cache_usage_perc 0.4\n").kv_usage == 0.4


def test_lora_requests_info_newest_sample_wins_and_joins_the_served_adapters() -> None:
    """The gauge keeps one sample per label set ever seen; its value is the update time."""
    page = (
        b"# TYPE vllm:lora_requests_info gauge\n"
        b'vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",waiting_lora_adapters=""} 100.0\n'
        b'vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql, chat",'
        b'waiting_lora_adapters="math"} 200.0\n'
        b'vllm:lora_requests_info{max_lora="2",running_lora_adapters="older",waiting_lora_adapters=""} 50.0\n'
    )
    snap = parse_metrics(page, adapters={"sql": Adapter("base")})
    assert snap.lora is not None
    assert (snap.lora.running, snap.lora.waiting, snap.lora.max_loras) == ({"sql", "chat"}, {"math"}, 2)
    assert snap.lora.adapters == {"sql": Adapter("base")} and not snap.lora.room()
    assert parse_metrics(b"vllm:num_requests_waiting 1\n").lora is None
    assert parse_metrics(b"vllm:num_requests_waiting 1\n", adapters={"a": Adapter("b")}).lora is not None


def test_lora_names_from_the_page_are_bounded() -> None:
    names = ",".join(f"a{i}" for i in range(50_000)) + "," + "x" * 10_000
    page = f'vllm:lora_requests_info{{max_lora="zz",running_lora_adapters="{names}"}} 1\n'.encode()
    snap = parse_metrics(page)
    assert snap.lora is not None and len(snap.lora.running) == 1024 and snap.lora.max_loras == 0
