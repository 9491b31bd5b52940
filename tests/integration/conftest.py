from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.dev.cluster import Cluster, ClusterPlan


@pytest.fixture
def running() -> Iterator[list[Cluster]]:
    """Clusters a test started; every process they hold is stopped at the end, pass or fail."""
    started: list[Cluster] = []
    yield started
    for c in started:
        c.stop()


def dump_logs(p: ClusterPlan) -> str:
    out = []
    for f in sorted((Path(p.workdir) / "logs").glob("*.log")):
        out.append(f"==== {f.name}\n" + f.read_text(errors="replace")[-3000:])
    return "\n".join(out)


def start_cluster(p: ClusterPlan, running: list[Cluster]) -> Cluster:
    """Start the planned cluster's processes (stopped at the test's end by `running`) and wait for its control
    plane to answer."""
    from llmgw.dev.cluster import admin_up
    from tests.harness import wait_until

    c = Cluster(p)
    running.append(c)
    c.start()
    wait_until(lambda: admin_up(p), 20, "control plane up")
    return c
