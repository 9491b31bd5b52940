"""Scaling on load: one pure decision per model and pass, with the timers it keeps passed in and out.

A model with `scaling.target_in_flight` set is scaled on the requests in flight per ready replica (summed over
every router process): above the target for `scale_up_after`, one replica more (up to `max`); below half of it for
`scale_down_after`, one fewer (never below `min`, never below one while on-demand requests arrive). One step at a
time: after a step, the next needs its full period again. Between half and the target nothing moves and both
timers rest (hysteresis: a load at the target does not flap).

`wanted()` is the one statement of how many replicas a model wants: the reconciler acts on it, and the summary
(ctl status, the dashboard, the metrics) shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from llmgw.config.server import ModelSpec


class Step(StrEnum):
    Hold = "Hold"
    Up = "LoadAboveTarget"
    Down = "LoadBelowHalfTarget"


@dataclass(frozen=True)
class Timer:
    above_since: float | None = None
    below_since: float | None = None


@dataclass(frozen=True)
class ScalingDecision:
    step: Step
    timer: Timer
    per_replica: float  # the load the decision read
    message: str = ""  # for the event: what was seen, for how long


def decide(*, target: float, up_after: float, down_after: float, lo: int, hi: int, ready: int, in_flight: float,
           timer: Timer, now: float) -> ScalingDecision:
    """`lo`: the fewest replicas allowed now (min, or one while on-demand requests arrive); `hi`: max."""
    if ready <= 0 or target <= 0:
        return ScalingDecision(Step.Hold, Timer(), 0.0)
    load = in_flight / ready
    if load > target:
        since = timer.above_since if timer.above_since is not None else now
        if now - since >= up_after and ready < hi:
            return ScalingDecision(Step.Up, Timer(above_since=now), load,
                            f"{load:.1f} requests in flight per replica, above {target:g} for {now - since:.0f}s")
        return ScalingDecision(Step.Hold, Timer(above_since=since), load)
    if load < target / 2:
        since = timer.below_since if timer.below_since is not None else now
        if now - since >= down_after and ready > lo:
            return ScalingDecision(Step.Down, Timer(below_since=now), load,
                            f"{load:.1f} requests in flight per replica, below {target / 2:g} for {now - since:.0f}s")
        return ScalingDecision(Step.Hold, Timer(below_since=since), load)
    return ScalingDecision(Step.Hold, Timer(), load)


def floor(spec: ModelSpec, *, active: int, demanded: bool) -> int:
    """The fewest replicas the catalog allows now: min, and at least one for an on-demand model while requests ask
    for it or a replica of it still runs; never above max."""
    want = spec.scaling.min
    if spec.on_demand:
        want = max(want, 1 if (demanded or active) else 0)
    return min(want, spec.scaling.max)


def wanted(spec: ModelSpec, *, active: int, ready: int, demanded: bool, step: Step = Step.Hold) -> int:
    """Replicas the model wants: its floor; scaling on load keeps what runs (a replica it added stays until it
    removes it), one more on a step up, one fewer on a step down. `active`: replicas neither failed nor stopping;
    `ready`: those of them that serve; `step`: this pass's decision (Hold when only showing the number)."""
    lo = floor(spec, active=active, demanded=demanded)
    hi = spec.scaling.max
    if spec.scaling.target_in_flight is None:
        return lo
    if step is Step.Up:
        return min(hi, max(lo, ready + 1))
    if step is Step.Down:
        return max(lo, active - 1)
    return min(hi, max(lo, active))
