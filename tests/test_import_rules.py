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


def test_the_router_does_not_import_the_control_plane() -> None:
    """The two meet through llmgw.wire.router's types and the RouterState interface; control builds the router."""
    bad = [f"router/{f.name} imports {name}" for f in sorted((SRC / "router").glob("*.py")) for name in imports(f)
           if name == "llmgw.control" or name.startswith("llmgw.control.")]
    assert bad == []


PLANE_NAMES = {"plane", "p", "cp"}  # what a ControlPlane is called wherever one is held
MUTATORS = {"pop", "update", "clear", "setdefault", "append", "add", "remove", "discard", "popitem", "extend",
            "insert"}


def _on_the_plane(node: ast.expr) -> bool:
    """plane.x[...]..., or anything.plane.x...: an expression inside a ControlPlane's state."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        inner = node.value
        if isinstance(node, ast.Attribute) and (
            (isinstance(inner, ast.Name) and inner.id in PLANE_NAMES)
            or (isinstance(inner, ast.Attribute) and inner.attr == "plane")
        ):
            return True
        node = inner
    return False


def plane_writes(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS
              and isinstance(node.func.value, (ast.Attribute, ast.Subscript))):
            targets = [node.func.value]
        out += [f"{t.lineno}: {ast.unparse(t)}" for t in targets
                if isinstance(t, (ast.Attribute, ast.Subscript)) and _on_the_plane(t)]
    return out


def test_nothing_outside_control_writes_the_plane_state() -> None:
    """Every write goes through the plane's named operations (record activity, want, create or revoke a key,
    record usage), never into its dictionaries from outside: not from the admin API's neighbours, not from the
    router, not from tests."""
    root = SRC.parents[1]
    files = [f for f in sorted(SRC.rglob("*.py")) if "control" not in f.relative_to(SRC).parts]
    files += sorted((root / "tests").rglob("*.py"))
    bad = [f"{f.relative_to(root)}:{w}" for f in files for w in plane_writes(f)]
    assert bad == []


def test_the_write_rule_sees_a_write(tmp_path: Path) -> None:
    f = tmp_path / "x.py"
    f.write_text("plane.replicas['r'] = 1\nrut.plane.demand.pop('m')\np.generation += 1\nplane.want('m')\n")
    assert sorted(w.split(": ")[1] for w in plane_writes(f)) == ["p.generation", "plane.replicas['r']",
                                                                  "rut.plane.demand"]
