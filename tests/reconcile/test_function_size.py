"""reconcile/ reads as stages: no function in it is over 60 lines (a nested function counts in its outer one)."""

from __future__ import annotations

import ast
from pathlib import Path

import llmgw.reconcile

LIMIT = 60


def long_functions(root: Path, limit: int = LIMIT) -> list[str]:
    """Functions and methods (not those nested in another) longer than `limit` lines, as "file:name lines"."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and not isinstance(
                        node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (child.end_lineno or child.lineno) - child.lineno + 1
                    if lines > limit:
                        out.append(f"{path.name}:{child.name} {lines}")
    return out


def test_no_function_in_reconcile_is_over_60_lines() -> None:
    assert long_functions(Path(llmgw.reconcile.__file__).parent) == []


def test_the_rule_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "m.py").write_text(f"def f() -> None:\n{body}\n\n\nclass C:\n    def g(self) -> None:\n        pass\n")
    assert long_functions(tmp_path) == ["m.py:f 61"]
