"""Each heartbeat: a renewal (wire/renewal.py) or the report whole, and what the answer leaves held.

A renewal only while the report is unchanged (its digest), its token came from the control plane the node talks to
now, and its report went whole less than REPORT_REFRESH_S ago. Anything else sends it whole: a changed shard state
reaches the control plane at once, as before renewals. A renewal refused (SEND_REPORT, 404) or unanswered sends the
report whole in the same step, to that control plane or, failing over, the next.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, replace
from typing import Protocol

from llmgw.agent.client import SendReport
from llmgw.core.clock import Clock
from llmgw.core.errors import ControlPlaneUnreachable
from llmgw.wire.messages import DesiredState, NodeReport
from llmgw.wire.renewal import (
    REPORT_REFRESH_S,
    FreeSpace,
    Renewal,
    RenewalAnswer,
    free_space,
    free_space_moved,
    loads_of,
    report_shape,
)

log = logging.getLogger(__name__)


class Plane(Protocol):
    """What of the control plane client the reporter uses (agent/client.py)."""

    @property
    def url(self) -> str: ...

    async def heartbeat(self, report: NodeReport) -> DesiredState: ...

    async def renew(self, renewal: Renewal) -> RenewalAnswer | SendReport: ...


@dataclass(frozen=True)
class HeldRenewal:
    """What the answer to the last whole report left: its renewal token at `url`, the report's shape (wire/renewal.py
    report_shape) and free space, when it went (the clock's monotonic seconds), and the desired state last
    answered."""

    url: str
    token: str
    digest: str
    sent_at: float
    desired: DesiredState
    free: FreeSpace = ()

    @classmethod
    def of(cls, report: NodeReport, url: str, token: str, sent_at: float, desired: DesiredState) -> HeldRenewal:
        return cls(url=url, token=token, digest=report_shape(report), sent_at=sent_at, desired=desired,
                   free=free_space(report))


def renewal(held: HeldRenewal | None, report: NodeReport, url: str, now: float,
            refresh_s: float = REPORT_REFRESH_S) -> Renewal | str:
    """The renewal to send instead of `report`, or why the report goes whole."""
    if held is None or not held.token:
        return "no renewal token held"
    if held.url != url:
        return "the renewal token is another control plane's"
    if not 0 <= now - held.sent_at < refresh_s:
        return "refresh due"
    if report_shape(report) != held.digest:
        return "the report changed"
    if free_space_moved(held.free, free_space(report)):
        return "free memory or disk moved"
    return Renewal(node_id=report.node_id, token=held.token, etag=held.desired.etag, loads=loads_of(report))


class Reporter:
    """Sends each step's report (renewed or whole) and keeps what the answers leave held. `renewals` and `whole`
    count what it sent, and `why` each whole report went, for the agent's log and tests."""

    def __init__(self, clock: Clock, refresh_s: float = REPORT_REFRESH_S) -> None:
        self.clock = clock
        self.refresh_s = refresh_s
        self.held: HeldRenewal | None = None
        self.renewals = 0
        self.whole = 0
        self.why: Counter[str] = Counter()

    async def send(self, plane: Plane, report: NodeReport) -> DesiredState:
        """The desired state to converge to after this step's report."""
        held, self.held = self.held, None  # dropped unless an answer gives it back
        ask = ("no renewal token held" if held is None
               else renewal(held, report, plane.url, self.clock.monotonic(), self.refresh_s))
        if held is not None and isinstance(ask, Renewal):
            try:
                answer = await plane.renew(ask)
            except ControlPlaneUnreachable as e:
                log.info("renewal not answered (%s): sending the whole report", e)
                ask = "the renewal went unanswered"
            else:  # any other refusal (UpstreamError) goes up, with the token dropped: the next step sends whole
                if isinstance(answer, RenewalAnswer):
                    self.renewals += 1
                    desired = answer.desired or held.desired
                    self.held = replace(held, token=desired.renewal_token or held.token, desired=desired)
                    return desired
                log.info("control plane %s wants the whole report: %s", plane.url, answer.words)
                ask = "the control plane asked for it"
        return await self._whole(plane, report, ask if isinstance(ask, str) else "")

    async def _whole(self, plane: Plane, report: NodeReport, why: str) -> DesiredState:
        desired = await plane.heartbeat(report)
        self.whole += 1
        self.why[why] += 1
        log.debug("report sent whole: %s", why)
        if desired.renewal_token:  # none: a control plane that takes no renewals, sent every report whole
            self.held = HeldRenewal.of(report, plane.url, desired.renewal_token, self.clock.monotonic(), desired)
        return desired
