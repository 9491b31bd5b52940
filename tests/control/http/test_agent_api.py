"""The agents' door over real mutual TLS: identity from the certificate, bad input refused, nothing lost."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from bench.addresses import loopback

from llmgw.dev.cluster import ClusterPlan, NodePlan
from llmgw.pki.ca import init_ca, issue
from llmgw.pki.tls import client_context
from llmgw.wire.messages import WIRE_VERSION, DesiredState, Hardware, NodeReport
from tests.harness import InProcessServer, aget, plan

HOST_A, HOST_B = loopback(), loopback()  # the addresses this module's tests name (bench/addresses.py)


@pytest.fixture
def cluster(tmp_path: Path) -> ClusterPlan:
    return plan(
        tmp_path, [NodePlan(id="node01", address=HOST_A), NodePlan(id="node02", address=HOST_B)], []
    )


def ctx(p: ClusterPlan, node: str) -> ssl.SSLContext:
    pki = p.workdir / "pki"
    return client_context(pki / f"{node}.crt", pki / f"{node}.key", pki / "ca.crt")


def report(node_id: str) -> NodeReport:
    return NodeReport(node_id=node_id, address=HOST_A, hardware=Hardware(mem_total_bytes=2**30))


async def post(p: ClusterPlan, sslctx: ssl.SSLContext, body: str) -> tuple[int, str]:
    url = f"https://127.0.0.1:{p.agent_port}/v1/agent/heartbeat"
    async with (
        aiohttp.ClientSession() as s,
        s.post(url, data=body, ssl=sslctx, headers={"Content-Type": "application/json"}) as r,
    ):
        return r.status, await r.text()


async def test_heartbeat_registers_the_certificates_node(cluster: ClusterPlan) -> None:
    async with InProcessServer(cluster):
        status, text = await post(cluster, ctx(cluster, "node01"), report("node01").model_dump_json())
        assert status == 200
        assert DesiredState.model_validate_json(text).node_id == "node01"
        rows = await aget(cluster, "/api/nodes")
        assert [r["node"] for r in rows] == ["node01"]


async def test_a_node_cannot_write_another_nodes_record(cluster: ClusterPlan) -> None:
    async with InProcessServer(cluster):
        status, text = await post(cluster, ctx(cluster, "node01"), report("node02").model_dump_json())
        assert status == 403
        assert "may not write node 'node02'" in text
        assert await aget(cluster, "/api/nodes") == []


async def test_malformed_heartbeat_is_422_naming_the_field_and_changes_nothing(cluster: ClusterPlan) -> None:
    async with InProcessServer(cluster):
        ok = report("node01")
        assert (await post(cluster, ctx(cluster, "node01"), ok.model_dump_json()))[0] == 200
        before = await aget(cluster, "/api/nodes")
        bad = ok.model_dump()
        bad["hardware"]["mem_total_bytes"] = "lots"
        del bad["address"]
        import json

        status, text = await post(cluster, ctx(cluster, "node01"), json.dumps(bad))
        assert status == 422
        assert "hardware.mem_total_bytes" in text and "address: field required" in text
        assert await aget(cluster, "/api/nodes") == before


async def test_certificate_from_another_ca_is_refused_at_the_handshake(cluster: ClusterPlan, tmp_path: Path) -> None:
    other = tmp_path / "other-ca"
    init_ca(other)
    issue(other, "node01")
    foreign = client_context(other / "node01.crt", other / "node01.key", cluster.workdir / "pki" / "ca.crt")
    async with InProcessServer(cluster):
        with pytest.raises((aiohttp.ClientConnectorError, aiohttp.ClientOSError, ssl.SSLError)):
            await post(cluster, foreign, report("node01").model_dump_json())
        assert await aget(cluster, "/api/nodes") == []


async def test_no_client_certificate_is_refused(cluster: ClusterPlan) -> None:
    bare = ssl.create_default_context(cafile=str(cluster.workdir / "pki" / "ca.crt"))
    async with InProcessServer(cluster):
        with pytest.raises((aiohttp.ClientConnectorError, aiohttp.ClientOSError, ssl.SSLError)):
            await post(cluster, bare, report("node01").model_dump_json())


def admin_call(p: ClusterPlan, method: str, path: str, body: object | None = None) -> tuple[int, object]:
    import json
    import urllib.error
    import urllib.request

    tf = p.workdir / "state" / "admin.token"
    headers = {"Content-Type": "application/json"}
    if tf.exists():
        headers["Authorization"] = f"Bearer {tf.read_text().strip()}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(p.admin + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def test_the_control_planes_own_certificate_is_not_a_node(cluster: ClusterPlan) -> None:
    async with InProcessServer(cluster):
        try:
            status, text = await post(cluster, ctx(cluster, "controlplane"), report("controlplane").model_dump_json())
        except (aiohttp.ClientConnectorError, aiohttp.ClientOSError, ssl.SSLError):
            status, text = 0, "refused at the handshake"
        assert status in (0, 403), text
        assert await aget(cluster, "/api/nodes") == []


async def test_a_revoked_node_is_refused_and_a_revoked_certificate_too_until_renewed(cluster: ClusterPlan) -> None:
    import asyncio

    from llmgw.pki.ca import renew

    pki = cluster.workdir / "pki"
    async with InProcessServer(cluster):
        n1 = report("node01")
        n2 = NodeReport(node_id="node02", address=HOST_B, hardware=Hardware(mem_total_bytes=2**30))
        assert (await post(cluster, ctx(cluster, "node01"), n1.model_dump_json()))[0] == 200
        assert (await post(cluster, ctx(cluster, "node02"), n2.model_dump_json()))[0] == 200
        old = ctx(cluster, "node02")

        # the whole node: every certificate of it is refused from the next heartbeat on, and it counts as lost
        status, _ = await asyncio.to_thread(admin_call, cluster, "POST", "/api/nodes/node01/revoke",
                                            {"reason": "decommissioned"})
        assert status == 200
        status, text = await post(cluster, ctx(cluster, "node01"), n1.model_dump_json())
        assert status == 403 and "node node01 is revoked: decommissioned" in text
        rows = {r["node"]: r for r in await aget(cluster, "/api/nodes")}
        assert rows["node01"]["state"] in ("lost", "revoked")

        # one certificate (a stolen copy has the same serial): refused; a renewed one is accepted
        rec = await aget(cluster, "/api/nodes/node02")
        spelled = ":".join(f"0{rec['cert_serial']}".upper()[i:i + 2] for i in range(0, len(rec["cert_serial"]) + 1, 2))
        status, _ = await asyncio.to_thread(admin_call, cluster, "POST", "/api/nodes/node02/revoke",
                                            {"serial": spelled, "reason": "key leaked"})  # as openssl prints it
        assert status == 200
        status, _ = await asyncio.to_thread(admin_call, cluster, "POST", "/api/nodes/node02/revoke",
                                            {"serial": "not hex"})
        assert status == 400
        status, text = await post(cluster, old, n2.model_dump_json())
        assert status == 403 and "is revoked: key leaked" in text
        renew(pki, "node02")
        assert (await post(cluster, ctx(cluster, "node02"), n2.model_dump_json()))[0] == 200

    # revocations outlive a restart of the control plane
    async with InProcessServer(cluster):
        assert (await post(cluster, ctx(cluster, "node01"), n1.model_dump_json()))[0] == 403
        assert (await post(cluster, old, n2.model_dump_json()))[0] == 403


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"warnings": ["w" * 100_000]}, "warnings"),
        ({"warnings": ["w"] * 10_000}, "warnings"),
        ({"port_low": 80, "port_high": 90}, "port_low"),
        ({"port_low": 30000, "port_high": 20000}, "port_low 30000 is above port_high 20000"),
        ({"address": "evil.example"}, "not an IP address"),
        ({"address": "::ffff:198.51.100.11%1]:999#"}, "zone"),  # a zone that would rewrite the endpoint URL
        ({"hardware": {"mem_total_bytes": 2**70}}, "mem_total_bytes"),
    ],
)
async def test_unbounded_or_impossible_claims_are_refused_and_change_nothing(
        cluster: ClusterPlan, change: dict[str, Any], words: str) -> None:
    import json

    async with InProcessServer(cluster):
        ok = report("node01")
        assert (await post(cluster, ctx(cluster, "node01"), ok.model_dump_json()))[0] == 200
        before = await aget(cluster, "/api/nodes")
        status, text = await post(cluster, ctx(cluster, "node01"), json.dumps({**ok.model_dump(), **change}))
        assert status == 422 and words in text, text
        assert len(text) < 20_000
        assert await aget(cluster, "/api/nodes") == before


async def test_a_node_heartbeating_in_a_loop_is_told_to_slow_down(cluster: ClusterPlan) -> None:
    async with InProcessServer(cluster):
        body = report("node01").model_dump_json()
        statuses = [(await post(cluster, ctx(cluster, "node01"), body))[0] for _ in range(40)]
        assert statuses[0] == 200 and 429 in statuses and statuses.count(200) <= 25


async def test_a_newer_agent_is_told_its_wire_version_not_an_unknown_key(cluster: ClusterPlan) -> None:
    import json

    newer = report("node01").model_dump(mode="json")
    newer["version"], newer["a_field_from_the_future"] = 99, {"x": 1}
    async with InProcessServer(cluster):
        status, text = await post(cluster, ctx(cluster, "node01"), json.dumps(newer))
        assert status == 422
        error = json.loads(text)["error"]
        speaks = f"(speaks 1-{WIRE_VERSION})"
        assert error.startswith(f"wire version 99 not understood by this control plane {speaks}"), error
        assert "unknown" not in error and "extra" not in error
        assert await aget(cluster, "/api/nodes") == []


async def test_a_version_1_agent_keeps_its_words(cluster: ClusterPlan) -> None:
    import json

    old = report("node01").model_dump(mode="json", exclude={"problems"})
    old["version"], old["fabric_problems"], old["warnings"] = 1, ["fabric ib-a: adapter mlx5_3 is not here"], []
    async with InProcessServer(cluster):
        status, text = await post(cluster, ctx(cluster, "node01"), json.dumps(old))
        assert status == 200, text
        (row,) = await aget(cluster, "/api/nodes")
        assert row["warnings"] == ["fabric ib-a: adapter mlx5_3 is not here"]


async def test_a_node_is_answered_in_its_own_wire_version(cluster: ClusterPlan) -> None:
    import json

    old = report("node01").model_dump(mode="json", exclude={"problems"})
    old["version"] = 1
    async with InProcessServer(cluster):
        status, text = await post(cluster, ctx(cluster, "node01"), json.dumps(old))
        assert status == 200 and json.loads(text)["version"] == 1
        status, text = await post(cluster, ctx(cluster, "node01"), report("node01").model_dump_json())
        assert status == 200 and json.loads(text)["version"] == WIRE_VERSION
        assert json.loads(text)["engine_sources"], "version 3 is told where engines come from"


async def test_a_version_2_agent_is_not_sent_fields_it_would_refuse(cluster: ClusterPlan) -> None:
    """A version 2 agent reads the desired state strictly: one unknown key and it refuses the whole answer."""
    import json

    v2 = report("node01").model_dump(mode="json")
    v2["version"] = 2
    async with InProcessServer(cluster):
        status, text = await post(cluster, ctx(cluster, "node01"), json.dumps(v2))
        assert status == 200, text
        desired = json.loads(text)
        assert desired["version"] == 2 and "engine_sources" not in desired
        assert set(desired) <= {"version", "node_id", "shards", "engines", "heartbeat_interval"}


def test_a_version_3_agent_is_not_sent_how_to_have_weights() -> None:
    """Version 3 knows shards without `weights`: sent one, it would refuse the whole desired state."""
    import json

    from llmgw.control.http.agent_api import answer_in
    from llmgw.wire.messages import DesiredState, ShardSpec, WeightsPlan

    shard = ShardSpec(replica_id="m-1", model="m", engine="sim", source="http://o/m.gguf", rank=0, world_size=1,
                      weights=WeightsPlan(sha256="ab" * 32, origin=False, wait_for="node02"))
    desired = DesiredState(node_id="node01", shards=[shard], revoked=["node09"])
    v3 = json.loads(answer_in(desired, 3))
    assert v3["version"] == 3 and "weights" not in v3["shards"][0] and "engine_sources" in v3
    assert "revoked" not in v3
    v4 = json.loads(answer_in(desired, 4))
    assert v4["shards"][0]["weights"]["wait_for"] == "node02"
    v2 = json.loads(answer_in(desired, 2))
    assert "engine_sources" not in v2 and "weights" not in v2["shards"][0]


def test_a_version_8_agent_is_sent_only_builds_it_can_install_in_words_it_reads() -> None:
    """Version 8 knows cpu- and cuda- builds with pinned digests: a Vulkan or CUDA-major build, a runtime companion,
    a release's digest list or a build's needs would make it refuse the whole desired state. Read here by the
    version 8 agent's own model (wire/engines.py as it was, kept in tests/fixtures/wire), strictly."""
    import json
    import sys
    import types
    from pathlib import Path

    from llmgw.config.engines import LLAMACPP_DEFAULT, VLLM_DEFAULT
    from llmgw.control.http.agent_api import answer_in
    from llmgw.wire.engines import EngineSource, EngineVariant
    from llmgw.wire.messages import DesiredState

    # src/llmgw/wire/engines.py at 7336495, the last release that spoke wire version 8
    old_text = (Path(__file__).resolve().parents[2] / "fixtures" / "wire" / "engines-v8.py.txt").read_text()
    old = types.ModuleType("wire_engines_v8")
    sys.modules[old.__name__] = old  # pydantic resolves the module's annotations through sys.modules
    try:
        exec(compile(old_text, "wire_engines_v8", "exec"), old.__dict__)
    finally:
        del sys.modules[old.__name__]
    pinned = EngineSource(name="llamacpp", version="b2", digests_url="https://api.example/releases/tags/b2", variants=[
        EngineVariant(variant="cpu-x86_64", url="https://r/cpu.tgz", sha256="a" * 64),
        EngineVariant(variant="cuda12-x86_64", url="https://r/c.tgz", cuda="12.8", glibc="2.39")])
    desired = DesiredState(node_id="node01", engine_sources=[LLAMACPP_DEFAULT, VLLM_DEFAULT, pinned])
    v8 = json.loads(answer_in(desired, 8))
    sources = [old.EngineSource.model_validate(s) for s in v8["engine_sources"]]
    kept = {s.name + " " + s.version: [v.variant for v in s.variants] for s in sources}
    assert kept == {"llamacpp b11026": [], "vllm 0.32.0": ["cuda-x86_64", "cuda-arm64", "cpu-x86_64"],
                    "llamacpp b2": ["cpu-x86_64"]}
    v9 = json.loads(answer_in(desired, 9))
    assert v9["engine_sources"][0]["digests_url"] and v9["engine_sources"][2]["variants"][1]["cuda"] == "12.8"
