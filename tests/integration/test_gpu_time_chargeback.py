"""Chargeback on a real cluster of sim engines with known speeds: two keys on one model are charged GPU-seconds in
proportion to the tokens they asked for; an on-demand model's load is charged to the key that asked for it and
its idle time to the keys it served; a sleeper's residencies are their users' and its time asleep nobody's; every
party's GPU-seconds add up to the GPUs times the replicas' lifetimes as the test itself saw them."""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post
from llmgw.records.chargeback import OPERATOR, ChargeRow
from llmgw.store.sqlite import SqliteStore
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs, start_cluster

TPS = 20.0  # the sim's tokens per second: a request of n tokens is in flight n / TPS seconds
# a window is charged once every request in it has ended and its usage landed: the longest here is 2 s, the
# usage flush 1 s
CHARGEBACK = {"window": "1s", "settle_after": "4s", "rates": {"H100": 3.6}}


def sim_model(name: str, gpus: int, min_: int, idle: str = "10m", load: str = "0s") -> dict[str, Any]:
    return {"name": name, "source": f"org/{name}", "engine": "sim",
            "profile": {"gpus_per_shard": gpus, "gpu_class": "H100-80G",
                        "sim": {"tokens": 200, "tokens_per_second": TPS, "load_seconds": load}},
            "scaling": {"min": min_, "max": 1, "stop_unused_after": idle}}


def cluster(tmp_path: Path, running: list[Cluster], address: str, ports: str, *models: dict[str, Any],
            chargeback: dict[str, Any] | None = None) -> ClusterPlan:
    p = plan(tmp_path, [NodePlan(id="node01", address=address, port_range=ports)], list(models),
             heartbeat_interval="0.3s", reconcile_interval="0.2s", load_wait="20s",
             extra_server={"chargeback": chargeback or CHARGEBACK})
    start_cluster(p, running)
    wait_until(lambda: admin_get(p, "/api/nodes"), 20, "node registered")
    return p


def chat(p: ClusterPlan, key: str, model: str, tokens: int) -> dict[str, Any]:
    body = json.dumps({"model": model, "max_tokens": tokens, "messages": [{"role": "user", "content": "hi"}]})
    req = urllib.request.Request(p.api + "/v1/chat/completions", data=body.encode(),
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        out: dict[str, Any] = json.loads(r.read())
    assert out["usage"]["completion_tokens"] == tokens, out
    return out


def charges_after(p: ClusterPlan, t: float) -> tuple[list[ChargeRow], float]:
    """The charges once every window up to `t` is charged (read through the store, as the reports are), and
    the mark they are charged to."""
    store = SqliteStore(p.workdir / "state" / "llmgw.db").open()
    try:
        wait_until(lambda: store.charge_mark() >= t, 30, f"GPU time charged past {t}")
        return store.charges_since(0), store.charge_mark()
    finally:
        store.close()


def per_key(rows: list[ChargeRow], model: str) -> dict[str, ChargeRow]:
    out: dict[str, ChargeRow] = {}
    for r in rows:
        if r.model == model:
            got = out.setdefault(r.key_id, ChargeRow(hour=r.hour, key_id=r.key_id, model=model, gpu_class=r.gpu_class))
            got.busy_s, got.load_s, got.idle_s = got.busy_s + r.busy_s, got.load_s + r.load_s, got.idle_s + r.idle_s
    return out


def replica_of(p: ClusterPlan, model: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        return next((r for r in admin_get(p, "/api/replicas") if r["model"] == model and r["ready_at"]), None)
    found: dict[str, Any] = wait_until(ready, 30, f"{model} ready")
    return found


def placed_at(rep: dict[str, Any]) -> float:
    """When the replica got its GPUs: its Scheduled condition turned true (it may have waited for room)."""
    at = next(c["last_transition"] for c in rep["conditions"] if c["type"] == "Scheduled" and c["status"] == "True")
    return max(float(at), float(rep["created_at"]))


def test_two_keys_on_one_model_are_charged_in_proportion_to_their_work(tmp_path: Path,
                                                                       running: list[Cluster]) -> None:
    p = cluster(tmp_path, running, loopback(), engine_ports(), sim_model("steady", gpus=2, min_=1))
    try:
        rep = replica_of(p, "steady")
        a, b = (admin_post(p, "/api/keys", {"name": n}) for n in ("a", "b"))
        for _ in range(2):  # one after the other: the sim does not slow down when requests share it
            chat(p, a["key"], "steady", 40)  # 2 s in flight
            chat(p, b["key"], "steady", 10)  # 0.5 s
        rows, mark = charges_after(p, time.time())
        keys = per_key(rows, "steady")
        ratio = keys[a["id"]].busy_s / keys[b["id"]].busy_s
        print(f"busy GPU-seconds a {keys[a['id']].busy_s:.3f} b {keys[b['id']].busy_s:.3f}: ratio {ratio:.3f}, "
              "work 4.0")
        # each request's time in flight is its tokens over TPS plus the router's and HTTP's own time (tens of
        # milliseconds here, more on a loaded machine), which weighs more on the shorter request: 15%
        assert 4.0 * 0.85 <= ratio <= 4.0 * 1.15, ratio
        assert keys[a["id"]].idle_s == keys[a["id"]].load_s == 0.0, "a min 1 model's idle and load are the operator's"
        # the replica was alive throughout: the parties' GPU-seconds are its 2 GPUs' time to the mark, exactly
        total = sum(r.gpu_s for r in keys.values())
        assert abs(total - 2 * (mark - placed_at(rep))) < 1e-6, (total, mark, placed_at(rep))
        assert abs(keys[OPERATOR].load_s - 2 * (rep["ready_at"] - placed_at(rep))) < 1e-6
    except BaseException:
        print(dump_logs(p))
        raise


def test_two_keys_sending_at_once_are_charged_by_the_tokens_they_processed(tmp_path: Path,
                                                                          running: list[Cluster]) -> None:
    """Sent together, 40 tokens and 10: the long request runs its last 1.5 s alone on the replica. Busy time is
    split by the work of the stretch, so the keys are charged as their tokens, not as their time in flight (which
    charged the long one the whole replica for its tail: a ratio near 7 here instead of the work's)."""
    # every round in one window (a window boundary cuts no stretch): three rounds of 2 s fit with room for a slow
    # machine, and the test waits for about one window in all (the start of one, then its end)
    window = 15.0
    p = cluster(tmp_path, running, loopback(), engine_ports(), sim_model("together", gpus=2, min_=1),
                chargeback={**CHARGEBACK, "window": f"{window:g}s"})
    try:
        replica_of(p, "together")
        a, b = (admin_post(p, "/api/keys", {"name": n}) for n in ("a", "b"))
        wait_until(lambda: time.time() % window < 1.0, window + 5, "the start of a window")
        first = int(time.time() // window)
        work = {a["id"]: 0, b["id"]: 0}
        for _ in range(3):
            with ThreadPoolExecutor(2) as pool:
                sent = [(k, pool.submit(chat, p, k["key"], "together", n)) for k, n in ((a, 40), (b, 10))]
                for k, f in sent:
                    usage = f.result()["usage"]
                    work[k["id"]] += usage["prompt_tokens"] + usage["completion_tokens"]
        assert int(time.time() // window) == first, "the rounds ran past their window (the layout above assumes not)"
        rows, _ = charges_after(p, time.time())
        keys = per_key(rows, "together")
        ratio, expected = keys[a["id"]].busy_s / keys[b["id"]].busy_s, work[a["id"]] / work[b["id"]]
        print(f"busy GPU-seconds a {keys[a['id']].busy_s:.3f} b {keys[b['id']].busy_s:.3f}: ratio {ratio:.3f}, "
              f"tokens {expected:.3f}")
        assert abs(ratio / expected - 1) < 0.02, (ratio, expected)
    except BaseException:
        print(dump_logs(p))
        raise


def test_an_on_demand_load_is_its_triggers_and_its_idle_time_its_users(tmp_path: Path,
                                                                         running: list[Cluster]) -> None:
    p = cluster(tmp_path, running, loopback(), engine_ports(), sim_model("od", gpus=4, min_=0, idle="3s",
                                                                            load="1s"))
    try:
        a, b = (admin_post(p, "/api/keys", {"name": n}) for n in ("a", "b"))
        chat(p, a["key"], "od", 10)  # asks for the model: waits for it to load
        rep = replica_of(p, "od")
        chat(p, b["key"], "od", 10)

        def gone() -> float | None:
            return None if any(r["id"] == rep["id"] for r in admin_get(p, "/api/replicas")) else time.time()

        ended = wait_until(gone, 30, "od stopped once idle for 3 s", interval=0.05)
        rows, _ = charges_after(p, ended + 1)
        keys = per_key(rows, "od")
        ka, kb = keys[a["id"]], keys[b["id"]]
        print({k or "operator": (round(r.busy_s, 3), round(r.load_s, 3), round(r.idle_s, 3)) for k, r in keys.items()})
        assert OPERATOR not in keys, "every second of an on-demand replica that served keys is theirs"
        assert abs(ka.load_s - 4 * (rep["ready_at"] - placed_at(rep))) < 1e-6, "the load is the asker's"
        assert kb.load_s == 0.0
        # idle split by what each served (their busy time is about equal), not left to the asker alone; which of
        # the two gets more turns on how the idle time before b's request falls into windows
        assert min(ka.idle_s, kb.idle_s) > 0.25 * (ka.idle_s + kb.idle_s), (ka.idle_s, kb.idle_s)
        held = 4 * (ended - placed_at(rep))
        total = sum(r.gpu_s for r in keys.values())
        print(f"charged {total:.3f} GPU-seconds; held {held:.3f} as seen from here")
        # the test sees the end within its 50 ms poll; the leader within a reconcile pass (0.2 s): 4 GPUs x 0.5 s
        assert abs(total - held) <= 4 * 0.5, (total, held)
    except BaseException:
        print(dump_logs(p))
        raise


def test_a_sleepers_time_asleep_is_charged_to_nobody_and_its_wake_to_the_waker(tmp_path: Path,
                                                                                running: list[Cluster]) -> None:
    m = sim_model("sleepy", gpus=4, min_=0, idle="2s", load="0.5s")
    m["profile"]["sim"]["wake_seconds"] = "0.5s"
    m["sleep"] = {"level": 1, "min_stay": "0s"}
    p = cluster(tmp_path, running, loopback(), engine_ports(), m)
    try:
        a, b = (admin_post(p, "/api/keys", {"name": n}) for n in ("a", "b"))

        def record(want: str) -> dict[str, Any] | None:
            """The replica's record once it is asleep, ready or woken and ready (ready_at: since its last wake)."""
            for r in admin_get(p, "/api/replicas"):
                if r["model"] == "sleepy" and r[want] and (want == "slept_at" or r["ready_at"]):
                    return dict(r)
            return None

        chat(p, a["key"], "sleepy", 10)  # loads it
        loaded: dict[str, Any] = wait_until(lambda: record("ready_at"), 30, "ready")
        first: dict[str, Any] = wait_until(lambda: record("slept_at"), 30, "asleep once idle", interval=0.05)
        chat(p, b["key"], "sleepy", 10)  # wakes it
        woken: dict[str, Any] = wait_until(lambda: record("woken_at"), 30, "woken and ready")
        second: dict[str, Any] = wait_until(lambda: record("slept_at"), 30, "asleep again", interval=0.05)
        rows, _ = charges_after(p, second["slept_at"] + 2)
        keys = per_key(rows, "sleepy")
        print({k or "operator": (round(r.busy_s, 3), round(r.load_s, 3), round(r.idle_s, 3)) for k, r in keys.items()})
        # the spans read the record times the test saw: what each residency held is its user's, exactly, and the
        # time between (asleep) nobody's
        ka, kb = keys[a["id"]], keys[b["id"]]
        assert set(keys) == {a["id"], b["id"]}, keys
        assert abs(ka.gpu_s - 4 * (first["slept_at"] - placed_at(loaded))) < 1e-6
        assert abs(ka.load_s - 4 * (loaded["ready_at"] - placed_at(loaded))) < 1e-6
        assert abs(kb.gpu_s - 4 * (second["slept_at"] - woken["woken_at"])) < 1e-6
        # the wake is the waker's load: from the wake to its request's start, which the router counts from the
        # moment a ready replica takes it, so no later than the replica was seen ready again (a pass, 0.2 s)
        assert 0 < kb.load_s <= 4 * (woken["ready_at"] - woken["woken_at"] + 0.3), kb.load_s
    except BaseException:
        print(dump_logs(p))
        raise
