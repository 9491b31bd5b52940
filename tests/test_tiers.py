"""The unit tier (`make check`, `pytest --unit`) keeps out tests that start processes: by their mark, and by
failing one left in that starts a process anyway (tests/tiers.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.tiers import REAL_DIRS, REAL_FIXTURES

TESTS = Path(__file__).resolve().parent
QUIET = ("-p", "tests.tiers", "-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function")

SPAWNS = """
import subprocess
import pytest

def test_pure():
    assert 1 + 1 == 2

def test_spawns_unmarked():
    subprocess.run(["true"], check=True)

def test_spawns_and_swallows_the_refusal():
    try:
        subprocess.run(["true"], check=True)
    except BaseException:
        pass

@pytest.mark.real
def test_spawns_marked():
    subprocess.run(["true"], check=True)
"""


def test_a_unit_test_that_starts_a_process_fails_the_unit_tier(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_spawn=SPAWNS)
    out = pytester.runpytest(*QUIET, "--unit")
    out.assert_outcomes(passed=1, failed=2, deselected=1)
    out.stdout.fnmatch_lines(["*a unit test started a process (subprocess*mark*real*"])


def test_without_unit_nothing_is_left_out(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_marks="""
import pytest

def test_pure():
    pass

@pytest.mark.real
def test_marked():
    pass
""")
    pytester.runpytest(*QUIET).assert_outcomes(passed=2)
    pytester.runpytest(*QUIET, "--unit").assert_outcomes(
        passed=1, deselected=1)


def test_the_real_tier_is_what_the_unit_tier_leaves_out(pytester: pytest.Pytester) -> None:
    """`make test` runs the unit tier, then --real: together every test, each once."""
    pytester.makepyfile(test_marks="""
import pytest

def test_pure():
    pass

def test_pure_too():
    pass

@pytest.mark.real
def test_marked():
    pass
""")
    pytester.runpytest(*QUIET, "--real").assert_outcomes(passed=1, deselected=2)
    assert pytester.runpytest(*QUIET, "--real", "--unit").ret == pytest.ExitCode.USAGE_ERROR  # one half or the other


def test_the_rules_name_folders_and_fixtures_that_exist() -> None:
    """A renamed folder or fixture would silently move its tests into the unit tier (where the guard fails them)."""
    assert sorted(d for d in REAL_DIRS if not (TESTS / d).is_dir()) == []
    source = "\n".join(p.read_text() for p in TESTS.rglob("*.py"))
    assert sorted(f for f in REAL_FIXTURES if not re.search(rf"\bdef {f}\(", source)) == []
