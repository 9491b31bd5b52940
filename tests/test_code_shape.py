"""Sizes a reader can hold: no module over 400 lines (the product's and the benches'), and no function over 60 lines
(its nested functions counted in it) where the product's rules live: the control plane, reconciliation and the
router."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "llmgw"
SIZED = (SRC, REPO / "bench")  # where the module bound holds
MODULE_LINES = 400
FUNCTION_LINES = 60
RULE_PACKAGES = ("control", "reconcile", "router")


def long_modules(root: Path = SRC) -> list[str]:
    return [f"{p.relative_to(root)}: {n} lines" for p in sorted(root.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MODULE_LINES]


def long_modules_in(roots: tuple[Path, ...]) -> list[str]:
    return [f"{root.name}/{m}" for root in roots for m in long_modules(root)]


def long_functions(path: Path) -> list[str]:
    """Outermost functions (methods included) longer than the bound; a nested function is part of its outer one."""
    out: list[str] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if lines > FUNCTION_LINES:
                    out.append(f"{where}{child.name}: {lines} lines")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{where}{child.name}.")
            else:
                visit(child, where)

    visit(ast.parse(path.read_text()), "")
    return out


def test_no_module_over_400_lines() -> None:
    # the rule read something: a moved tree (or a wrong root) would find no file and pass
    assert all(len(list(root.rglob("*.py"))) >= 20 for root in SIZED), SIZED
    assert long_modules_in(SIZED) == []


def test_no_long_function_where_the_rules_live() -> None:
    files = {pkg: sorted((SRC / pkg).rglob("*.py")) for pkg in RULE_PACKAGES}
    assert all(len(found) >= 10 for found in files.values()), {k: len(v) for k, v in files.items()}
    bad = [f"{p.relative_to(SRC)}: {f}" for pkg, found in files.items() for p in found for f in long_functions(p)]
    assert bad == []


def test_the_measures_see_a_long_one(tmp_path: Path) -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(60))
    f = tmp_path / "m.py"
    f.write_text(f"class C:\n    def m(self) -> None:\n        def inner() -> None:\n            pass\n{body}\n"
                 "def short() -> None:\n    pass\n")
    assert long_functions(f) == ["C.m: 63 lines"]
    (tmp_path / "big.py").write_text("x = 1\n" * 401)
    assert long_modules(tmp_path) == ["big.py: 401 lines"]
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "long.py").write_text("x = 1\n" * 401)
    (tmp_path / "bench" / "short.py").write_text("x = 1\n" * 400)
    assert long_modules_in((tmp_path / "bench",)) == ["bench/long.py: 401 lines"]
    assert REPO / "bench" in SIZED  # the benches are held to it too
