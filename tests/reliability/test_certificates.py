"""Check 9: certificates against a real control plane: another CA's, an expired one, one not valid yet, a node's
certificate used to write another node's record, and a client certificate offered to the API listener as if it
were a key. Each is refused, and nothing it said is kept."""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
from bench.addresses import engine_ports, loopback
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from llmgw.core.clock import FakeClock
from llmgw.dev.cluster import Cluster, NodePlan, admin_get, admin_up
from llmgw.pki.ca import init_ca, issue
from llmgw.pki.tls import client_context
from tests.clusters import node
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs

HOST_A = loopback()  # the address this module's tests name (bench/addresses.py)

DAY = 86400.0


def status_of(req: urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


async def heartbeat(p: Any, cert: Path, key: Path, ca: Path, node_id: str) -> str:
    """What became of one heartbeat as node_id, presenting cert: the HTTP status, or how the connection failed."""
    report = node(node_id, engines=("sim",), address=HOST_A).report.model_dump(mode="json")
    url = f"https://127.0.0.1:{p.agent_port}/v1/agent/heartbeat"
    try:
        async with aiohttp.ClientSession() as s, s.post(
                url, data=json.dumps(report), ssl=client_context(cert, key, ca),
                headers={"Content-Type": "application/json"}, timeout=aiohttp.ClientTimeout(total=10)) as r:
            return str(r.status)
    except (aiohttp.ClientError, ssl.SSLError, ConnectionError) as e:
        return f"refused: {type(e).__name__}"


async def test_bad_certificates_are_refused_and_change_nothing(tmp_path: Path, running: list[Cluster]) -> None:
    p = plan(tmp_path, [NodePlan(id="n1", address=loopback(), gpus=1, port_range=engine_ports())], [],
             heartbeat_interval="0.5s", reconcile_interval="0.2s")
    c = Cluster(p)
    running.append(c)
    c.start()
    pki = p.workdir / "pki"
    try:
        wait_until(lambda: admin_up(p), 20, "control plane up")
        wait_until(lambda: [n for n in admin_get(p, "/api/nodes") if n["node"] == "n1"], 20, "n1 registered")
        n1_before = admin_get(p, "/api/nodes/n1")["report"]
        now = dt.datetime.now(dt.UTC).timestamp()
        other = tmp_path / "other-ca"
        init_ca(other)
        ip = [HOST_A]  # the address the heartbeats name for their engines
        issue(other, "rogue1", ips=ip)  # a certificate as good as any, from a CA nobody trusts
        issue(pki, "old1", ips=ip, days=1, clock=FakeClock(start=now - 10 * DAY))  # expired nine days ago
        issue(pki, "new1", ips=ip, days=90, clock=FakeClock(start=now + 10 * DAY))  # valid ten days from now
        issue(pki, "n2", ips=ip)  # a good node certificate, used below to write n1's record
        issue(pki, "ok1", ips=ip)  # the control: issued like the refused ones, valid now, speaking for itself
        cases = {
            "the control": (pki / "ok1.crt", pki / "ok1.key", "ok1"),
            "another CA's": (other / "rogue1.crt", other / "rogue1.key", "rogue1"),
            "expired": (pki / "old1.crt", pki / "old1.key", "old1"),
            "not yet valid": (pki / "new1.crt", pki / "new1.key", "new1"),
            "n2's, writing n1": (pki / "n2.crt", pki / "n2.key", "n1"),
        }
        said = {what: await heartbeat(p, crt, key, pki / "ca.crt", as_node) for what, (crt, key, as_node) in
                cases.items()}
        assert said["the control"] == "200" and said["n2's, writing n1"] == "403", said
        for what in ("another CA's", "expired", "not yet valid"):
            assert said[what].startswith("refused") or said[what] in ("401", "403"), said
        nodes = {n["node"] for n in admin_get(p, "/api/nodes")}
        assert nodes == {"n1", "ok1"}, nodes  # none of the refused registered
        assert admin_get(p, "/api/nodes/n1")["report"]["address"] == n1_before["address"]

        # a client certificate is no API key: as a bearer token (its DER, base64) and as TLS on the plain listener
        der = x509.load_pem_x509_certificate((pki / "n1.crt").read_bytes()).public_bytes(Encoding.DER)
        as_key = urllib.request.Request(p.api + "/v1/models",
                                        headers={"Authorization": f"Bearer {base64.b64encode(der).decode()}"})
        assert status_of(as_key) == 401
        tls = client_context(pki / "n1.crt", pki / "n1.key", pki / "ca.crt")
        tls.check_hostname = False
        answered = None
        try:
            async with aiohttp.ClientSession() as s, s.get(
                    f"https://127.0.0.1:{p.api_port}/v1/models", ssl=tls,
                    timeout=aiohttp.ClientTimeout(total=10)) as r:
                answered = r.status
        except (aiohttp.ClientError, ssl.SSLError, ConnectionError):
            pass  # not a TLS listener: no handshake, nothing served
        assert answered is None, f"the API listener answered TLS with {answered}"
        assert status_of(urllib.request.Request(p.api + "/v1/models")) == 401  # and it still answers
        print(said)
    except BaseException:
        print(dump_logs(p))
        raise
    finally:
        c.stop()
