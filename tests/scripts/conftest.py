"""The release bundle (built once per module from the working tree) and the test machines a test boots."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scripts.machine import Machine
from tests.scripts.onboarding_kit import SCRIPTS


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run = subprocess.run([str(SCRIPTS / "build-bundle.sh"), "--tree", "--out", str(out), "--python", sys.executable],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return Path(run.stdout.strip().splitlines()[-1])


@pytest.fixture
def machines() -> Iterator[list[Machine]]:
    made: list[Machine] = []
    yield made
    for m in made:
        m.close()

