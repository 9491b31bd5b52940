"""Loopback ports for the servers a bench or a test starts on this machine, each handed out once per process, and a
cluster planned on them. The tests use these too (tests/harness.py): a bench's smoke run is part of the suite, so
both draw from one range and honour the same narrowing."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path
from typing import Any

from llmgw.dev.cluster import ClusterPlan, NodePlan, prepare


# Listening ports for tests and benches come from 10000-19999: below the kernel's ephemeral range (32768-60999
# here), where an outgoing connection can take a port between the moment a test learns it is free and the moment a
# server binds it (CI saw exactly that: "address already in use" for a port asked of the kernel with bind(0)), and
# below the 20000-29999 the tests' simulated nodes hand to their engines. Each port is handed out once per run.
# LLMGW_TEST_PORTS=LO-HI narrows the range: two suites running side by side (CI runs the vLLM stage beside
# `make test`) each take their own part of it, so neither hands out a port the other has just found free.
def _port_range() -> range:
    lo, _, hi = os.environ.get("LLMGW_TEST_PORTS", "10000-17999").partition("-")
    return range(int(lo), int(hi) + 1)


_PORTS = _port_range()
_handed: set[int] = set()
_rng = random.Random(os.getpid())


def free_port() -> int:
    """A loopback TCP port nothing listens on and no earlier call of this run returned."""
    for _ in range(len(_PORTS)):
        port = _rng.choice(_PORTS)
        if port in _handed:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed.add(port)
        return port
    raise RuntimeError(f"no free port left in {_PORTS.start}-{_PORTS.stop - 1}")


def plan(tmp: Path, nodes: list[NodePlan], models: list[dict[str, Any]], **kw: Any) -> ClusterPlan:
    """A cluster in `tmp` whose control plane listens on free ports, its files written (CA, certificates, host
    roots, configs)."""
    p = ClusterPlan(
        workdir=tmp,
        nodes=nodes,
        models=models,
        agent_port=free_port(),
        api_port=free_port(),
        admin_port=free_port(),
        **kw,
    )
    prepare(p)
    return p
