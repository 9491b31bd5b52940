"""The two test tiers. `make check` runs `pytest --unit`: the unit tier, which leaves out every test marked `real`
and fails any test left in it that starts a process (an engine, PostgreSQL, a network namespace, Chromium, any
subprocess), so a test that needs real parts cannot slip into the fast tier unmarked. `make test` runs `make check`,
then `pytest --real`: every test the unit tier left out, so every test runs once.

A test is marked `real` by its file (`pytestmark = pytest.mark.real`), by its folder (REAL_DIRS), or by using a
fixture that starts real parts (REAL_FIXTURES)."""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

# folders under tests/ whose tests (nearly all) run real processes: clusters, namespaces, machines, engines, installers
REAL_DIRS = frozenset({"integration", "reliability", "scripts", "vllm", "deploy", "bench", "sim", "cli",
                       "agent/installs", "agent/supervisor"})
# fixtures that start a real part (tests/conftest.py, tests/router/conftest.py, tests/integration/conftest.py, ...)
REAL_FIXTURES = frozenset({"postgres", "dsn", "two", "engines", "llama", "running", "start_engine"})
# a parameter naming a real part: tests/store's `opener` runs each test over SQLite and over PostgreSQL
REAL_PARAMS = frozenset({"postgres"})

_TESTS = Path(__file__).resolve().parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--unit", action="store_true",
                     help="the unit tier (make check): no test marked real; a test that starts a process fails")
    parser.addoption("--real", action="store_true", help="only the tests marked real: what --unit leaves out")


_unit = False


def examples(full: int) -> int:
    """How many cases a property test tries: all of them in `make test`, a tenth (at least 10) in the unit tier and
    under `make mutation` (mutmut names the mutant a run is for in MUTANT_UNDER_TEST: every mutant runs them)."""
    return max(10, full // 10) if _unit or os.environ.get("MUTANT_UNDER_TEST") else full


def pytest_configure(config: pytest.Config) -> None:
    global _unit
    _unit = bool(config.getoption("unit"))
    if _unit:
        platform.processor()  # runs `uname -p` once and keeps it: a client library asking later starts none


def is_real(item: pytest.Item) -> bool:
    if item.get_closest_marker("real"):
        return True
    path = Path(str(item.path)).resolve()
    if path.is_relative_to(_TESTS):
        parts = path.relative_to(_TESTS).parts
        if any("/".join(parts[:n]) in REAL_DIRS for n in range(1, len(parts))):
            return True
    if REAL_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and bool(REAL_PARAMS & {str(v) for v in callspec.params.values()})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if is_real(item) and not item.get_closest_marker("real"):
            item.add_marker(pytest.mark.real)
    if config.getoption("unit") and config.getoption("real"):
        raise pytest.UsageError("--unit and --real are the two halves of the suite: ask for one")
    if not (config.getoption("unit") or config.getoption("real")):
        return
    real = bool(config.getoption("real"))
    keep = [i for i in items if bool(i.get_closest_marker("real")) == real]
    config.hook.pytest_deselected(items=[i for i in items if bool(i.get_closest_marker("real")) != real])
    items[:] = keep


class _NoProcesses:
    """While installed, starting a process raises PermissionError (an OSError, as a failed exec would: pytest's own
    exceptions raised deep in an event loop can crash the run) and is remembered, since code may swallow it."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self._popen_init: Any = None
        self._fork: Any = None

    def _refuse(self, what: str) -> None:
        self.started.append(what)
        raise PermissionError(f"a unit test started a process ({what}): mark the test real (tests/tiers.py)")

    def __enter__(self) -> _NoProcesses:
        self._popen_init, self._fork = subprocess.Popen.__init__, os.fork
        guard = self

        def popen_init(self: subprocess.Popen[Any], args: Any, *a: Any, **k: Any) -> None:
            guard._refuse(f"subprocess {args!r}"[:200])

        def fork() -> int:
            guard._refuse("os.fork")
            return -1

        subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]
        os.fork = fork
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.Popen.__init__ = self._popen_init  # type: ignore[method-assign]
        os.fork = self._fork


def _guarded(item: pytest.Item) -> Generator[None, None, None]:
    if not item.config.getoption("unit"):
        yield
        return
    with _NoProcesses() as guard:
        yield
    if guard.started:
        pytest.fail(f"a unit test started a process ({guard.started[0]}): mark it real (tests/tiers.py)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _guarded(item))
