"""A report written in wire version 10 is one the release of wire version 10 reads (it refuses any key it does not
know): ADDED names every field added since, so a control plane that has not been upgraded is never sent one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.agent.report_versions import OLDEST_WRITTEN, report_in
from llmgw.wire import messages as m
from tests.releases import env_for, unpack

pytestmark = pytest.mark.real  # runs the vendored release's code in a process of its own

READS = "import sys; from llmgw.wire.messages import NodeReport; NodeReport.model_validate_json(sys.stdin.read())"


def everything() -> m.NodeReport:
    """A report with every model it can hold present at least once (a field added to any of them is in its JSON)."""
    gpu = m.GPU(index=0, name="NVIDIA H100", gpu_class="H100-80G", memory_mib=81559, nvlink_peers=[1],
                mig=[m.MigInstance(gpu_instance=1, memory_mib=40000)])
    hw = m.Hardware(arch="x86_64", cpu=m.CPU(cores=8, avx2=True), mem_total_bytes=1 << 36, disk=m.Disk(
        path="/", total_bytes=1 << 40, free_bytes=1 << 39), gpus=[gpu],
        ib_adapters=[m.IBAdapter(name="mlx5_0", ports=[m.IBPort(port=1, state="ACTIVE", rate_gbps=400)])])
    return m.NodeReport(
        node_id="node01", address="127.0.0.1", hardware=hw, engines_probed=True,
        engines=[m.EngineStatus(name="sim", runs=True,
                                passed_over=[m.BuildPassedOver(variant="cuda12", reason="R", message="m")])],
        install_progress=["x"], installs=[m.InstallStatus(engine="vllm")],
        fabrics=[m.Fabric(name="ib-a", adapters=["mlx5_0"], rate_gbps=400)], weights=["org/m"],
        weights_dirs=[m.WeightsDir(path="/w", budget_bytes=1)],
        fetches=[m.FetchStatus(source="org/m", state="fetching")],
        shards=[m.ShardState(replica_id="r1", rank=0, state="ready", load=m.EngineLoad(running=1.0), lost_peer=1,
                            adapters=["m-a"])],
        problems=[m.Problem(code="C", message="m")],
    )


def old_reads(src: Path, body: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", READS], input=body, capture_output=True, text=True, timeout=60,
                          env=env_for(src))


def test_a_report_in_version_10_is_read_by_the_release_of_version_10(tmp_path: Path) -> None:
    src = unpack(tmp_path)
    read = old_reads(src, report_in(everything(), OLDEST_WRITTEN))
    assert read.returncode == 0, read.stderr[-3000:]


def test_the_release_of_version_10_refuses_what_it_does_not_know(tmp_path: Path) -> None:
    """The check above can fail: a key the old release does not know is refused, whatever its value."""
    body = report_in(everything(), OLDEST_WRITTEN)
    read = old_reads(unpack(tmp_path), body[:-1] + ',"added_later":0}')
    assert read.returncode != 0 and "added_later" in read.stderr


def test_a_sleeping_shard_is_said_in_words_a_release_before_12_reads(tmp_path: Path) -> None:
    """"sleeping" is a state of version 12: an older control plane would refuse the whole report for it. It reads
    "starting" (not serving, not failed) with the node's words kept."""
    report = everything()
    report.shards = [m.ShardState(replica_id="r1", rank=0, state="sleeping", message="asleep at level 1")]
    body = report_in(report, OLDEST_WRITTEN)
    read = old_reads(unpack(tmp_path), body)
    assert read.returncode == 0, read.stderr[-3000:]
    assert '"state":"starting"' in body and "asleep at level 1" in body
    assert '"state":"sleeping"' in report_in(report)
