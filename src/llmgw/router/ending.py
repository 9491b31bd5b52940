"""End: the last stage of every proxied request, however it ended (answered, refused, the client gone, the engine
failed or timed out, no replica reached). In order: what it used (from its answer, or what its stream showed),
its usage journaled, its admission settled, its statistics counted. The router calls it once per request, from
one place (app.py), so none of the three is counted twice or forgotten."""

from __future__ import annotations

from llmgw.core.clock import Clock
from llmgw.router.context import RequestContext
from llmgw.router.limits import bounded, used_of
from llmgw.router.proxy import CLIENT_CLOSED
from llmgw.router.state import LimitTickets
from llmgw.router.stats import Measure, Recorder
from llmgw.router.usage_journal import UsageJournal


class RequestEnd:
    def __init__(self, usage_journal: UsageJournal, limits: LimitTickets, recorder: Recorder, clock: Clock) -> None:
        self.usage_journal = usage_journal
        self.limits = limits
        self.recorder = recorder
        self.clock = clock

    def end(self, m: Measure, ctx: RequestContext | None, status: int) -> None:
        """`status`: the answer's (CLIENT_CLOSED for a client gone, 500 for an exception), which the statistics
        count where the request has no status of its own; `ctx`: None for a request refused before it was admitted
        (nothing journaled, nothing to settle). None of the steps raises: the journal keeps its own failures."""
        if ctx is not None:
            if ctx.rec is not None:  # forwarded: its record was begun before anything was sent
                self._usage(ctx)
            if ctx.ticket:
                self.limits.settle(ctx.ticket, used_of(m, ctx.reached, ctx.cost))
        if m.key_id:  # with recorder.begin (app.py): counted in flight only once begun
            self.recorder.end(m.key_id, m.model)
        self.recorder.finish(m, status, self.clock.monotonic())

    def _usage(self, ctx: RequestContext) -> None:
        """Every request that reached an engine is recorded once: a client that went away or an interrupted
        handler is CLIENT_CLOSED with what was seen. One that reached none (every replica refused its connection)
        records nothing."""
        rec, m, outcome, watch = ctx.rec, ctx.m, ctx.outcome, ctx.watch
        assert rec is not None
        if not ctx.reached:
            self.usage_journal.unsent(rec)
            return
        if outcome is not None:
            status, p_tok, c_tok = outcome.status, outcome.prompt_tokens, outcome.completion_tokens
        else:  # interrupted (the handler cancelled): what the stream showed so far
            status, (p_tok, c_tok) = CLIENT_CLOSED, (watch.so_far() if watch is not None else (0, 0))
        m.status, m.prompt_tokens, m.completion_tokens = status, p_tok, c_tok
        if watch is not None:
            m.first_at, m.last_at, m.overrun = watch.first_at, watch.last_at, watch.over
        replica = ctx.route.replica_id if ctx.route is not None else ""
        bounded(m, ctx.cost, replica)
        self.usage_journal.finish(rec, replica, m.prompt_tokens, m.completion_tokens,
                                  self.clock.monotonic() - ctx.t0, status)
