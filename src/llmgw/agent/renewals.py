"""Each heartbeat: renew the lease (wire/lease.py) or send the report whole, and what the answer leaves held.

A renewal only while the report is unchanged (its digest), the lease came from the control plane the node talks to
now, and its report went whole less than REPORT_REFRESH_S ago. Anything else sends it whole: a changed shard state
reaches the control plane at once, as before leases. A renewal refused (SEND_REPORT, 404) or unanswered sends the
report whole in the same step, to that control plane or, failing over, the next.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Protocol

from llmgw.agent.client import SendReport
from llmgw.core.clock import Clock
from llmgw.core.errors import ControlPlaneUnreachable
from llmgw.wire.lease import REPORT_REFRESH_S, Lease, LeaseAnswer, loads_of, report_digest
from llmgw.wire.messages import DesiredState, NodeReport

log = logging.getLogger(__name__)


class Plane(Protocol):
    """What of the control plane client the reporter uses (agent/client.py)."""

    @property
    def url(self) -> str: ...

    async def heartbeat(self, report: NodeReport) -> DesiredState: ...

    async def renew(self, lease: Lease) -> LeaseAnswer | SendReport: ...


@dataclass(frozen=True)
class Held:
    """What the answer to the last whole report left: its lease at `url`, the report's digest, when it went (the
    clock's monotonic seconds), and the desired state last answered."""

    url: str
    token: str
    digest: str
    sent_at: float
    desired: DesiredState


def renewal(held: Held | None, report: NodeReport, url: str, now: float,
            refresh_s: float = REPORT_REFRESH_S) -> Lease | None:
    """The renewal to send instead of `report`, or None: send the report whole."""
    if held is None or not held.token or held.url != url:
        return None
    if not 0 <= now - held.sent_at < refresh_s:
        return None
    if report_digest(report) != held.digest:
        return None
    return Lease(node_id=report.node_id, lease=held.token, etag=held.desired.etag, loads=loads_of(report))


class Reporter:
    """Sends each step's report (renewed or whole) and keeps what the answers leave held. `renewals` and `whole`
    count what it sent, for the agent's log and tests."""

    def __init__(self, clock: Clock, refresh_s: float = REPORT_REFRESH_S) -> None:
        self.clock = clock
        self.refresh_s = refresh_s
        self.held: Held | None = None
        self.renewals = 0
        self.whole = 0

    async def send(self, plane: Plane, report: NodeReport) -> DesiredState:
        """The desired state to converge to after this step's report."""
        held, self.held = self.held, None  # dropped unless an answer gives it back
        lease = None if held is None else renewal(held, report, plane.url, self.clock.monotonic(), self.refresh_s)
        if held is not None and lease is not None:
            try:
                answer = await plane.renew(lease)
            except ControlPlaneUnreachable as e:
                log.info("lease renewal not answered (%s): sending the whole report", e)
            else:  # any other refusal (UpstreamError) goes up, with the lease dropped: the next step sends whole
                if isinstance(answer, LeaseAnswer):
                    self.renewals += 1
                    desired = answer.desired or held.desired
                    self.held = replace(held, token=desired.lease or held.token, desired=desired)
                    return desired
                log.info("control plane %s wants the whole report: %s", plane.url, answer.words)
        return await self._whole(plane, report)

    async def _whole(self, plane: Plane, report: NodeReport) -> DesiredState:
        desired = await plane.heartbeat(report)
        self.whole += 1
        if desired.lease:  # no token: a control plane that takes no leases, sent every report whole
            self.held = Held(url=plane.url, token=desired.lease, digest=report_digest(report),
                             sent_at=self.clock.monotonic(), desired=desired)
        return desired

