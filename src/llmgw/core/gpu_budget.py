"""Budgets in GPU-seconds or money (KeyLimits gpu_budget, cost_budget): what a request reserves of them, what it is
settled at, and the decision to admit it. Pure: the figures are handed in; control/tenants/gpu_budgets.py keeps them.

A request reserves an upper bound of its GPU time: the GPUs of one of its model's replicas times its token
reservation over the model's measured tokens per second (a low percentile of recent requests; DEFAULT_TOKENS_PER_S
with none measured). It is settled at its GPUs times how long it was admitted, an upper bound of its busy share,
which counts until chargeback's charges for that time land (docs/tenants.md, "Budgets in GPU-seconds or
money").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmgw.core.limits import AdmissionDecision, KeyLimits, LimitRefusal, duration, period_end

# tokens per second of one request where its model has none measured: slower than any GPU engine serves one
# request (prompt tokens, counted with the rest, go far faster), so the bound errs high
DEFAULT_TOKENS_PER_S = 10.0
SPEED_PERCENTILE = 0.1  # the measured speed used: this low a share of recent requests were slower
MIN_TOKENS_PER_S = 0.01  # a measured speed is never taken below this (a bound of years helps nobody)


@dataclass(frozen=True)
class Size:
    """What one replica of a model holds: its GPUs (a CPU engine counts as one device) and the price of one of
    its GPU-hours (the dearest of its GPU classes)."""

    gpus: int
    rate: float  # per GPU-hour, in chargeback.currency


@dataclass(frozen=True)
class GpuUse:
    """GPU-seconds and money together: spent, held or asked."""

    gpu_s: float = 0.0
    cost: float = 0.0

    def __add__(self, o: GpuUse) -> GpuUse:
        return GpuUse(self.gpu_s + o.gpu_s, self.cost + o.cost)


def speed(rates: Sequence[float]) -> float:
    """The tokens per second one request of a model is taken to run at: the SPEED_PERCENTILE-th of the recent
    requests' (completion tokens over duration), DEFAULT_TOKENS_PER_S with none measured."""
    if not rates:
        return DEFAULT_TOKENS_PER_S
    ordered = sorted(rates)
    return max(MIN_TOKENS_PER_S, ordered[int(len(ordered) * SPEED_PERCENTILE)])


def of_seconds(size: Size, seconds: float) -> GpuUse:
    """The GPU time and money of holding one replica's GPUs for `seconds`."""
    gpu_s = max(1, size.gpus) * max(0.0, seconds)
    return GpuUse(gpu_s, gpu_s * size.rate / 3600.0)


def bound(tokens: int, size: Size, tokens_per_s: float) -> GpuUse:
    """The most a request reserving `tokens` is taken to cost: the time its tokens take at `tokens_per_s`, on all
    of one replica's GPUs."""
    return of_seconds(size, max(0, tokens) / max(MIN_TOKENS_PER_S, tokens_per_s))


def check(lim: KeyLimits, spent: GpuUse, held: GpuUse, ask: GpuUse, now: float, currency: str) -> AdmissionDecision:
    """Admitted (nothing taken: the caller holds `ask`) or refused with insufficient_quota and the figures, when
    what the key spent in its budget's period, what its requests in flight hold and what this one asks would pass
    its gpu_budget or cost_budget."""
    end = period_end(lim.budget_period, now)
    when = f"; it renews in {duration(end - now)}" if end is not None else ""
    for limit, used, asked, unit, name in (
        (lim.gpu_budget, spent.gpu_s + held.gpu_s, ask.gpu_s, "GPU-seconds", "GPU budget"),
        (lim.cost_budget, spent.cost + held.cost, ask.cost, currency, "cost budget"),
    ):
        if limit is not None and used + asked > limit:
            return AdmissionDecision(False, LimitRefusal.Quota,
                                     f"{name} spent: {figure(used)} of {limit:g} {unit} this "
                                     f"{lim.budget_period} are charged or held by requests in flight, "
                                     f"{figure(max(0.0, limit - used))} left, and this request may cost up to "
                                     f"{figure(asked)}{when}")
    return AdmissionDecision(True)


def figure(x: float) -> str:
    """A refusal's figure: two decimals, or two significant digits below 0.1 (a request's money is often a fraction
    of a cent, which two decimals would show as 0.00)."""
    if not 0 < x < 0.1:
        return f"{x:.2f}"
    shown = f"{x:.{min(9, 1 - math.floor(math.log10(x)))}f}".rstrip("0")
    return shown if len(shown) > 4 else f"{x:.2f}"  # 0.010 as 0.01
