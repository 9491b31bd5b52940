"""One name, one class: no two classes in the product share a name. Two classes of one name meant two things
(a routing decision and an admission decision, a node's memory and the check of it), and a reader, or a grep, took
one for the other."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "llmgw"


def shared_class_names(root: Path = SRC) -> dict[str, list[str]]:
    """Each class name defined more than once under `root`, with where (module:line)."""
    where: dict[str, list[str]] = defaultdict(list)
    for p in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(f"{p.relative_to(root)}:{node.lineno}")
    return {name: at for name, at in where.items() if len(at) > 1}


def test_no_two_classes_share_a_name() -> None:
    assert shared_class_names() == {}


def test_the_rule_sees_a_name_shared(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.py").write_text("class Decision:\n    pass\n")
    (tmp_path / "y.py").write_text("def f() -> None:\n    class Decision:\n        pass\n\n\nclass Other:\n    pass\n")
    assert shared_class_names(tmp_path) == {"Decision": ["a/x.py:1", "y.py:2"]}
