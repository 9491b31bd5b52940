"""The router's code stays readable as a pipeline of small stages: no function over 60 lines (nested functions
counted in their outer one), no module over 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROUTER = Path(__file__).resolve().parents[2] / "src" / "llmgw" / "router"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 400


def long_functions(source: str) -> list[str]:
    """Outermost functions (methods included) of `source` over MAX_FUNCTION_LINES, with their length."""
    out: list[str] = []
    todo: list[ast.AST] = [ast.parse(source)]
    while todo:
        node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out.append(f"{child.name} ({length} lines)")
            elif isinstance(child, ast.ClassDef):
                todo.append(child)
    return out


def test_no_router_function_is_over_60_lines() -> None:
    bad = [f"router/{f.name}: {name}" for f in sorted(ROUTER.glob("*.py")) for name in long_functions(f.read_text())]
    assert bad == []


def test_no_router_module_is_over_400_lines() -> None:
    bad = [f"router/{f.name}: {n} lines" for f in sorted(ROUTER.glob("*.py"))
           if (n := len(f.read_text().splitlines())) > MAX_MODULE_LINES]
    assert bad == []


def test_the_length_rule_counts_a_nested_function_in_its_outer_one() -> None:
    inner = "\n".join(f"            x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    source = f"class C:\n    def outer(self) -> None:\n        def inner() -> None:\n{inner}\n"
    assert long_functions(source) == [f"outer ({MAX_FUNCTION_LINES + 2} lines)"]
    assert long_functions("def short() -> None:\n    pass\n") == []
