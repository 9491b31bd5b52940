"""docs/architecture.md's map stays true: each row of "where is the rule" names one module that exists and the
function it points at is defined there; the layer diagram names every package; the table of the control plane's
owners says what control/owners.py declares."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from llmgw.control.owners import OWNERS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
SRC = ROOT / "src" / "llmgw"


def rule_rows() -> list[tuple[str, str, str]]:
    text = DOC.read_text().split("## Where is the rule for", 1)[1]
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`"):
            rows.append((cells[0], cells[1].strip("`"), cells[2]))
    return rows


def defined(path: Path) -> set[str]:
    return {n.name for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def test_every_rule_points_at_one_module_that_defines_what_it_names() -> None:
    rows = rule_rows()
    assert len(rows) >= 9
    wrong = []
    for rule, module, said in rows:
        path = SRC / module
        if not path.is_file():
            wrong.append(f"{rule}: {module} does not exist")
            continue
        first = re.search(r"`(\w+)\(\)`", said)
        if first and first[1] not in defined(path):
            wrong.append(f"{rule}: {module} has no {first[1]}()")
    assert wrong == []


def test_the_layer_diagram_names_every_package() -> None:
    diagram = DOC.read_text().split("```", 2)[1]
    named = set(re.findall(r"(\w+)/", diagram))
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert packages - named == set()


def owner_rows(text: str) -> list[tuple[str, str, str]]:
    section = text.split("## The control plane's owners", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1].strip("`"), cells[2]))
    return rows


DECLARED = [(o.path, f"control/{o.module}", o.holds) for o in OWNERS]


def test_the_owners_table_says_what_owners_py_declares() -> None:
    assert owner_rows(DOC.read_text()) == DECLARED


def test_a_drifted_owners_table_is_seen() -> None:
    """A row renamed, moved or dropped in the page no longer says what owners.py declares."""
    text = DOC.read_text()
    assert owner_rows(text.replace("| `charge_book` |", "| `charges` |")) != DECLARED
    assert owner_rows(text.replace("`control/nodes/watch.py`", "`control/nodes/registry.py`")) != DECLARED
    dropped = "\n".join(ln for ln in text.splitlines() if not ln.startswith("| `activity.recent` |"))
    assert owner_rows(dropped) != DECLARED
