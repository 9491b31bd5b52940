"""What one server's keys hold and settled, as it tells the others (shared(), whole milli-GPU-seconds and millionths
of money) and as each other server counts it against the key's budgets while it is fresh (heard(), unlanded(),
forget_silent()). control/tenants/gpu_budgets.py on its own: every request holds 2 GPUs priced 3.6 an hour."""

from __future__ import annotations

import calendar

import pytest

from llmgw.control.tenants.gpu_budgets import GpuBudgets
from llmgw.core.clock import FakeClock
from llmgw.core.gpu_budget import GpuUse, Size

NOON = float(calendar.timegm((2026, 12, 15, 12, 0, 0)))


def budgets() -> GpuBudgets:
    return GpuBudgets(FakeClock(NOON), "USD", lambda model: Size(2, 3.6))


def figures(use: GpuUse) -> tuple[float, float]:
    return use.gpu_s, use.cost


def test_a_server_shares_what_each_key_holds_and_settled_and_another_counts_it() -> None:
    a = budgets()
    a.hold("k", GpuUse(3.0, 0.003))
    a.settled("k", "m", 1.5, NOON)  # 3 GPU-s, 0.003
    a.hold("only-held", GpuUse(1.0, 0.001))
    a.settled("only-settled", "m", 0.25, NOON)
    assert a.shared() == {("kgpu", "k"): 6000, ("kcst", "k"): 6000, ("kgpu", "only-held"): 1000,
                          ("kcst", "only-held"): 1000, ("kgpu", "only-settled"): 500, ("kcst", "only-settled"): 500}
    b = budgets()
    for (kind, key_id), n in a.shared().items():
        b.heard("a", kind, key_id, NOON, n)
    assert figures(b.unlanded("k", NOON)) == pytest.approx((6.0, 0.006))
    assert figures(b.unlanded("only-settled", NOON)) == pytest.approx((0.5, 0.0005))
    b.hold("k", GpuUse(1.0, 0.001))  # its own requests in flight count beside the others'
    assert figures(b.unlanded("k", NOON)) == pytest.approx((7.0, 0.007))
    assert figures(b.unlanded("nobody", NOON)) == (0.0, 0.0)


def test_a_servers_new_figure_replaces_its_last_and_servers_add_up() -> None:
    b = budgets()
    b.heard("a", "kgpu", "k", NOON, 6000)
    b.heard("a", "kcst", "k", NOON, 6000)
    b.heard("a", "kgpu", "k", NOON + 1, 2000)  # a's requests settled and their charges landed
    b.heard("c", "kgpu", "k", NOON + 1, 500)
    b.heard("c", "kcst", "k", NOON + 1, 500)
    assert figures(b.unlanded("k", NOON + 1)) == pytest.approx((2.5, 0.0065))


def test_one_kind_heard_alone_leaves_the_other_at_nothing() -> None:
    b = budgets()
    b.heard("a", "kcst", "money-only", NOON, 5000)
    b.heard("a", "kgpu", "gpu-only", NOON, 5000)
    assert figures(b.unlanded("money-only", NOON)) == pytest.approx((0.0, 0.005))
    assert figures(b.unlanded("gpu-only", NOON)) == pytest.approx((5.0, 0.0))


def test_another_servers_figures_count_for_thirty_seconds_until_told_otherwise() -> None:
    b = budgets()
    b.heard("a", "kgpu", "k", NOON - 30, 1000)
    assert figures(b.unlanded("k", NOON)) == pytest.approx((1.0, 0.0))
    assert figures(b.unlanded("k", NOON + 0.5)) == (0.0, 0.0)


def test_servers_silent_longer_than_fresh_are_forgotten_and_stay_forgotten() -> None:
    b = budgets()
    b.heard("old", "kgpu", "k", NOON - 6, 1000)
    b.heard("new", "kgpu", "k", NOON - 5, 2000)
    b.heard("old", "kgpu", "only-old", NOON - 6, 1000)
    b.forget_silent(NOON, 5.0)
    assert figures(b.unlanded("k", NOON)) == pytest.approx((2.0, 0.0))
    assert figures(b.unlanded("only-old", NOON)) == (0.0, 0.0)
    b.forget_silent(NOON, 60.0)  # a wider window does not bring back what was forgotten
    assert figures(b.unlanded("k", NOON)) == pytest.approx((2.0, 0.0))
    assert figures(b.unlanded("only-old", NOON)) == (0.0, 0.0)
