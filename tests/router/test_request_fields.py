"""The request fields the router rewrites to a reservation's bound are its own table, not the agent's (the router
imports nothing of the agent: tests/test_layering.py), and the table still names every field any adapter reads."""

from __future__ import annotations

import pytest

from llmgw.agent.engines import ADAPTERS
from llmgw.router.limits import CHOICES, MAX_FIELDS


@pytest.mark.parametrize("engine", sorted(ADAPTERS))
def test_every_field_an_engine_reads_as_a_bound_is_rewritten(engine: str) -> None:
    bounds = ADAPTERS[engine].bounds
    assert set(bounds.length) <= set(MAX_FIELDS), f"{engine} reads a length field the router leaves alone"
    assert set(bounds.choices) <= set(CHOICES), f"{engine} reads a choice field the router leaves alone"
