"""The one allocator of what tests and benches bind or route: listening ports, loopback addresses, engine port ranges
and the subnets network namespaces are built on, and a cluster planned on them. Every test and bench takes these from
here and names none itself (tests/test_no_literal_addresses.py holds that), because the suite runs in several
pytest-xdist workers at once, benches' smoke runs among its tests: each worker gets a slice of every pool of its own
(a bench run by a test inherits its worker's), so two tests running side by side never hand out the same address,
port or subnet. It lives in bench/ because tests import benches, never the other way.

The pools can be narrowed by environment for suites that run beside each other (CI runs the vLLM stage beside
`make test`): LLMGW_TEST_PORTS=LO-HI (listening ports), LLMGW_TEST_ENGINE_PORTS=LO-HI (engines' port ranges),
LLMGW_TEST_LOOPBACK=A-B (127.A.0.0 to 127.B.255.255), LLMGW_TEST_SUBNETS=A-B (10.A.0.0/24 to 10.B.255.0/24).

Default pools stay clear of what is fixed elsewhere: the kernel's ephemeral ports (32768 and up, where an outgoing
connection can take a port between the moment a test finds it free and the moment a server binds it), `llmgw dev`'s
own addresses (127.0.0.x) and engine ports (21000-22099), and the vLLM stage's pools (Makefile's test-vllm)."""

from __future__ import annotations

import itertools
import os
import random
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmgw.dev.cluster import ClusterPlan, NodePlan, prepare

# (pool, default) per environment variable: `make test` takes the defaults, the vLLM stage its own
LISTEN_PORTS = ("LLMGW_TEST_PORTS", "10000-17999")
ENGINE_PORTS = ("LLMGW_TEST_ENGINE_PORTS", "23000-28999")
LOOPBACK = ("LLMGW_TEST_LOOPBACK", "16-63")
SUBNETS = ("LLMGW_TEST_SUBNETS", "200-239")
ENGINE_BLOCK = 100  # ports in one node's engine range: a node runs a shard or two in a test, each a port or two


def worker() -> tuple[int, int]:
    """This process's worker index and the number of workers (0 and 1 outside pytest-xdist)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return int(name.removeprefix("gw") or 0), max(1, count)


def pool(var: tuple[str, str]) -> range:
    """This worker's slice of a pool: the pool split into equal parts, one per worker."""
    lo_s, _, hi_s = os.environ.get(var[0], var[1]).partition("-")
    lo, hi = int(lo_s), int(hi_s)
    index, count = worker()
    size = (hi - lo + 1) // count
    if size < 1:
        raise RuntimeError(f"{var[0]}={lo}-{hi} is too small for {count} workers")
    return range(lo + index * size, lo + (index + 1) * size)


_listen = pool(LISTEN_PORTS)
_handed: set[int] = set()
_rng = random.Random(os.getpid())


def free_port() -> int:
    """A loopback TCP port of this worker's slice that nothing listens on and no earlier call returned (once every
    port was handed out, ports are handed again: a test long finished has let go of its own)."""
    if len(_handed) >= len(_listen):
        _handed.clear()
    for _ in range(4 * len(_listen)):
        port = _rng.choice(_listen)
        if port in _handed:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed.add(port)
        return port
    raise RuntimeError(f"no free port left in {_listen.start}-{_listen.stop - 1}")


def _cycle(r: range) -> itertools.cycle[int]:
    return itertools.cycle(r)


# Engine ranges, addresses and subnets are handed out in turn and come round again once the slice is used up:
# a worker runs one test at a time, and a test long finished holds none of them any more.
_engine_blocks = _cycle(range(pool(ENGINE_PORTS).start, pool(ENGINE_PORTS).stop - ENGINE_BLOCK + 1, ENGINE_BLOCK))
_second_octets = pool(LOOPBACK)
_loopback = _cycle(range(len(_second_octets) * 256 * 254))
_subnets = _cycle(range(len(pool(SUBNETS)) * 256))


def engine_ports(size: int = ENGINE_BLOCK) -> str:
    """A port range ("LO-HI", `size` ports at most) no other test of this run is using, for one node's engines."""
    lo = next(_engine_blocks)
    return f"{lo}-{lo + min(size, ENGINE_BLOCK) - 1}"


def engine_port_pair(size: int = ENGINE_BLOCK) -> tuple[int, int]:
    """engine_ports() as two numbers, for what takes the range so."""
    lo, _, hi = engine_ports(size).partition("-")
    return int(lo), int(hi)


def loopback() -> str:
    """A loopback address (127.A.B.C) no other test of this run is using: a node's, or a second client's."""
    k = next(_loopback)
    host = k % (256 * 254)
    return f"127.{_second_octets[k // (256 * 254)]}.{host // 254}.{host % 254 + 1}"


@dataclass(frozen=True)
class Subnet:
    """A /24 no other test of this run is using, for hosts made of network namespaces."""

    prefix: str  # "10.A.B"

    def at(self, host: int) -> str:
        return f"{self.prefix}.{host}"

    @property
    def gateway(self) -> str:
        """This host's side: where the namespaces reach the machine the test runs on."""
        return self.at(1)


def subnet() -> Subnet:
    k = next(_subnets)
    octets = pool(SUBNETS)
    return Subnet(f"10.{octets[k // 256]}.{k % 256}")


DEFAULT_ENGINE_PORTS = NodePlan.port_range


def plan(tmp: Path, nodes: list[NodePlan], models: list[dict[str, Any]], **kw: Any) -> ClusterPlan:
    """A cluster in `tmp` whose control plane listens on free ports, its files written (CA, certificates, host roots,
    configs). A node left on the agent's default engine range gets a range of its own: tests run side by side."""
    for n in nodes:
        if n.port_range == DEFAULT_ENGINE_PORTS:
            n.port_range = engine_ports()
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
