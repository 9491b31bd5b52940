"""A replica whose engine refused sleep mode on its node (shard failed, reason SleepUnsupported) is replaced there
without sleep mode: the control plane learns the (node, engine) refusal, says so once, starts the replacement's
engine without it, and stops it when idle instead of putting it to sleep. Pure, with a fake clock."""

from __future__ import annotations

from dataclasses import replace

from llmgw.config.serving import SleepConfig
from llmgw.control.nodes.desired import desired_for
from llmgw.control.nodes.sleep_refusals import SleepRefusals
from llmgw.core.reasons import Reason
from llmgw.reconcile.intents import Fail, Intent, Stop
from llmgw.reconcile.sleep_intents import Sleep
from llmgw.reconcile.world import Timings, World
from llmgw.wire.messages import ShardState
from tests.clusters import model, node
from tests.reconcile.harness import Sim

IDLE = 600.0
WORDS = "exited with code 1: Value error, Sleep mode is not supported on current platform."


class Learning(Sim):
    """The harness, with the control plane's refusals learnt from its passes and read by the next."""

    def __init__(self) -> None:
        od = model("od", min_=0, max_=1, idle=IDLE, gpus_per_shard=8, source="/models/od")
        super().__init__([od.model_copy(update={"sleep": SleepConfig()})], [node("n1")],
                         timings=Timings(demand_window=60.0))
        self.refusals = SleepRefusals()
        self.said: list[tuple[str, str]] = []
        self._w: World | None = None

    def world(self) -> World:
        self._w = replace(super().world(), no_sleep=self.refusals.known())
        return self._w

    def step(self) -> list[Intent]:
        out = super().step()
        assert self._w is not None
        self.said += self.refusals.learn(self._w, out)
        return out

    def refuse(self, rid: str) -> None:
        """n1 reports the shard failed as its agent does when vLLM refuses --enable-sleep-mode."""
        rec = self.nodes["n1"]
        shard = ShardState(replica_id=rid, rank=0, state="failed", reason=Reason.SleepUnsupported, message=WORDS,
                           exit_code=1)
        self.nodes["n1"] = rec.model_copy(update={"report": rec.report.model_copy(update={"shards": [shard]}),
                                                  "last_seen": self.now})


def test_a_refusal_is_learnt_and_the_replacement_runs_there_without_sleep_mode() -> None:
    sim = Learning()
    sim.demand["od"] = sim.now
    sim.step()
    (first,) = sim.live("od")
    (shard,) = desired_for("n1", list(sim.replicas.values()), sim.models, ["sim"], 5.0).shards
    assert shard.can_sleep
    sim.advance(5)
    sim.refuse(first.id)
    out = sim.step()
    assert Fail(first.id, Reason.SleepUnsupported, f"rank 0 on n1 failed: {WORDS}") in out
    assert sim.refusals.known() == {("n1", "sim"): f"rank 0 on n1 failed: {WORDS}"}
    assert len(sim.said) == 1 and sim.said[0][0] == "n1" and "without sleep mode" in sim.said[0][1]
    sim.advance(5)
    sim.empty("n1")
    sim.step()
    (second,) = sim.live("od")
    assert second.id != first.id and second.node_ids() == ["n1"]
    (shard,) = desired_for("n1", list(sim.replicas.values()), sim.models, ["sim"], 5.0,
                           no_sleep=sim.refusals.known()).shards
    assert (shard.can_sleep, shard.sleep) == (False, 0), "started without sleep mode on the node that refused it"
    sim.run(10)
    assert sim.replicas[second.id].ready
    sim.demand.clear()
    sim.run(IDLE + 10)
    assert not any(isinstance(i, Sleep) for i in sim.intents)
    stops = [i for i in sim.intents if isinstance(i, Stop) and i.replica_id == second.id]
    assert [i.reason for i in stops] == [Reason.Idle], "idle: stopped, never put to sleep"
    assert len(sim.said) == 1, "said once"


def test_a_node_that_never_refused_still_sleeps_the_model() -> None:
    sim = Learning()
    sim.demand["od"] = sim.now
    sim.step()
    sim.run(10)
    sim.demand.clear()
    sim.run(IDLE + 10)
    assert any(isinstance(i, Sleep) for i in sim.intents) and sim.said == []
