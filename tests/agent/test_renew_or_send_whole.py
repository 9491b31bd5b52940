"""Each heartbeat sends a renewal while the report is unchanged, and the report whole when it changed, when the
refresh is due, when no renewal token is held, and at once when a renewal is refused or unanswered (failing over as
reports do).
The agent's real client and reporter against control planes played on loopback by the test."""

from __future__ import annotations

import contextlib
import json
import logging
import ssl
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from llmgw.agent.client import HEARTBEAT_PATH, ControlPlaneClient
from llmgw.agent.renewals import HeldRenewal, Reporter, renewal
from llmgw.core.clock import FakeClock
from llmgw.core.errors import UpstreamError
from llmgw.wire.messages import WIRE_VERSION, DesiredState, EngineLoad, Hardware, NodeReport, ShardState
from llmgw.wire.renewal import MEMORY_STEPS, RENEWAL_PATH, REPORT_REFRESH_S, SEND_REPORT, Renewal, RenewalAnswer
from tests.harness import free_port, served

URL = "http://127.0.0.1:1"


def report(state: str = "ready", running: float = 0.0, mem_available: int = 0) -> NodeReport:
    shard = ShardState(replica_id="r1", rank=0, state=state,  # type: ignore[arg-type]
                       load=EngineLoad(running=running) if state == "ready" else None)
    return NodeReport(node_id="node01", address="127.0.0.1",
                      hardware=Hardware(mem_total_bytes=64 << 30, mem_available_bytes=mem_available), shards=[shard])


def held(r: NodeReport, token: str = "t1", url: str = URL, at: float = 0.0) -> HeldRenewal:
    return HeldRenewal.of(r, url, token, at, DesiredState(node_id="node01", renewal_token=token, etag="e1"))


def test_an_unchanged_report_is_renewed_with_the_desired_states_etag_and_the_gauges() -> None:
    sent = renewal(held(report()), report(running=7.0), URL, now=10.0)
    assert isinstance(sent, Renewal) and (sent.token, sent.etag) == ("t1", "e1")
    assert [s.load.running for s in sent.loads if s.load] == [7.0]  # gauges ride on the renewal, no change


@pytest.mark.parametrize(("case", "why"), [("shard state changed", "the report changed"),
                                           ("refresh due", "refresh due"), ("no token", "no renewal token held"),
                                           ("another control plane",
                                            "the renewal token is another control plane's"),
                                           ("nothing held", "no renewal token held")])
def test_the_report_goes_whole(case: str, why: str) -> None:
    h: HeldRenewal | None = held(report())
    r, url, now = report(), URL, 10.0
    if case == "shard state changed":
        r = report(state="exited")
    elif case == "refresh due":
        now = REPORT_REFRESH_S
    elif case == "no token":
        h = held(report(), token="")
    elif case == "another control plane":
        url = "http://127.0.0.1:2"
    else:
        h = None
    assert renewal(h, r, url, now) == why


STEP = (64 << 30) // MEMORY_STEPS  # the move of free memory that is a change of the report


def test_free_memory_jittering_across_a_step_boundary_is_no_change() -> None:
    """A node whose free memory sits at a multiple of the step and moves by a byte either way renews: the move is
    measured from what the last whole report said, not from fixed boundaries (a node at a boundary sent its report
    whole at every step, and a cluster-wide test saw a whole report where nothing had changed)."""
    at_boundary = 10 * STEP
    sent = renewal(held(report(mem_available=at_boundary - 1)), report(mem_available=at_boundary + 1), URL, 10.0)
    assert isinstance(sent, Renewal)


def test_free_memory_moved_by_a_step_from_the_last_whole_report_is_a_change() -> None:
    h = held(report(mem_available=10 * STEP + 5))
    assert isinstance(renewal(h, report(mem_available=11 * STEP + 4), URL, 10.0), Renewal)  # a byte short of a step
    assert renewal(h, report(mem_available=11 * STEP + 5), URL, 10.0) == "free memory or disk moved"
    assert renewal(h, report(mem_available=9 * STEP + 5), URL, 10.0) == "free memory or disk moved"


class Playing:
    """A control plane of the given wire version that hands out renewal tokens (`token`), played by the test: what it
    was sent, and what its renewals answer (`renewal_status`, `desired`)."""

    def __init__(self, token: str = "t1", speaks: int = 11) -> None:
        self.token = token
        self.speaks = speaks
        self.renewal_status = 200
        self.desired: DesiredState | None = None  # a renewal's answer: None = unchanged
        self.reports: list[dict[str, Any]] = []
        self.renewals: list[dict[str, Any]] = []
        self.refusals = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        if request.path == HEARTBEAT_PATH:
            if body["version"] > self.speaks:
                self.refusals += 1
                return web.json_response({"error": f"wire version {body['version']} not understood",
                                          "speaks": self.speaks}, status=422)
            self.reports.append(body)
            d = DesiredState(node_id="node01", version=self.speaks, renewal_token=self.token, etag="e1")
            return web.Response(text=d.model_dump_json(exclude={"renewal_token", "etag"} if self.speaks < 11 else None),
                                content_type="application/json")
        if request.path != RENEWAL_PATH or self.speaks < 11:
            return web.json_response({"error": "not found"}, status=404)
        self.renewals.append(body)
        if self.renewal_status == SEND_REPORT:
            return web.json_response({"error": "no such renewal token (this control plane restarted)", "report": True},
                                     status=SEND_REPORT)
        if self.renewal_status != 200:
            return web.json_response({"error": "refused"}, status=self.renewal_status)
        return web.Response(text=RenewalAnswer(desired=self.desired).model_dump_json(), content_type="application/json")


@contextlib.asynccontextmanager
async def talking(*planes: Playing | str, retry_newest_s: float = REPORT_REFRESH_S,
                  ) -> AsyncIterator[tuple[ControlPlaneClient, Reporter, FakeClock]]:
    """A client to the planes given (a string: a URL nothing answers at), its reporter, and the reporter's clock."""
    async with contextlib.AsyncExitStack() as stack:
        urls = [p if isinstance(p, str) else await stack.enter_async_context(served(p.handle)) for p in planes]
        client = ControlPlaneClient(urls, ssl.create_default_context, 3.0, retry_newest_s=retry_newest_s)
        stack.push_async_callback(client.close)
        clock = FakeClock()
        yield client, Reporter(clock), clock


async def test_renewals_until_the_report_changes_then_the_whole_report() -> None:
    plane = Playing()
    async with talking(plane) as (client, reporter, clock):
        for running in (1.0, 2.0, 3.0):  # only gauges move: renewals
            await reporter.send(client, report(running=running))
            clock.advance(1.0)
        assert (len(plane.reports), len(plane.renewals)) == (1, 2)
        assert plane.renewals[-1]["lease"] == "t1" and plane.renewals[-1]["loads"][0]["load"]["running"] == 3.0
        await reporter.send(client, report(state="exited"))  # the engine exited: at once, whole
        assert (len(plane.reports), len(plane.renewals)) == (2, 2)
        assert plane.reports[-1]["shards"][0]["state"] == "exited"
        clock.advance(REPORT_REFRESH_S)
        await reporter.send(client, report(state="exited"))  # the refresh: whole though unchanged
        assert (len(plane.reports), len(plane.renewals)) == (3, 2)


async def test_a_renewal_answered_with_a_new_desired_state_converges_to_it_and_names_its_etag() -> None:
    plane = Playing()
    async with talking(plane) as (client, reporter, _):
        await reporter.send(client, report())
        plane.desired = DesiredState(node_id="node01", renewal_token="t1", etag="e2", heartbeat_interval=1.5)
        assert (await reporter.send(client, report())).etag == "e2"
        plane.desired = None  # unchanged since e2: the agent goes on with the state it holds
        assert (await reporter.send(client, report())).heartbeat_interval == 1.5
        assert [le["etag"] for le in plane.renewals] == ["e1", "e2"]


@pytest.mark.parametrize("status", [SEND_REPORT, 404])
async def test_a_refused_renewal_sends_the_whole_report_in_the_same_step(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    plane = Playing()
    caplog.set_level(logging.INFO, logger="llmgw.agent.renewals")
    async with talking(plane) as (client, reporter, _):
        await reporter.send(client, report())
        plane.renewal_status, plane.token = status, "t2"
        await reporter.send(client, report())
        assert (len(plane.reports), len(plane.renewals)) == (2, 1)
        plane.renewal_status = 200
        await reporter.send(client, report())
        assert plane.renewals[-1]["lease"] == "t2"  # the new report's token
    said = [r.getMessage() for r in caplog.records if "wants the whole report" in r.getMessage()]
    assert len(said) == 1, said
    if status == SEND_REPORT:
        assert "this control plane restarted" in said[0]  # in the control plane's words


async def test_any_other_refusal_is_said_and_the_next_step_sends_whole() -> None:
    plane = Playing()
    async with talking(plane) as (client, reporter, _):
        await reporter.send(client, report())
        plane.renewal_status = 429
        with pytest.raises(UpstreamError, match="429"):
            await reporter.send(client, report())
        await reporter.send(client, report())
        assert (len(plane.reports), len(plane.renewals)) == (2, 1)


async def test_an_unanswered_renewal_fails_over_and_the_next_control_plane_takes_renewals() -> None:
    first, second = Playing(token="a"), Playing(token="b")
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(served(first.handle))
        async with talking(url, second) as (client, reporter, _):
            await reporter.send(client, report())
            await stack.aclose()  # the first control plane goes away
            await reporter.send(client, report())  # its renewal unanswered: whole, to the next one
            await reporter.send(client, report())
            assert (len(first.reports), len(second.reports), len(second.renewals)) == (1, 1, 1)
            assert second.renewals[0]["lease"] == "b" and client.current == 1


async def test_a_control_plane_without_renewals_gets_every_report_whole() -> None:
    plane = Playing(token="")
    async with talking(plane) as (client, reporter, _):
        for _ in range(3):
            await reporter.send(client, report())
        assert (len(plane.reports), len(plane.renewals)) == (3, 0)


async def test_an_older_control_plane_is_sent_its_own_version_and_remembered() -> None:
    plane = Playing(speaks=10)
    async with talking(plane) as (client, reporter, _):
        for _ in range(3):
            desired = await reporter.send(client, report())
        assert desired.version == 10 and not desired.renewal_token
        assert [r["version"] for r in plane.reports] == [10, 10, 10] and plane.refusals == 1
        assert plane.renewals == []


async def test_an_older_control_plane_is_asked_in_the_newest_version_again_in_time() -> None:
    """It may have been upgraded since: then its renewals are taken without restarting the agent."""
    plane = Playing(speaks=10)
    async with talking(plane, retry_newest_s=0.0) as (client, reporter, _):
        await reporter.send(client, report())
        plane.speaks = 11  # upgraded
        await reporter.send(client, report())
        await reporter.send(client, report())
        assert [r["version"] for r in plane.reports] == [10, 11] and len(plane.renewals) == 1


async def test_a_control_plane_older_than_10_is_refused_with_its_words() -> None:
    plane = Playing(speaks=9)
    async with talking(plane) as (client, reporter, _):
        with pytest.raises(UpstreamError, match=rf"422 .*wire version {WIRE_VERSION} not understood"):
            await reporter.send(client, report())
        assert plane.reports == []


async def test_no_control_plane_answering_is_still_an_error() -> None:
    async with talking(f"http://127.0.0.1:{free_port()}") as (client, reporter, _):
        with pytest.raises(UpstreamError):
            await reporter.send(client, report())
