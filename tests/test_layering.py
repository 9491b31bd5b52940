"""The packages form layers read top to bottom: no module imports a package above its own, none imports a sibling
of its own layer, and no two modules import each other, however indirectly (imports inside functions count). Inside
control/ its rooms (sub-packages) form layers the same way, its root modules (the composition root, the process) on
top. The benches and the tests are the two top layers: a bench may import any of llmgw, a test any of llmgw and
bench/."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "llmgw"
ROOTS = (SRC, REPO / "bench", REPO / "tests")  # one graph: an import across them is seen like any other

# bottom to top; a package may import only packages of a lower layer (and itself). docs/architecture.md says why.
LAYERS: list[set[str]] = [
    {"core"},  # records of pure values, errors, the clock: nothing of llmgw
    {"wire"},  # the agent protocol
    {"records"},  # the control plane's node and replica records, built on wire's reports
    {"config"},
    {"store", "pki"},
    {"net", "api"},  # HTTP pieces shared by agent and control; what router and control say to each other
    {"placement"},
    {"reconcile", "chargeback"},  # chargeback: pure, GPU time in, charges out
    {"agent", "router"},
    {"control"},
    {"sim"},  # an engine stand-in: a process the agent launches like an engine
    {"dev"},
    {"cli"},
    {"bench"},  # the benches (bench/): they measure the product through any of its packages
    {"tests"},  # the tests (tests/): they may use a bench's parts; a bench never uses a test's
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}

# inside control/, bottom to top: a room may import only rooms of a lower layer (and itself); "" is the root's own
# modules (plane, server, workers, owners), which compose the rooms. docs/architecture.md says why.
CONTROL_LAYERS: list[set[str]] = [
    {"storage"},  # the store, its one writer, this server's part in leadership: what every owner writes through
    {"tenants", "hub"},  # keys, their counters, budgets and usage totals | hub models' resolutions
    {"activity"},  # what the routers saw (it counts against the keys' limits)
    {"nodes"},  # the registry, heartbeats, desired state, the passes (they read activity)
    {"ha", "chargeback"},  # following other servers | GPU time charged: both read the registry
    {"views"},  # computed from the owners' records
    {"http"},  # the doors: they serve the views and call the owners' operations
    {""},  # the composition root and the process
]
CONTROL_RANK = {room: i for i, layer in enumerate(CONTROL_LAYERS) for room in layer}


def module_of(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, module: str, modules: set[str]) -> set[str]:
    """The llmgw modules `path` imports: `from a import b` names a.b where that is a module, else a."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            out.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
    return {m for m in out if m in modules and m != module}


def graph(*roots: Path) -> dict[str, set[str]]:
    files = {module_of(p, root): p for root in roots for p in sorted(root.rglob("*.py"))}
    return {m: imports_of(p, m, set(files)) for m, p in files.items()}


def package(module: str) -> str:
    """llmgw's package a module is in ("" for llmgw's own __init__), or the top package outside llmgw (bench, tests)."""
    top, _, rest = module.partition(".")
    return rest.partition(".")[0] if top == "llmgw" else top


def room(module: str, packages: set[str]) -> str | None:
    """The room of a module inside control/ ("" for its root modules); None for control/__init__ and elsewhere."""
    parts = module.split(".")
    if parts[:2] != ["llmgw", "control"] or len(parts) < 3:
        return None
    return parts[2] if len(parts) > 3 or module in packages else ""


def upward_imports(g: dict[str, set[str]]) -> list[str]:
    packages = {m.rpartition(".")[0] for m in g}
    bad = []
    for m, targets in sorted(g.items()):
        for t in sorted(targets):
            a, b = package(m), package(t)
            if a == b == "control":
                bad += _upward_in_control(room(m, packages), room(t, packages), f"{m} -> {t}")
                continue
            if not b or a == b:
                continue  # llmgw's own __init__ (the version) is below everything; a package may import itself
            if a not in RANK or b not in RANK:
                bad.append(f"{m} -> {t}: a package without a layer (add it to LAYERS)")
            elif RANK[b] >= RANK[a]:
                bad.append(f"{m} -> {t}: {a} may not import {b}")
    return bad


def _upward_in_control(a: str | None, b: str | None, edge: str) -> list[str]:
    if a is None or b is None or a == b:
        return []  # control/__init__ is below every room; a room may import itself
    if a not in CONTROL_RANK or b not in CONTROL_RANK:
        return [f"{edge}: a room of control without a layer (add it to CONTROL_LAYERS)"]
    if CONTROL_RANK[b] >= CONTROL_RANK[a]:
        return [f"{edge}: control/{a or '(root)'} may not import control/{b or '(root)'}"]
    return []


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(g):
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(g[w]))))
            elif w in on:
                low[v] = min(low[v], index[w])
    return out


def test_no_import_runs_up_the_layers() -> None:
    assert upward_imports(graph(*ROOTS)) == []


def test_no_import_circle() -> None:
    assert circles(graph(*ROOTS)) == []


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert packages - set(RANK) == set()


def test_every_room_of_control_has_a_layer() -> None:
    rooms = {p.name for p in (SRC / "control").iterdir() if (p / "__init__.py").exists()}
    assert rooms - set(CONTROL_RANK) == set()


def test_the_rules_see_a_violation(tmp_path: Path) -> None:
    root = tmp_path / "llmgw"
    for pkg in ("core", "control", "cli"):
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "core" / "a.py").write_text("from llmgw.control import b\n")
    (root / "control" / "b.py").write_text("def f() -> None:\n    from llmgw.control.c import x\n")
    (root / "control" / "c.py").write_text("from . import b\nx = 1\n")
    (root / "cli" / "d.py").write_text("import llmgw.core.a\n")
    g = graph(root)
    assert upward_imports(g) == ["llmgw.core.a -> llmgw.control.b: core may not import control"]
    assert circles(g) == [["llmgw.control.b", "llmgw.control.c"]]


def test_the_rules_see_a_bench_out_of_place(tmp_path: Path) -> None:
    files = {
        "llmgw/__init__.py": "", "llmgw/cli/__init__.py": "", "bench/__init__.py": "", "tests/__init__.py": "",
        "llmgw/cli/x.py": "import bench.b\n",  # the product may not use a bench
        "bench/a.py": "from tests import t\n",  # nor a bench a test, and this one closes a circle
        "bench/b.py": "import llmgw.cli\n",
        "tests/t.py": "def f() -> None:\n    import bench.a\n",
        "tests/u.py": "from bench import b\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    g = graph(tmp_path / "llmgw", tmp_path / "bench", tmp_path / "tests")
    assert upward_imports(g) == ["bench.a -> tests.t: bench may not import tests",
                                 "llmgw.cli.x -> bench.b: cli may not import bench"]
    assert circles(g) == [["bench.a", "tests.t"]]


def test_the_rules_see_a_violation_inside_control(tmp_path: Path) -> None:
    """A room importing one above it, or a sibling of its layer, or the root; a room without a layer."""
    root = tmp_path / "llmgw"
    for pkg in ("control", "control/storage", "control/nodes", "control/ha", "control/chargeback", "control/views",
                "control/attic"):
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "control" / "storage" / "a.py").write_text("def f() -> None:\n    from llmgw.control.views import b\n")
    (root / "control" / "views" / "b.py").write_text("from llmgw.control.nodes import c\nimport llmgw.control\n")
    (root / "control" / "nodes" / "c.py").write_text("from llmgw.control.storage import a\nfrom . import d\n")
    (root / "control" / "nodes" / "d.py").write_text("from llmgw.control.plane import x\n")
    (root / "control" / "plane.py").write_text("from llmgw.control.views.b import y\nx = 1\n")
    (root / "control" / "ha" / "e.py").write_text("from llmgw.control.chargeback import f\n")
    (root / "control" / "chargeback" / "f.py").write_text("from llmgw.control.attic import g\n")
    (root / "control" / "attic" / "g.py").write_text("")
    (root / "control" / "views" / "h.py").write_text("import llmgw.control.attic\n")
    g = graph(root)
    assert upward_imports(g) == [
        "llmgw.control.chargeback.f -> llmgw.control.attic.g: a room of control without a layer (add it to "
        "CONTROL_LAYERS)",
        "llmgw.control.ha.e -> llmgw.control.chargeback.f: control/ha may not import control/chargeback",
        "llmgw.control.nodes.d -> llmgw.control.plane: control/nodes may not import control/(root)",
        "llmgw.control.storage.a -> llmgw.control.views.b: control/storage may not import control/views",
        "llmgw.control.views.h -> llmgw.control.attic: a room of control without a layer (add it to CONTROL_LAYERS)",
    ]
    assert circles(g) == [["llmgw.control.nodes.c", "llmgw.control.nodes.d", "llmgw.control.plane",
                           "llmgw.control.storage.a", "llmgw.control.views.b"]]
