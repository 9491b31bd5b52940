"""Nodes where an engine refused to start able to sleep (vLLM's CPU build: reason SleepUnsupported).

Learnt from the passes: a replica failed with that reason names its node and its model's engine. From then on the
node's shards of that engine start without sleep mode (control/nodes/desired.py) and its idle replicas stop instead of
sleeping (reconcile/sleeping.py reads World.no_sleep). Soft state, like the scale timers: after a restart the first
refusal is learnt again (one failed start), never a crash loop.
"""

from __future__ import annotations

from collections.abc import Iterable

from llmgw.core.reasons import Reason
from llmgw.reconcile.intents import Fail, Intent
from llmgw.reconcile.world import World

MAX_KEPT = 4096  # (node, engine) pairs: beyond it the oldest learnt is forgotten (and learnt again if it recurs)


class SleepRefusals:
    def __init__(self) -> None:
        self._refused: dict[tuple[str, str], str] = {}  # (node, engine) -> the engine's words

    def known(self) -> dict[tuple[str, str], str]:
        return dict(self._refused)

    def learn(self, w: World, intents: Iterable[Intent]) -> list[tuple[str, str]]:
        """The refusals among a pass's intents; (node, what to log) for each one new."""
        out = []
        replicas = {r.id: r for r in w.replicas}
        for i in intents:
            r = replicas.get(i.replica_id) if isinstance(i, Fail) and i.reason == Reason.SleepUnsupported else None
            spec = w.models.get(r.model) if r is not None else None
            if r is None or spec is None or not isinstance(i, Fail):
                continue
            for n in r.node_ids():
                if (n, spec.engine) in self._refused:
                    continue
                if len(self._refused) >= MAX_KEPT:
                    del self._refused[next(iter(self._refused))]
                self._refused[(n, spec.engine)] = i.words
                out.append((n, f"node {n}: {spec.engine} cannot start able to sleep here ({i.words}): its replicas "
                               f"there run without sleep mode and stop when idle"))
        return out
