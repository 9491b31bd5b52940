"""A GPU build that installed and started but holds nothing on the GPUs its shard was given
(agent/supervisor/gpu_proof.py) is passed over for the next build that fits, with the reading's words among the
builds passed over, until the node's hardware changes; a CPU build has nothing to pass over to. The real installer,
a release server on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.agent.installs.installer import Installer
from llmgw.core.reasons import Reason
from tests.agent.installs.cuda_builds import Stubs
from tests.agent.installs.release import Release, release_server
from tests.agent.installs.test_cuda_runtime_companion import GPU_NODE, publish
from tests.agent.installs.test_install import context
from tests.agent.installs.test_installer import settle

WORDS = "ready, but its processes hold no memory on GPU 0 (0 MiB) of the 1 it was given (nvml)"


@pytest.fixture
def rel() -> Iterator[Release]:
    with release_server(Release()) as r:
        yield r


async def test_a_gpu_build_that_holds_nothing_is_passed_over_for_the_next(
    tmp_path: Path, rel: Release, cuda_stubs: Stubs
) -> None:
    source = publish(rel, cuda_stubs)
    inst = Installer(context(tmp_path / "engines"))
    await inst.converge([source], GPU_NODE, set())
    await settle(inst)
    (st,) = inst.statuses()
    assert st.runs and st.variant == "cuda12-x86_64", st
    assert not inst.refuse("vllm", Reason.GPUUnused, WORDS), "no build of an engine it does not install"

    assert inst.refuse("llamacpp", Reason.GPUUnused, WORDS)
    await inst.converge([source], GPU_NODE, set())
    await settle(inst)
    (st,) = inst.statuses()
    assert st.runs and st.variant == "cpu-x86_64", st
    (passed,) = st.passed_over
    assert (passed.variant, passed.reason) == ("cuda12-x86_64", "GPUUnused"), passed
    assert passed.message == f"cuda12-x86_64 {WORDS}", passed
    assert not inst.refuse("llamacpp", Reason.GPUUnused, WORDS), "the CPU build: nothing to pass over to"

    # a new driver: what failed before may run now, and is tried again
    newer = GPU_NODE.model_copy(update={"nvidia_driver": "575.51.03"})
    await inst.converge([source], newer, set())
    await settle(inst)
    (st,) = inst.statuses()
    assert st.runs and st.variant == "cuda12-x86_64" and st.passed_over == [], st
