"""The test harness's own promises, where a broken one shows as flaky failures elsewhere."""

from __future__ import annotations

from pathlib import Path

from tests.harness import free_port


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
