"""The request fields the router rewrites to a reservation's bound are its own table, not the agent's: the router
imports nothing of the agent, and the table still names every field any engine adapter reads."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from llmgw.agent.engines import ADAPTERS
from llmgw.router.limits import CHOICES, MAX_FIELDS

ROUTER = Path(__file__).resolve().parents[2] / "src" / "llmgw" / "router"


def agent_imports(source: str) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return [n for n in names if n == "llmgw.agent" or n.startswith("llmgw.agent.")]


def test_the_router_imports_nothing_of_the_agent() -> None:
    bad = [f"router/{f.name} imports {n}" for f in sorted(ROUTER.glob("*.py")) for n in agent_imports(f.read_text())]
    assert bad == []
    assert agent_imports("from llmgw.agent.engines import ADAPTERS\nimport llmgw.agentx\n") == ["llmgw.agent.engines"]


@pytest.mark.parametrize("engine", sorted(ADAPTERS))
def test_every_field_an_engine_reads_as_a_bound_is_rewritten(engine: str) -> None:
    bounds = ADAPTERS[engine].bounds
    assert set(bounds.length) <= set(MAX_FIELDS), f"{engine} reads a length field the router leaves alone"
    assert set(bounds.choices) <= set(CHOICES), f"{engine} reads a choice field the router leaves alone"
