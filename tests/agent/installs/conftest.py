from __future__ import annotations

import pytest

from tests.agent.installs.cuda_builds import Stubs, build_stubs


@pytest.fixture(scope="session")
def cuda_stubs(tmp_path_factory: pytest.TempPathFactory) -> Stubs:
    """The stub libcudart and CUDA backend plugin, built once with cc (skipped without it, unless required)."""
    return build_stubs(tmp_path_factory.mktemp("cuda-stubs"))
