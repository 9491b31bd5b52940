"""A recording of the control plane's reconcile path: one fixed scenario driven through the real ControlPlane (a fake
clock, SQLite in a temp dir, simulated nodes answering as agents do, no network), with every store write, every
event, each pass's intents and each node's desired state recorded in order, random ids replaced by the ordinal of
their first appearance (bench/recording.py). It prints a digest of each; --out writes the whole recording, a JSON
line an entry. Two trees that record the same digest made the same writes and events from the same inputs: how a
regrouping of control/ is shown to change no behaviour. The bench needs only what every such tree has: the plane
(llmgw.control.plane) and its owners reached as its attributes, the wire and config models, the store.

The scenario: five nodes join (four on one InfiniBand fabric, one alone with another GPU class); a catalog of a
model kept at one replica that scales on load, three on-demand models (one sleeps when idle, two fit only the odd
node), a model spanning two nodes and one no node can hold. Then demand and use from routers, load and its end (a
replica stopped while a request drains), sleep and wake, a shard that fails, a node lost (a replica evicted for its
replacement) and back, eviction for a load, a stall of the control plane, every node silent at once, idle timeouts,
failed replicas reaped and a node revoked.

    PYTHONPATH=src:. python -m bench.reconcile_record --out new.jsonl
    PYTHONPATH=/tmp/old/src:. python -m bench.reconcile_record --out old.jsonl   # another tree's llmgw, this bench
    diff old.jsonl new.jsonl
    python -m bench.reconcile_record --smoke      # the scenario twice: the recordings must be the same
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from bench.recording import Recording, RecordingStore, seeded_secrets
from llmgw.config.server import EvictionConfig, ModelSpec, Profile, Scaling, ServerConfig, TLSFiles
from llmgw.config.serving import SleepConfig
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.store.base import Store
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.messages import GPU, DesiredState, EngineStatus, Fabric, Hardware, NodeReport, ShardState


def _named(*where: tuple[str, str]) -> Any:
    """The first of these (module, name) that exists: the recording runs on trees before a renaming and after."""
    for module, name in where:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"none of {where}")


# renamed when each concept got one word (a node's lease is a renewal; the router's report of its activity)
Report = _named(("llmgw.api.router", "ActivityReport"), ("llmgw.api.router", "Activity"))
Renewal = _named(("llmgw.wire.renewal", "Renewal"), ("llmgw.wire.lease", "Lease"))
RenewalAnswer = _named(("llmgw.wire.renewal", "RenewalAnswer"), ("llmgw.wire.lease", "LeaseAnswer"))
UNUSED = "stop_unused_after" if "stop_unused_after" in Scaling.model_fields else "idle_timeout"
TOKEN = "renewal_token" if "renewal_token" in DesiredState.model_fields else "lease"

GiB = 2**30
SEED = 7
BEAT = 3.0  # seconds between heartbeats, and between passes
ROUTER = "worker-1"  # the router process whose reports the scenario sends


def spec(name: str, gpus: int, lo: int, hi: int, **kw: Any) -> ModelSpec:
    nodes, cls, sleep = kw.pop("nodes", 1), kw.pop("cls", "H100-80G"), kw.pop("sleep", None)
    if "unused" in kw:
        kw[UNUSED] = kw.pop("unused")
    return ModelSpec(name=name, source=f"/models/{name}", engine="sim", sleep=sleep,
                     profile=Profile(gpus_per_shard=gpus, nodes=nodes, gpu_class=cls),
                     scaling=Scaling(min=lo, max=hi, **kw))


CATALOG = [
    spec("chat", 4, 1, 2, unused=600.0, target_in_flight=2.0, scale_up_after=6.0, scale_down_after=30.0),
    spec("coder", 4, 0, 1, unused=90.0, cls="L40S"),
    spec("sleepy", 2, 0, 1, unused=45.0, sleep=SleepConfig(level=1, min_stay=20.0)),
    spec("batch", 4, 0, 1, unused=60.0, cls="L40S"),  # fits only where an idle replica is evicted for it
    spec("big", 8, 1, 1, nodes=2),  # two whole nodes of one fabric
    spec("huge", 16, 1, 1),  # more GPUs than any node has: never placed, explained once
]


def config() -> ServerConfig:
    return ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=CATALOG, node_lost_after=30.0,
                        failed_kept_for=60.0, drain_timeout=20.0,
                        eviction=EvictionConfig(idle_after=30.0, protect_after_ready=60.0))


def report(node_id: str, n: int, host: int, fabric: str | None, cls: str = "H100-80G") -> NodeReport:
    gpus = [GPU(index=i, name=cls, gpu_class=cls, memory_mib=81559,
                nvlink_peers=[j for j in range(n) if j != i]) for i in range(n)]
    hardware = Hardware(mem_total_bytes=512 * GiB, gpus=gpus)
    return NodeReport(node_id=node_id, address=f"10.0.0.{host}", hardware=hardware, engines_probed=True,
                      engines=[EngineStatus(name="sim", version="1", runs=True)],
                      fabrics=[Fabric(name=fabric, adapters=["mlx5_0"], rate_gbps=400.0)] if fabric else [],
                      weights=[m.source for m in CATALOG])


class Agent:
    """A node as its agent behaves: a whole report when it changed (or a renewal is refused), else a lease
    renewal; shards converge one step a beat (starting, then ready or running, asleep while told to sleep)."""

    def __init__(self, base: NodeReport) -> None:
        self.base = base
        self.id = base.node_id
        self.shards: dict[tuple[str, int], ShardState] = {}
        self.failing: set[str] = set()  # replicas whose shards here report failed
        self.silent = False
        self._sent: NodeReport | None = None
        self._lease = self._etag = ""
        self._desired: dict[str, Any] | None = None  # the last desired state recorded (its lease and etag apart)
        self._specs: dict[tuple[str, int], tuple[int, bool]] = {}  # shard -> (sleep level, serves HTTP)

    def beat(self, plane: ControlPlane, rec: Recording) -> None:
        now = self.base.model_copy(update={"shards": list(self.shards.values())})  # in the order first desired
        if self._lease and now == self._sent:
            renewal = Renewal.model_validate({"node_id": self.id, "lease": self._lease, "etag": self._etag})
            got = plane.heartbeats.renew(renewal, "", None)
            if not got.why:  # renewed: a desired state when it changed, else "unchanged"
                self._converge(RenewalAnswer.model_validate_json(got.answer).desired, "renewal", rec)
                return
            rec.add("renewal refused", {"node": self.id, "why": got.why})
        desired = plane.heartbeats.heartbeat(now)
        self._sent, self._lease = now, getattr(desired, TOKEN)
        self._converge(desired, "report", rec)

    def _converge(self, desired: DesiredState | None, via: str, rec: Recording) -> None:
        if desired is not None:
            self._etag = desired.etag
            shown = desired.model_dump(exclude={TOKEN, "etag"})
            if shown != self._desired:
                self._desired = shown
                rec.add("answer", {"node": self.id, "via": via, "desired": shown})
            self._specs = {(s.replica_id, s.rank): (s.sleep, s.serve_port is not None) for s in desired.shards}
        for key in [k for k in self.shards if k not in self._specs]:
            del self.shards[key]  # no longer desired: stopped
        for key, (sleep, serves) in self._specs.items():
            self.shards[key] = self._step(key, self.shards.get(key), sleep, serves)

    def _step(self, key: tuple[str, int], s: ShardState | None, sleep: int, serves: bool) -> ShardState:
        rid, rank = key
        if rid in self.failing:
            return ShardState(replica_id=rid, rank=rank, state="failed", message="CUDA error: an illegal memory "
                              "access was encountered", exit_code=1)
        if s is None:
            return ShardState(replica_id=rid, rank=rank, state="starting")
        up = "ready" if serves else "running"
        if sleep:
            return s.model_copy(update={"state": "sleeping" if s.state in ("ready", "sleeping") else up})
        return s.model_copy(update={"state": up})


class Scenario:
    def __init__(self, root: Path, rec: Recording) -> None:
        self.rec = rec
        self.clock = FakeClock()
        self.in_flight: dict[str, int] = {}  # the router's requests in flight, by replica
        self.store = SqliteStore(root / "s.db").open()
        self.plane = ControlPlane(config(), cast(Store, RecordingStore(self.store, rec)), self.clock)
        rec.names.exact.append(self.plane.leadership.holder)  # host, process and a random suffix
        self.agents = [Agent(report(f"n{i}", 8, i, "ib-a")) for i in range(1, 5)]
        self.agents.append(Agent(report("n5", 4, 5, None, "L40S")))  # the only node of its class

    def at(self, step: str) -> None:
        self.rec.step = step

    def ticks(self, n: int) -> None:
        """n beats: the clock moves, every node that is not silent is heard, then the leader's pass."""
        for _ in range(n):
            self.clock.advance(BEAT)
            for a in self.agents:
                if not a.silent:
                    a.beat(self.plane, self.rec)
            self.router()  # a router reports every beat: its requests in flight count only while it is heard
            self.one_pass()

    def one_pass(self) -> None:
        passes = self.plane.passes
        kicked = passes.take_kick()
        intents = passes.reconcile_once()
        # chargeback's owner (named the accountant before its words were made one)
        owner = "chargeback" if hasattr(self.plane, "chargeback") else "accountant"
        getattr(self.plane, owner).sample_now()
        demand = sorted(self.plane.activity.demand)  # models asked for: only the catalog's count
        self.rec.add("pass", {"at": self.clock.now(), "kicked": kicked, "demand": demand, "intents": intents})

    def replicas(self, model: str) -> list[str]:
        """The model's ready replicas, oldest first."""
        reps = [r for r in self.plane.registry.replicas.values() if r.model == model and r.ready and r.stop is None]
        return [r.id for r in sorted(reps, key=lambda r: (r.created_at, r.id))]

    def router(self, **kw: Any) -> None:
        self.plane.activity.record_activity(Report(reporter=ROUTER, outstanding=self.in_flight, **kw))

    def agent(self, node_id: str) -> Agent:
        return next(a for a in self.agents if a.id == node_id)

    def node_of(self, replica_id: str) -> str:
        return self.plane.registry.replicas[replica_id].assignments[0].node_id


def run(s: Scenario) -> None:
    now: Callable[[], float] = s.clock.now
    s.at("start")
    s.plane.load()
    s.one_pass()
    s.ticks(6)
    s.at("demand")  # a request for an on-demand model, and a router's report that names one the catalog has not
    s.plane.activity.want("coder")
    s.router(demand={"coder": now(), "ghost": now()})
    s.ticks(5)
    s.at("use")
    coder = s.replicas("coder")
    s.in_flight = {r: 1 for r in coder}
    s.router(used={r: now() for r in coder})
    s.ticks(2)
    s.in_flight = {}
    s.router(used={r: now() for r in coder})
    s.at("load")  # requests in flight above the target: a second replica; then none: back to one
    chat = s.replicas("chat")
    s.in_flight = {r: 6 for r in chat}
    s.router(used={r: now() for r in chat})
    s.ticks(6)
    s.in_flight = {s.replicas("chat")[-1]: 1}  # one request left on the newest: stopped, it drains first
    s.router(used={r: now() for r in s.replicas("chat")})
    s.ticks(14)
    s.in_flight = {}
    s.ticks(4)
    s.at("sleep")  # demand for a model that sleeps when idle: placed, ready, idle, asleep; demand again: woken
    s.plane.activity.want("sleepy")
    s.ticks(27)
    s.plane.activity.want("sleepy")
    s.ticks(4)
    s.at("shard fails")
    victim = s.replicas("chat")[0]
    s.agent(s.node_of(victim)).failing.add(victim)
    s.ticks(6)
    s.at("node lost")  # silent past node_lost_after: lost, its replicas failed and replaced, room made by eviction
    lost = s.agent(s.node_of(s.replicas("big")[0]))
    lost.silent = True
    s.plane.activity.want("coder")
    s.ticks(4)
    s.router(used={r: now() for r in s.replicas("coder")})
    s.ticks(9)
    s.at("evict")  # a load that fits nowhere: an idle on-demand replica is stopped to make room for it
    s.plane.activity.want("batch")
    s.ticks(16)
    s.at("node back")
    lost.silent = False
    s.ticks(4)
    s.at("stall")  # no pass for a while: node silence counts from the next
    s.clock.advance(20.0)
    s.ticks(3)
    s.at("partition")  # every node silent at once: the control plane's network is the likelier fault, none lost
    for a in s.agents:
        a.silent = True
    s.ticks(12)
    for a in s.agents:
        a.silent = False
    s.ticks(3)
    s.at("idle")  # no demand, no use: on-demand replicas stop (or sleep), failed ones are reaped
    s.ticks(40)
    s.at("revoked")
    asyncio.run(s.plane.revoke("n3", "", "decommissioned"))
    s.agent("n3").silent = True
    s.ticks(8)


def record(seed: int = SEED) -> Recording:
    rec = Recording()
    with tempfile.TemporaryDirectory() as d, seeded_secrets(seed, rec.names):
        s = Scenario(Path(d), rec)
        run(s)
        s.store.close()
    return rec


def table(rec: Recording) -> list[str]:
    counts = rec.counts()
    lines = [f"{'entries':<18}{'count':>7}  digest (sha256, first 16)"]
    for kind in sorted(counts):
        lines.append(f"{kind:<18}{counts[kind]:>7}  {rec.digest(kind)[:16]}")
    lines.append(f"{'recording digest':<18}{len(rec.entries):>7}  {rec.digest()}")
    return lines


def intents_seen(rec: Recording) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in rec.entries:
        if e["kind"] == "pass":
            for i in e["value"]["intents"]:
                out[i["type"]] = out.get(i["type"], 0) + 1
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="write the whole recording here, a JSON line an entry")
    ap.add_argument("--smoke", action="store_true", help="record twice; fail unless the two are the same")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the plane's warnings are in the recording, as its events
    rec = record()
    for line in table(rec):
        print(line)
    print("intents:", ", ".join(f"{k} {n}" for k, n in sorted(intents_seen(rec).items())))
    print("store reads:", ", ".join(f"{k} {n}" for k, n in sorted(rec.reads.items())))
    if args.out is not None:
        args.out.write_text("\n".join(rec.lines()) + "\n")
    if args.smoke and record().lines() != rec.lines():
        print("two recordings of the same tree differ: something in the run is not held to the seed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
