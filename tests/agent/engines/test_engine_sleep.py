"""Which engines sleep is engine knowledge: the adapters start an engine able to sleep (vLLM: --enable-sleep-mode and
its development routes) only for a shard whose model has a sleep block, and the control plane's table
(config/engines.py: SLEEPS) names the same engines."""

from __future__ import annotations

from pathlib import Path

from llmgw.agent.engines import ADAPTERS, LaunchContext
from llmgw.agent.installs.engine_check import check_flags, flags_of
from llmgw.config.engines import SLEEPS, EngineName
from llmgw.config.server import ModelSpec, Scaling
from llmgw.config.serving import SleepConfig
from llmgw.control.nodes.desired import desired_for
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.wire.messages import ShardSpec

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "engines"
CTX = LaunchContext(binary="/opt/engine", model_path="/m/model", host="10.0.0.5")


def spec(engine: str, **kw: object) -> ShardSpec:
    base: dict[str, object] = dict(replica_id="r1", model="m", engine=engine, source="/m/model", rank=0,
                                   world_size=1, serve_port=20000)
    return ShardSpec.model_validate(base | kw)


def test_an_engine_sleeps_only_when_told_it_may_and_the_table_names_those_that_can() -> None:
    sleepers = set()
    for name, adapter in ADAPTERS.items():
        assert adapter.launch(spec(name), CTX).sleep is None
        assert "--enable-sleep-mode" not in adapter.launch(spec(name), CTX).argv
        if adapter.launch(spec(name, can_sleep=True), CTX).sleep is not None:
            sleepers.add(name)
            assert "--enable-sleep-mode" in adapter.launch(spec(name, can_sleep=True), CTX).argv
            assert "--enable-sleep-mode" in adapter.flags()  # engine-check holds it against the engine's --help
    assert sleepers == SLEEPS == {"sim", "vllm"}


def test_vllm_is_given_its_development_routes_and_the_sim_says_what_memory_it_holds() -> None:
    vllm = ADAPTERS["vllm"].launch(spec("vllm", can_sleep=True), CTX)
    assert vllm.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert vllm.sleep is not None and vllm.sleep.memory_field == ""  # its word is taken: no memory in its answer
    assert "VLLM_SERVER_DEV_MODE" not in ADAPTERS["vllm"].launch(spec("vllm"), CTX).env
    sim = ADAPTERS["sim"].launch(spec("sim", can_sleep=True), CTX)
    assert sim.sleep is not None and sim.sleep.memory_field == "gpu_memory_used_bytes"
    worker = ADAPTERS["sim"].launch(spec("sim", can_sleep=True, rank=1, world_size=2, leader_address="h"), CTX)
    assert worker.sleep is None  # only the serving rank is asked


def test_the_desired_state_says_a_shard_may_sleep_only_for_a_model_with_a_sleep_block_on_an_engine_that_can() -> None:
    r = ReplicaRecord(id="r1", model="m", created_at=0.0, secret="s", shards_expected=1,
                      assignments=[ShardAssignment(node_id="n1", rank=0, address="10.0.0.5", serve_port=20000)])

    def shard(engine: EngineName, sleep: SleepConfig | None) -> ShardSpec:
        m = ModelSpec(name="m", source="/m/model", engine=engine, scaling=Scaling(min=0, max=1))
        m = m.model_copy(update={"sleep": sleep})  # unvalidated: the catalog refuses a sleep block on llama.cpp
        return desired_for("n1", [r], {"m": m}, [engine], 5.0).shards[0]

    assert shard("sim", SleepConfig()).can_sleep
    assert shard("vllm", SleepConfig()).can_sleep
    assert not shard("sim", None).can_sleep
    assert not shard("llamacpp", SleepConfig()).can_sleep


def test_engine_check_holds_the_sleep_flag_against_vllms_own_help() -> None:
    """The stored `vllm serve --help=all` of 0.32.0 lists it (for CUDA and ROCm only, it says); the vLLM stages
    check it against the installed builds' help the same way (tests/vllm)."""
    assert "--enable-sleep-mode" in flags_of("vllm")
    help_text = (FIXTURES / "vllm-0.32.0-serve-help-all.txt").read_text(encoding="utf-8")
    report = check_flags("vllm", help_text)
    assert report.ok, report.missing
