"""core, placement, reconcile and chargeback do no I/O: they import nothing that could (the clock module aside)."""

from __future__ import annotations

import ast
from pathlib import Path

from llmgw.control.owners import OWNERS as DECLARED

SRC = Path(__file__).resolve().parents[1] / "src" / "llmgw"
PURE = ("core", "placement", "reconcile", "chargeback")
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


# The control plane's owners, as control/owners.py declares them: each one's state is written only in its own
# module; another module asks the owner through a named operation. Module -> the names a reference to that owner goes
# by (a leading underscore aside: self._registry is the registry): its declared name and the short ones code uses.
# The plane (the composition root) holds its own few fields the same way.
SHORT_NAMES = {"registry": {"reg"}, "sleep_refusals": {"refusals"}, "charge_book": {"charges"}}
OWNERS = {"control/plane.py": {"plane", "p", "cp"}} | {
    f"control/{o.module}": {o.name} | SHORT_NAMES.get(o.name, set()) for o in DECLARED}
MUTATORS = {"pop", "update", "clear", "setdefault", "append", "add", "remove", "discard", "popitem", "extend",
            "insert"}


def _owner_of(node: ast.expr) -> str | None:
    """The module of the owner whose state this target lies in (x.registry.nodes[...], reg.nodes, ...), if any."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        inner = node.value
        if isinstance(node, ast.Attribute):
            name = inner.id if isinstance(inner, ast.Name) else inner.attr if isinstance(inner, ast.Attribute) else ""
            hit = next((m for m, names in OWNERS.items() if name.lstrip("_") in names), None)
            if hit is not None:
                return hit
        node = inner
    return None


def _write_targets(tree: ast.AST) -> list[ast.expr]:
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.Delete)):
            out += node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            out.append(node.target)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS
              and isinstance(node.func.value, (ast.Attribute, ast.Subscript))):
            out.append(node.func.value)
    return [t for t in out if isinstance(t, (ast.Attribute, ast.Subscript))]


def owner_writes(path: Path, module: str) -> list[str]:
    """Writes in `path` (known as `module`, e.g. "control/nodes/registry.py") into an owner's state from outside that
    owner's module: "line: target (owner's module)"."""
    out = []
    for t in _write_targets(ast.parse(path.read_text())):
        owner = _owner_of(t)
        if owner is not None and owner != module:
            out.append(f"{t.lineno}: {ast.unparse(t)} ({owner})")
    return out


def test_only_an_owner_writes_its_state() -> None:
    """Every write into an owner's state is in that owner's module; everyone else (other owners, the HTTP apps,
    the router, tests) goes through its named operations (activity.forget, credentials.create_key, ...)."""
    root = SRC.parents[1]
    files = [f for f in sorted(SRC.rglob("*.py")) + sorted((root / "tests").rglob("*.py")) if _may_hold_owners(f)]
    bad = [f"{f.relative_to(root)}:{w}" for f in files for w in owner_writes(f, f.relative_to(SRC).as_posix()
                                                                              if f.is_relative_to(SRC) else "")]
    assert bad == []


def _may_hold_owners(f: Path) -> bool:
    """Control's own modules and whatever imports them (a router's `_activity` is its own report, not an owner)."""
    return "control" in f.parts or any(n == "llmgw.control" or n.startswith("llmgw.control.") for n in imports(f))


def test_the_write_rule_sees_a_write(tmp_path: Path) -> None:
    f = tmp_path / "x.py"
    f.write_text("plane.registry.replicas['r'] = 1\nrut.plane.activity.demand.pop('m')\np.registry.generation += 1\n"
                 "plane.activity.want('m')\nreg.nodes['n'] = 2\n")
    assert sorted(w.split(": ")[1] for w in owner_writes(f, "tests/x.py")) == [
        "p.registry.generation (control/nodes/registry.py)", "plane.registry.replicas['r'] (control/nodes/registry.py)",
        "reg.nodes['n'] (control/nodes/registry.py)", "rut.plane.activity.demand (control/activity/activity.py)"]


def test_the_write_rule_sees_a_write_across_owners(tmp_path: Path) -> None:
    """In an owner's own module its state is its to write; another owner's is not, however it is reached."""
    f = tmp_path / "registry.py"
    f.write_text("self.replicas['r'] = 1\nself.generation += 1\nself._activity.demand.pop('m')\n"
                 "self._activity.forget('r')\nself._storage.writer.submit(1)\nreg = self\nreg.nodes['n'] = 2\n")
    assert [w.split(": ")[1] for w in owner_writes(f, "control/nodes/registry.py")] == [
        "self._activity.demand (control/activity/activity.py)"]
    from_activity = [w.split(": ")[1] for w in owner_writes(f, "control/activity/activity.py")]
    assert from_activity == ["reg.nodes['n'] (control/nodes/registry.py)"]


def test_the_write_rule_reads_every_declared_owner(tmp_path: Path) -> None:
    """The rule's owners are control/owners.py's: one held by another owner (limit_counters.gpu) and one the older
    list left out (chargeback) are seen as well."""
    f = tmp_path / "x.py"
    f.write_text("plane.limit_counters.gpu.mark = 1.0\nself._chargeback.spans['r'] = 2\nplane.chargeback.step()\n")
    assert [w.split(": ")[1] for w in owner_writes(f, "tests/x.py")] == [
        "plane.limit_counters.gpu.mark (control/tenants/gpu_budgets.py)",
        "self._chargeback.spans['r'] (control/chargeback/chargeback.py)"]
    assert {f"control/{o.module}" for o in DECLARED} < set(OWNERS)
