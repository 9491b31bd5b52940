"""The release's digest list is read by the control plane once for the whole fleet: three GPU nodes install
llama.cpp from a release whose source names its digest list and no digest, and the stand-in release server sees
the list asked for once (by the control plane), never by a node. The list does not name the CUDA 13 archive: every
node passes that build over with DigestUnknown and the control plane's words, and takes the CUDA 12 one. Real
processes: a control plane, three agents on simulated hosts, a release server on loopback, the real llama-server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, NodePlan, admin_up
from tests.agent.installs.archives import llama_archive, sha256
from tests.agent.installs.release import Release, release_server
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs
from tests.integration.test_engine_install import ctl_json
from tests.integration.test_gpu_nodes_take_gpu_builds import VERSION

API = f"repos/ggml-org/llama.cpp/releases/tags/{VERSION}"
NODES = ("gpu1", "gpu2", "gpu3")
ARCHIVES = {"cuda13-x86_64": f"llama-{VERSION}-bin-ubuntu-cuda-13.3-x64.tar.gz",
            "cuda12-x86_64": f"llama-{VERSION}-bin-ubuntu-cuda-12.8-x64.tar.gz",
            "cpu-x86_64": f"llama-{VERSION}-bin-ubuntu-x64.tar.gz"}


def test_three_nodes_install_from_one_read_of_the_list_and_pass_over_what_it_does_not_name(
    tmp_path: Path, running: list[Cluster]
) -> None:
    data = llama_archive(VERSION)
    with release_server(Release()) as rel:
        variants = []
        for variant, name in ARCHIVES.items():
            rel.files[name] = data
            v: dict[str, Any] = {"variant": variant, "url": rel.url(name)}  # no sha256: the list gives it
            if variant.startswith("cuda"):
                v.update(cuda=name.split("-cuda-")[1].removesuffix("-x64.tar.gz"), glibc="2.39")
            variants.append(v)
        listed = [n for v, n in ARCHIVES.items() if v != "cuda13-x86_64"]  # the CUDA 13 archive is not listed
        rel.files[API] = json.dumps({"assets": [{"name": n, "digest": f"sha256:{sha256(data)}"} for n in listed]}
                                    ).encode()
        source = {"name": "llamacpp", "version": VERSION, "variants": variants, "digests_url": rel.url(API)}
        nodes = [NodePlan(id=n, address=loopback(), gpus=1, port_range=engine_ports(), driver="580.95.05",
                          cuda="13.0", glibc="2.39", agent_extra={"probe_engines": ["sim", "llamacpp"]})
                 for n in NODES]
        p = plan(tmp_path, nodes, [], heartbeat_interval="0.5s", reconcile_interval="0.3s",
                 extra_server={"engines": ["sim", source]})
        c = Cluster(p)
        running.append(c)
        c.start()
        try:
            wait_until(lambda: admin_up(p), 20, "control plane up")

            def installed() -> dict[str, dict[str, Any]] | None:
                rows = {r["node"]: r for r in ctl_json(p, "nodes")}
                found: dict[str, dict[str, Any]] = {
                    n: next((b for b in rows.get(n, {}).get("engine_builds", []) if b["name"] == "llamacpp"), {})
                    for n in NODES}
                return found if all(b.get("runs") for b in found.values()) else None

            builds = wait_until(installed, 120, "every node running the build it could verify")
            for n, b in builds.items():
                assert b["variant"] == "cuda12-x86_64", (n, b)
                [over] = b["passed_over"]
                assert (over["variant"], over["reason"]) == ("cuda13-x86_64", "DigestUnknown"), over
                assert over["message"] == (f"{ARCHIVES['cuda13-x86_64']} is not among the assets the digest list "
                                           f"at {rel.url(API)} names: its sha256 is unknown, so it is not installed")
            reads = [r for r in rel.ranges if r[0] == API]
            assert len(reads) == 1, f"the list was read {len(reads)} times: once by the control plane, by no node"
            assert [r for r in rel.ranges if r[0] == ARCHIVES["cuda12-x86_64"]], "the nodes downloaded their build"
        except BaseException:
            print(dump_logs(p))
            raise
