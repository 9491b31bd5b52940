"""Where the suite's time goes: at the end of a run, the seconds its tests took (setup, call and teardown) summed per
directory of tests/, slowest first, printed and written to test-artifacts/durations-TIER.txt (unit, real or all, as
the run was asked: tests/tiers.py), with the slowest tests, for runs over the whole of tests/ only. docs/benchmarks.md
keeps the table of the last measured run; this makes it again. With pytest-xdist the reports of every worker reach
the controller, which sums them: the table is test time, not wall time (several workers run at once)."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]
_by_dir: dict[str, float] = defaultdict(float)
_count: dict[str, int] = defaultdict(int)
_by_test: dict[str, float] = defaultdict(float)
SLOWEST = 30


def directory(nodeid: str) -> str:
    """tests/integration/test_x.py::test_y -> tests/integration (top-level test files count as tests/)."""
    return os.path.dirname(nodeid.split("::")[0]) or "."


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    d = directory(report.nodeid)
    _by_dir[d] += report.duration
    _by_test[report.nodeid] += report.duration
    if report.when == "call" or (report.when == "setup" and report.skipped):
        _count[d] += 1


def table(by_dir: dict[str, float], count: dict[str, int]) -> list[str]:
    total = sum(by_dir.values()) or 1.0
    lines = [f"{'directory':<28} {'tests':>6} {'seconds':>9} {'share':>6}"]
    for d, s in sorted(by_dir.items(), key=lambda kv: -kv[1]):
        lines.append(f"{d:<28} {count[d]:>6} {s:>9.1f} {100 * s / total:>5.1f}%")
    lines.append(f"{'total':<28} {sum(count.values()):>6} {sum(by_dir.values()):>9.1f}")
    return lines


def slowest(by_test: dict[str, float], n: int = SLOWEST) -> list[str]:
    """The n slowest tests, where a shorter suite would be won."""
    return [f"{s:>7.1f}  {t}" for t, s in sorted(by_test.items(), key=lambda kv: -kv[1])[:n]]


def whole_suite(config: pytest.Config) -> bool:
    """A run over the whole of tests/ (the table is only kept for those: one file's run would overwrite it)."""
    args = [a for a in config.args if not a.startswith("-")]
    return all(Path(a).resolve() in (_ROOT, _ROOT / "tests") for a in args)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") or not _by_dir:
        return  # a worker's reports are summed by the controller
    lines = table(_by_dir, _count)
    terminalreporter.write_sep("=", "test time per directory (tests/timing.py)")
    for line in lines:
        terminalreporter.write_line(line)
    config = terminalreporter.config
    if not whole_suite(config):
        return
    out = _ROOT / "test-artifacts"
    out.mkdir(exist_ok=True)
    tier = "unit" if config.getoption("unit") else "real" if config.getoption("real") else "all"
    text = [*lines, "", f"slowest {SLOWEST} tests (seconds, setup + call + teardown)", *slowest(_by_test)]
    (out / f"durations-{tier}.txt").write_text("\n".join(text) + "\n")
