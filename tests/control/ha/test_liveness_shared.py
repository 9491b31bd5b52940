"""Node liveness among servers on one PostgreSQL database: renewals heard by one server keep the node alive at
every server, with no node record written for them; a node silent at every server is lost as before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from llmgw.config.server import StoreConfig
from llmgw.control.plane import ControlPlane
from llmgw.control.storage.writer import StoreWriter
from llmgw.core.clock import FakeClock
from llmgw.store.postgres import PostgresStore
from llmgw.store.sqlite import SqliteStore
from tests.clusters import node
from tests.control.ha.conftest import LEASE, config
from tests.harness import wait_until
from tests.pg import PASSWORD

LOST_AFTER = 20.0
BEAT = 3  # seconds between a node's renewals (the default heartbeat interval)
AT_A = ("n2", "n3", "n4")
AT_B = ("n1", "n5")

Two = tuple[ControlPlane, ControlPlane, FakeClock]


@pytest.fixture
async def two(dsn: str, tmp_path: Path) -> AsyncIterator[Two]:
    """a leads, b follows; n1 and n5 report to b, n2..n4 to a (five nodes: one silent is no silent majority)."""
    cfg = config(dsn, tmp_path).model_copy(update={"node_lost_after": LOST_AFTER})
    clock = FakeClock()
    a, b = (ControlPlane(cfg, PostgresStore(dsn, PASSWORD).open(), clock) for _ in range(2))
    for p in (a, b):
        p.load()
    assert a.leadership.leading and not b.leadership.leading
    clock.advance(1)
    for n in AT_B:
        b.heartbeats.heartbeat(node(n).report)
    for n in AT_A:
        a.heartbeats.heartbeat(node(n).report)
    await passes(a, b)
    await passes(a, b)
    assert set(a.registry.nodes) == set(b.registry.nodes) == {*AT_B, *AT_A}
    yield a, b, clock
    for p in (a, b):
        p.store.close()


async def passes(*planes: ControlPlane) -> None:
    """One pass at each server, as its reconcile loop runs it: the store followed, then reconcile."""
    for p in planes:
        await p.following.follow_store()
        p.passes.reconcile_once()


async def run(a: ControlPlane, b: ControlPlane, clock: FakeClock, seconds: int, at_b: tuple[str, ...] = AT_B,
              at_a: tuple[str, ...] = AT_A) -> None:
    """`seconds` of a pass a second at each server; the nodes renew every BEAT seconds, each with its server."""
    for t in range(seconds):
        clock.advance(1)
        if t % BEAT == 0:
            for p, ids in ((a, at_a), (b, at_b)):
                for n in ids:
                    p.registry.renewed(n, clock.now())
        await passes(a, b)


async def test_a_node_renewing_only_with_a_follower_is_not_lost_at_the_leader(two: Two) -> None:
    a, b, clock = two
    await run(a, b, clock, int(3 * LOST_AFTER))
    assert not a.registry.nodes["n1"].lost, (
        f"n1 sent b a renewal every {BEAT}s, yet the leader declared it lost: it last heard of it "
        f"{clock.now() - a.registry.heard('n1'):.0f}s ago")
    assert not b.registry.nodes["n1"].lost


async def test_a_node_silent_at_every_server_is_lost_after_node_lost_after(two: Two) -> None:
    a, b, clock = two
    await run(a, b, clock, 10)
    clock.advance(0.5)
    b.heartbeats.heartbeat(node("n1").report)  # n1's last word: a report, unchanged (no record written)
    last = b.registry.heard_here["n1"]
    clock.advance(0.0007)  # the passes after it, off its millisecond
    silent = 0
    while not a.registry.nodes["n1"].lost:  # n1 renews nowhere any more; the others go on
        assert clock.now() - last <= LOST_AFTER + 1, "n1 was silent past node_lost_after and not lost"
        await run(a, b, clock, 1, at_b=("n5",))
        silent += 1
        assert silent < 100
    assert clock.now() - last > LOST_AFTER, f"n1 was declared lost after {clock.now() - last:.0f}s of silence"
    await passes(b)
    assert b.registry.nodes["n1"].lost, "the follower does not show the node the leader declared lost"
    assert not any(a.registry.nodes[n].lost for n in ("n5", *AT_A))


async def test_renewals_write_no_node_rows_and_one_renewals_row_per_server(two: Two) -> None:
    a, b, clock = two
    before = a.store.revs()["nodes"]
    await run(a, b, clock, int(2 * LOST_AFTER))
    assert a.store.revs()["nodes"] == before, "unchanged renewals wrote node records"
    rows = a.store.renewals(0.0)
    assert sorted(r[0] for r in rows) == sorted([a.leadership.holder, b.leadership.holder])
    by = {r[0]: r[2].keys() for r in rows}
    assert by[b.leadership.holder] == set(AT_B) and by[a.leadership.holder] == set(AT_A)


async def test_two_servers_agree_on_when_a_node_was_last_heard_within_a_pass(two: Two) -> None:
    a, b, clock = two
    await run(a, b, clock, 7)
    clock.advance(0.25)
    b.registry.renewed("n1", clock.now())
    a.registry.renewed("n2", clock.now() - 0.125)
    await passes(a, b)  # a, then b: b has a's row
    await passes(a)  # a's next pass has b's
    for n in (*AT_B, *AT_A):
        assert abs(a.registry.heard(n) - b.registry.heard(n)) < 0.002, (
            f"{n}: the leader last heard it at {a.registry.heard(n):.3f}, the follower at {b.registry.heard(n):.3f}")
    assert abs(a.registry.heard("n1") - clock.now()) < 0.002


async def test_after_a_takeover_the_new_leader_keeps_nodes_renewing_with_the_old_one_alive(two: Two) -> None:
    """The old leader, paused past its lease, follows once it wakes; a node renewing with it stays alive at the new
    leader."""
    a, b, clock = two
    clock.advance(LEASE + 1)
    await b.following.hold_lease()
    await a.following.hold_lease()
    assert b.leadership.leading and not a.leadership.leading
    await run(a, b, clock, int(3 * LOST_AFTER), at_a=("n2",), at_b=("n1", "n3", "n4", "n5"))
    lost = sorted(n for n, r in b.registry.nodes.items() if r.lost)
    assert lost == [], f"the new leader declared {lost} lost, though they renewed with the old one"


async def test_alone_on_sqlite_a_server_writes_no_renewals(tmp_path: Path) -> None:
    cfg = config("host=x", tmp_path).model_copy(update={"store": StoreConfig(path=str(tmp_path / "s.db"))})
    clock = FakeClock()
    p = ControlPlane(cfg, SqliteStore(tmp_path / "s.db").open(), clock)
    p.load()
    p.heartbeats.heartbeat(node("n1").report)
    for _ in range(5):
        clock.advance(1)
        p.registry.renewed("n1", clock.now())
        await passes(p)
    assert p.store.renewals(0.0) == []
    p.store.close()


async def test_a_slow_store_queues_one_renewals_write_not_one_per_pass(dsn: str, tmp_path: Path) -> None:
    """While the renewals table is locked (a slow store), passes go on: the writer holds one renewals write, which
    writes the newest row once the table is free."""
    clock = FakeClock()
    writer = StoreWriter(clock)
    p = ControlPlane(config(dsn, tmp_path), PostgresStore(dsn, PASSWORD).open(), clock, writer=writer)
    p.load()
    p.heartbeats.heartbeat(node("n1").report)
    await passes(p)
    wait_until(lambda: writer.pending() == 0, 10, "the first writes done")
    with psycopg.connect(dsn, password=PASSWORD) as other, other.transaction():
        other.execute("LOCK TABLE renewals IN EXCLUSIVE MODE")  # reads go on; writes wait
        for _ in range(30):
            clock.advance(1)
            p.registry.renewed("n1", clock.now())
            await passes(p)
        queued = writer.pending()
    assert queued <= 1, f"{queued} writes queued behind a locked renewals table after 30 passes"
    wait_until(lambda: [r[2].get("n1", 0) >= clock.now() for r in p.store.renewals(0.0)] == [True], 10,
               "the newest row written once the table is free")
    writer.close()
    p.store.close()


async def test_a_node_renewing_with_a_follower_whose_clock_is_behind_is_not_lost(dsn: str, tmp_path: Path) -> None:
    """The follower's clock is 12 s behind the leader's (less than node_lost_after): its rows, timed by it, are
    still read, and a node renewing only with it stays alive at the leader."""
    cfg = config(dsn, tmp_path).model_copy(update={"node_lost_after": LOST_AFTER})
    ca, cb = FakeClock(), FakeClock(FakeClock().now() - 12)
    a, b = (ControlPlane(cfg, PostgresStore(dsn, PASSWORD).open(), c) for c in (ca, cb))
    for p in (a, b):
        p.load()
    b.heartbeats.heartbeat(node("n1").report)
    for n in AT_A:
        a.heartbeats.heartbeat(node(n).report)
    for t in range(int(3 * LOST_AFTER)):
        for c in (ca, cb):
            c.advance(1)
        if t % BEAT == 0:
            b.registry.renewed("n1", cb.now())
            for n in AT_A:
                a.registry.renewed(n, ca.now())
        await passes(a, b)
    assert a.leadership.leading and "n1" in a.registry.nodes
    assert not a.registry.nodes["n1"].lost, (
        f"n1 renewed with b every {BEAT}s, yet the leader declared it lost: by its clock it last heard of it "
        f"{ca.now() - a.registry.heard('n1'):.0f}s ago")
    for p in (a, b):
        p.store.close()


async def test_a_node_lost_at_the_leader_as_it_came_back_to_a_follower_is_not_lost_for_good(two: Two) -> None:
    """n1 falls silent long enough for the leader to declare it lost, and reports to the follower (unchanged, so no
    record is written for it) before the follower reads the loss. The follower heard it after the leader's record
    says, so it keeps its own record; that record must reach the leader, or n1 renews with the follower for ever
    while the leader holds it lost."""
    a, b, clock = two
    await run(a, b, clock, 10)
    for _ in range(int(3 * LOST_AFTER)):
        clock.advance(1)
        for p, ids in ((a, AT_A), (b, ("n5",))):
            for n in ids:
                p.registry.renewed(n, clock.now())
        await passes(a)
        if a.registry.nodes["n1"].lost:
            break
        await passes(b)
    assert a.registry.nodes["n1"].lost
    b.heartbeats.heartbeat(node("n1").report)  # back, before b read the loss
    await run(a, b, clock, int(2 * LOST_AFTER))
    assert not b.registry.nodes["n1"].lost
    assert not a.registry.nodes["n1"].lost, "n1 renews with the follower, yet the leader holds it lost for good"


async def test_a_takeover_does_not_say_a_node_long_lost_was_heard_at_the_takeover(two: Two) -> None:
    """The new leader counts silence from its takeover (resumed_at), but when each node was last heard, as views
    show it and lost records say it, stays what it was: a node lost long ago does not look heard just now."""
    a, b, clock = two
    await run(a, b, clock, 10)
    while not a.registry.nodes["n1"].lost:
        await run(a, b, clock, 1, at_b=("n5",))
    last = a.registry.heard("n1")
    clock.advance(LEASE + 1)
    await b.following.hold_lease()
    assert b.leadership.leading
    assert b.registry.heard("n1") <= last + 1, (
        f"n1, lost since {clock.now() - last:.0f}s, is shown heard {clock.now() - b.registry.heard('n1'):.0f}s ago")


async def test_a_follower_writes_its_nodes_records_while_the_leader_writes_no_renewals(dsn: str,
                                                                                       tmp_path: Path) -> None:
    """A leader of a release before renewals (here: one that never follows the store, so writes no renewals row)
    counts silence from records: the follower writes the records of the nodes it hears, each pass, and stops once
    the leader writes its row (upgraded)."""
    cfg = config(dsn, tmp_path).model_copy(update={"node_lost_after": LOST_AFTER})
    clock = FakeClock()
    a, b = (ControlPlane(cfg, PostgresStore(dsn, PASSWORD).open(), clock) for _ in range(2))
    for p in (a, b):
        p.load()
    b.heartbeats.heartbeat(node("n1").report)
    revs: list[int] = []
    for t in range(12):
        clock.advance(1)
        b.registry.renewed("n1", clock.now())
        for p in (a, b):
            await p.following.hold_lease()
        if t >= 6:
            await a.following.follow_store()  # upgraded: a writes its row from now on
        a.passes.reconcile_once()
        await passes(b)
        revs.append(a.store.revs()["nodes"])
    assert revs[2] < revs[3] < revs[4] < revs[5], f"no record written for the old leader: revisions {revs}"
    assert revs[-4] == revs[-1], f"records still written for a leader that reads renewals: revisions {revs}"
    said = [e.message for e in a.store.list_events() if "older release" in e.message]
    assert len(said) == 1, said
    for p in (a, b):
        p.store.close()
