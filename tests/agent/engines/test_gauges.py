"""Reading an engine's load from its Prometheus text: each engine's own names, as its /metrics page writes them (HELP
and TYPE lines, labels, counters and histograms around the gauges), and pages that are hostile or not metrics at all.

What is decided for values that are not counts: NaN or infinity make that gauge None (no reading); a finite value out
of range is clamped (negative to 0, counts to 1e9, the KV cache fraction to 1)."""

from __future__ import annotations

import pytest

from llmgw.agent.engines import ADAPTERS
from llmgw.agent.engines.gauges import LINES_MAX, Gauges, read_load
from llmgw.agent.engines.llamacpp import GAUGES as LLAMACPP
from llmgw.agent.engines.sglang import GAUGES as SGLANG
from llmgw.agent.engines.sim import GAUGES as SIM
from llmgw.agent.engines.vllm import GAUGES as VLLM
from llmgw.wire.messages import EngineLoad

AT = 1_800_000_000.0

# the shape of vLLM's page (V1 engine, two data-parallel engines): every series labelled by engine and model_name
VLLM_PAGE = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="org/m"} 3.0
vllm:num_requests_running{engine="1",model_name="org/m"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="org/m"} 7.0
vllm:num_requests_waiting{engine="1",model_name="org/m"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="org/m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="org/m"} 0.25
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="org/m"} 98765.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="org/m"} 4.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="org/m"} 9.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="org/m"} 9.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="org/m"} 12.5
"""

# an older vLLM: the KV cache gauge under its former name
VLLM_OLD_PAGE = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 0.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.125
"""

# llama-server --metrics: no labels; the KV cache ratio is missing from some builds
LLAMACPP_PAGE = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 412
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 1.3
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 88
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
"""

SGLANG_PAGE = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 4.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 1.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 0.62
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 41.5
"""

SIM_PAGE = "# TYPE sim:requests_running gauge\nsim:requests_running 1\n# TYPE sim:requests_waiting gauge\n" \
    "sim:requests_waiting 0\n"


def test_vllm_sums_counts_across_its_engines_and_averages_their_caches() -> None:
    assert read_load(VLLM_PAGE, VLLM, AT) == EngineLoad(running=5, waiting=7, kv_cache_usage=0.375, at=AT)


def test_vllm_before_the_rename_reports_its_cache_under_the_old_name() -> None:
    assert read_load(VLLM_OLD_PAGE, VLLM, AT) == EngineLoad(running=1, waiting=0, kv_cache_usage=0.125, at=AT)


def test_a_build_exporting_both_names_is_read_once_under_the_new() -> None:
    both = VLLM_PAGE + 'vllm:gpu_cache_usage_perc{engine="0",model_name="org/m"} 0.9\n'
    load = read_load(both, VLLM, AT)
    assert load is not None and load.kv_cache_usage == 0.375


def test_llamacpp_without_a_kv_gauge_reports_that_gauge_as_unknown_not_zero() -> None:
    assert read_load(LLAMACPP_PAGE, LLAMACPP, AT) == EngineLoad(running=1, waiting=2, kv_cache_usage=None, at=AT)
    with_kv = LLAMACPP_PAGE + "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.75\n"
    load = read_load(with_kv, LLAMACPP, AT)
    assert load is not None and load.kv_cache_usage == 0.75


def test_sglang() -> None:
    assert read_load(SGLANG_PAGE, SGLANG, AT) == EngineLoad(running=4, waiting=1, kv_cache_usage=0.62, at=AT)


def test_sim() -> None:
    assert read_load(SIM_PAGE, SIM, AT) == EngineLoad(running=1, waiting=0, kv_cache_usage=None, at=AT)


def test_every_adapter_leading_a_served_shard_names_its_metrics_page() -> None:
    from llmgw.agent.engines.base import LaunchContext
    from llmgw.wire.messages import ShardSpec

    ctx = LaunchContext(binary="/e/bin", model_path="/m", host="127.0.0.1", key_file="/k")
    for name, adapter in ADAPTERS.items():
        spec = ShardSpec(replica_id="r", model="m", engine=name, source="/m", rank=0, world_size=1, serve_port=8000)
        launch = adapter.launch(spec, ctx)
        assert launch.metrics_path == "/metrics" and launch.gauges.running, name


def test_another_engines_page_holds_none_of_the_gauges() -> None:
    assert read_load(VLLM_PAGE, SGLANG, AT) is None
    assert read_load(LLAMACPP_PAGE, Gauges(), AT) is None


@pytest.mark.parametrize("text", [
    "",
    "\n\n\n",
    "<html><body>Not Found</body></html>",
    '{"object": "list", "data": []}',
    "\x00\xff\ufffd" * 1000,
    "# HELP only comments\n# TYPE nothing gauge\n",
])
def test_a_page_that_is_not_metrics_is_no_load(text: str) -> None:
    assert read_load(text, VLLM, AT) is None


@pytest.mark.parametrize("line", [
    "vllm:num_requests_running{engine=0} 3",  # an unquoted label value
    'vllm:num_requests_running{engine="0" 3',  # labels never closed
    "vllm:num_requests_running three",
    "vllm:num_requests_running",
])
def test_a_garbled_gauge_line_is_no_load_not_a_crash(line: str) -> None:
    assert read_load(line + "\nvllm:num_requests_waiting 1\n", VLLM, AT) is None


def test_garbage_around_the_gauges_is_not_parsed() -> None:
    page = "this is { not prometheus\n" + SIM_PAGE + "sim:other{{{ ]]] x\n"
    assert read_load(page, SIM, AT) == EngineLoad(running=1, waiting=0, at=AT)


def test_a_name_that_only_starts_like_a_gauge_is_not_it() -> None:
    page = "sim:requests_running_total 40\nsim:requests_running 2\n"
    load = read_load(page, SIM, AT)
    assert load is not None and load.running == 2


@pytest.mark.parametrize(("value", "running"), [
    ("NaN", None),
    ("+Inf", None),
    ("-Inf", None),
    ("-3", 0.0),
    ("1e300", 1e9),
    ("1e400", None),  # beyond a float: infinity
])
def test_counts_out_of_range(value: str, running: float | None) -> None:
    load = read_load(f"sim:requests_running {value}\nsim:requests_waiting 1\n", SIM, AT)
    assert load is not None and load.running == running and load.waiting == 1


def test_huge_values_summed_across_labels_stay_within_the_wire() -> None:
    page = "".join(f'vllm:num_requests_running{{engine="{i}"}} 1e308\n' for i in range(10))
    load = read_load(page, VLLM, AT)
    assert load is not None and load.running == 1e9


@pytest.mark.parametrize(("value", "kv"), [("1.7", 1.0), ("-0.2", 0.0), ("NaN", None), ("42", 1.0)])
def test_the_kv_fraction_is_clamped_to_0_1(value: str, kv: float | None) -> None:
    load = read_load(f"sglang:num_running_reqs 1\nsglang:token_usage {value}\n", SGLANG, AT)
    assert load is not None and load.kv_cache_usage == kv


def test_a_page_of_endless_gauge_lines_is_refused_unparsed() -> None:
    page = "".join(f'sim:requests_running{{i="{i}"}} 1\n' for i in range(LINES_MAX + 1))
    assert read_load(page, SIM, AT) is None
    within = "".join(f'sim:requests_running{{i="{i}"}} 1\n' for i in range(LINES_MAX))
    load = read_load(within, SIM, AT)
    assert load is not None and load.running == LINES_MAX


def test_timestamps_and_escaped_label_values_are_read() -> None:
    page = 'sim:requests_running{model_name="a \\"quoted\\" {name} 9"} 2 1700000000000\n'
    load = read_load(page, SIM, AT)
    assert load is not None and load.running == 2
