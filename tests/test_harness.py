"""The test harness's own promises, where a broken one shows as flaky failures elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import await_until, free_port, wait_until


def test_free_ports_are_outside_the_ephemeral_range_and_never_handed_out_twice() -> None:
    """The defect: free_port() asked the kernel (bind to port 0), which answers from the ephemeral range, the same
    range outgoing connections take their local ports from; in CI another test's connection took such a port
    before the control plane bound it ("address already in use", test_clock_jump)."""
    lo, hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports), "a port handed out twice"
    inside = [p for p in ports if lo <= p <= hi]
    assert inside == [], f"{len(inside)} of 200 ports in the ephemeral range {lo}-{hi}"
    assert all(20000 > p >= 10000 for p in ports), "a port in the simulated nodes' engine ranges (20000-29999)"


async def test_await_until_takes_a_plain_or_an_awaited_condition_and_returns_its_value() -> None:
    seen: list[int] = []

    def plain() -> list[int]:
        seen.append(1)
        return seen if len(seen) >= 3 else []

    async def awaited() -> str:
        return "ready"

    assert await await_until(plain, 5, "three looks", interval=0.001) == [1, 1, 1]
    assert await await_until(awaited, 5, "ready") == "ready"


async def test_await_until_fails_at_the_deadline_saying_what_it_awaited() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0\.05s waiting for the never"):
        await await_until(lambda: False, 0.05, "the never", interval=0.01)
    looks = [0]

    def cond() -> bool:
        looks[0] += 1
        return False

    with pytest.raises(AssertionError, match=r"waiting for a thing \(\d+ looks\)"):
        await await_until(cond, 0.05, lambda: f"a thing ({looks[0]} looks)", interval=0.01)


def test_wait_until_shows_the_conditions_last_error_at_the_deadline() -> None:
    def starting() -> bool:
        raise ConnectionRefusedError("not yet")

    with pytest.raises(AssertionError, match=r"waiting for the server \(last error: not yet\)"):
        wait_until(starting, 0.05, "the server", interval=0.01)
