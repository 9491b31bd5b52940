"""Which declared fabrics this node can really take part in.

Membership is configuration: OpenSM gives every fabric the same default subnet prefix, so discovery cannot tell
two fabrics apart. But it is checked against what discovery sees, because an adapter in INIT looks healthy to
anything that counts adapters, carries no data, and the replica hangs on its first all-reduce.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from llmgw.wire.messages import Fabric, IBAdapter, Problem

ACTIVE = "ACTIVE"


class FabricDeclaration(Protocol):
    """A fabric named in agent.yaml with the adapters cabled to it (config.agent.FabricAttachment fits)."""

    @property
    def name(self) -> str: ...
    @property
    def adapters(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class DeclaredFabric:
    name: str
    adapters: Sequence[str]


def _stem(name: str) -> str:
    return name.rstrip("0123456789")


def _likely_meant(name: str, candidates: list[str]) -> str | None:
    # mlx5_3 on a node with mlx5_0 and mlx5_1 is a card that is missing; mlx_0 or mlx5_O is a typo worth a hint.
    if not candidates or _stem(name) in {_stem(c) for c in candidates}:
        return None

    def likeness(candidate: str) -> float:
        return difflib.SequenceMatcher(None, name, candidate).ratio()

    best = max(candidates, key=likeness)  # on a tie, the first in natural order
    return best if likeness(best) >= 0.6 else None


def _absent(fabric: str, name: str, adapters: dict[str, IBAdapter]) -> Problem:
    found = ", ".join(adapters) or "none"
    guess = _likely_meant(name, list(adapters))
    hint = f"; did you mean {guess}?" if guess else ""
    words = f"fabric {fabric}: adapter {name} is not on this node (found: {found}{hint})"
    return Problem(code="FabricAdapterMissing", message=words, subject=fabric)


def _inactive(fabric: str, adapter: IBAdapter) -> Problem:
    states = ", ".join(f"port {p.port}: {p.state}" for p in adapter.ports) or "no ports"
    words = f"fabric {fabric}: adapter {adapter.name} has no ACTIVE port ({states})"
    return Problem(code="FabricPortNotActive", message=words, subject=fabric)


def check_fabrics(
    declared: Sequence[FabricDeclaration], adapters: Sequence[IBAdapter]
) -> tuple[list[Fabric], list[Problem]]:
    """(fabrics to advertise, problems). An adapter is advertised only when present with an ACTIVE port; a fabric
    only when at least one of its adapters is; its rate is the slowest active link among those adapters, since a
    collective runs at its slowest."""
    by_name = {a.name: a for a in adapters}
    fabrics: list[Fabric] = []
    problems: list[Problem] = []
    for decl in declared:
        usable: list[str] = []
        rates: list[float] = []
        for name in dict.fromkeys(decl.adapters):  # a name written twice is one adapter
            adapter = by_name.get(name)
            if adapter is None:
                problems.append(_absent(decl.name, name, by_name))
                continue
            active = [p for p in adapter.ports if p.state == ACTIVE]
            if not active:
                problems.append(_inactive(decl.name, adapter))
                continue
            usable.append(name)
            rates.extend(p.rate_gbps for p in active)
        if not usable:
            words = f"fabric {decl.name}: not advertised: no adapter with an ACTIVE port"
            problems.append(Problem(code="FabricProblem", message=words, subject=decl.name))
            continue
        fabrics.append(Fabric(name=decl.name, adapters=usable, rate_gbps=min(rates)))
    return fabrics, problems
