"""core, placement and reconcile do no I/O: they import nothing that could do it (the clock module aside)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "llmgw"
PURE = ("core", "placement", "reconcile")
FORBIDDEN = {
    "aiohttp", "asyncio", "os", "pathlib", "shutil", "socket", "sqlite3", "ssl", "subprocess", "time", "urllib",
    "datetime", "random", "llmgw.store", "llmgw.control", "llmgw.router", "llmgw.agent", "llmgw.cli", "llmgw.dev",
    "llmgw.pki", "llmgw.sim",
}
ALLOWED = {("core", "clock.py"): {"time"}}  # SystemClock is the one door to the wall clock


def imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_pure_packages_import_nothing_that_does_io() -> None:
    bad = []
    for pkg in PURE:
        for f in sorted((SRC / pkg).glob("*.py")):
            allowed = ALLOWED.get((pkg, f.name), set())
            for name in imports(f):
                hit = next((x for x in FORBIDDEN if name == x or name.startswith(x + ".")), None)
                if hit and hit not in allowed:
                    bad.append(f"{pkg}/{f.name} imports {name}")
    assert bad == []


def test_no_wall_clock_in_logic() -> None:
    """time.time() and datetime.now() appear only in the clock; everything else is handed a Clock."""
    offenders = []
    for f in sorted(SRC.rglob("*.py")):
        text = f.read_text()
        for needle in ("time.time()", "datetime.now(", "datetime.utcnow("):
            if needle in text and f.relative_to(SRC).as_posix() != "core/clock.py":
                offenders.append(f"{f.relative_to(SRC)}: {needle}")
    assert offenders == []
