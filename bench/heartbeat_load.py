"""The load generator of bench.heartbeats: simulated nodes on raw asyncio TLS streams, lean enough that the server,
not the generator, is what a run measures.

Each node has its own client certificate and one kept-alive connection (opened again when closed, counted). Its
requests are pre-built HTTP/1.1 bytes; an answer is read as a status line, headers (Content-Length only) and a body.
A node sends its full report first; while the answer carried a renewal token it sends a renewal (with the etag it
got) instead, except for the share `changes` of its heartbeats, which carry a changed report (free memory across a
step: what a real node's digest sees), and every REPORT_REFRESH_S. A renewal answered 409 is followed at once by the
full report; one answered 404 (a control plane without renewals) turns the node to full reports for good, as does a
server that gives no token. A server that refuses the report's wire version (422 naming the one it speaks) gets it
in that one.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import random
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmgw.pki.tls import client_context
from llmgw.wire.messages import WIRE_VERSION
from llmgw.wire.renewal import RENEWAL_PATH, REPORT_REFRESH_S, SEND_REPORT

HEARTBEAT = "/v1/agent/heartbeat"
MEM_TOTAL = 2 * 2**40
MEM_MARK = 987654321987  # stands in the report's JSON for free memory, replaced by each node's current figure
MAX_ANSWER = 16 * 2**20  # an answer longer than this is an error, not something to buffer
WARMUP_INTERVALS = 2  # connected, registered, then steady: the headline figures start after these
TIMEOUT_S = 30.0


def report_template(i: int, node_id: str) -> str:
    """What a node with 8 H100s, two IB adapters and the sim engine reports (no shards: nothing placed), as JSON
    with MEM_MARK where its free memory goes and `"version":VERSION` where its wire version goes."""
    from llmgw.wire.messages import GPU, EngineStatus, Fabric, Hardware, NodeReport

    gpus = [GPU(index=g, name="NVIDIA H100 80GB HBM3", gpu_class="H100-80G", memory_mib=81559,
                nvlink_peers=[x for x in range(8) if x != g]) for g in range(8)]
    text = NodeReport(
        node_id=node_id, address=f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
        hardware=Hardware(mem_total_bytes=MEM_TOTAL, mem_available_bytes=MEM_MARK, gpus=gpus), engines_probed=True,
        engines=[EngineStatus(name="sim", version="1", runs=True)],
        fabrics=[Fabric(name=f"ib-{i // 500}", adapters=["mlx5_0", "mlx5_1"], rate_gbps=400.0)],
    ).model_dump_json()
    return text.replace(f'"version":{WIRE_VERSION},', '"version":VERSION,', 1)


def post(host: str, path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, whether the server will close the connection): what the bench needs of an HTTP/1.1 answer."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            raise ConnectionResetError("closed before an answer") from None
        raise
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length, close = 0, False
    for h in lines[1:]:
        name, _, value = h.partition(b":")
        key = name.strip().lower()
        if key == b"content-length":
            length = int(value)
        elif key == b"connection":
            close = value.strip().lower() == b"close"
        elif key == b"transfer-encoding":
            raise ValueError("a chunked answer (the bench reads Content-Length only)")
    if not 0 <= length <= MAX_ANSWER:
        raise ValueError(f"an answer of {length} bytes")
    return status, (await reader.readexactly(length) if length else b""), close


@dataclass
class Tally:
    """One generator process's record, sent back to the bench whole."""

    lat: list[float] = field(default_factory=list)  # seconds, heartbeats answered from the first window on
    when: list[float] = field(default_factory=list)  # seconds after the start each of those was due
    full: list[bool] = field(default_factory=list)  # whether each was a full report (else a renewal)
    late: list[float] = field(default_factory=list)  # how late each send of the measured window went out
    errors: dict[str, int] = field(default_factory=dict)
    reconnects: int = 0
    sent_back: int = 0  # renewals answered SEND_REPORT (a full report followed)
    sent: int = 0  # heartbeats sent, all of them (the generator's CPU is divided by this)
    cpu_s: float = 0.0  # from the first heartbeat to the last
    window_cpu_s: float = 0.0  # over the measured window

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


# TLS handshakes one generator process has under way at once. Real agents each handshake on a CPU of their own; here
# thousands share one core, and a handshake started and then starved past the server's cap on unfinished handshakes
# (net/handshakes.py) is closed by it and started again: unbounded, the generator's start-up never settles.
HANDSHAKES_AT_ONCE = 32
CONNECTING: contextvars.ContextVar[asyncio.Semaphore] = contextvars.ContextVar("connecting")


class Node:
    """One simulated agent: its connection, its report and what the control plane last told it."""

    def __init__(self, i: int, pki: Path, url: str, renewals: bool, changes: float, tally: Tally) -> None:
        self.node_id = f"n{i:05d}"
        self.ctx = client_context(pki / f"{self.node_id}.crt", pki / f"{self.node_id}.key", pki / "ca.crt")
        self.host, port = url.removeprefix("https://").rsplit(":", 1)
        self.port = int(port)
        self.template = report_template(i, self.node_id)
        self.version, self.step = WIRE_VERSION, 0
        self.renewals, self.changes, self.tally = renewals, changes, tally
        self.token = self.etag = ""
        self.renewal = b""
        self.rng = random.Random(i)
        self.last_full = -REPORT_REFRESH_S * self.rng.random()  # refreshes spread, as agents started apart would be
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.connected_once = False

    def report(self) -> bytes:
        free = MEM_TOTAL * (self.step % 32) // 32 + 1  # a new 1/32 step each change: the digest sees it
        return post(f"{self.host}:{self.port}", HEARTBEAT, self.template.replace(
            "VERSION", str(self.version), 1).replace(str(MEM_MARK), str(free), 1).encode())

    def wants_full(self, now: float) -> bool:
        if not (self.renewals and self.token) or now - self.last_full >= REPORT_REFRESH_S:
            return True
        if self.rng.random() < self.changes:
            self.step += 1
            return True
        return False

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        """One request and its answer on the kept-alive connection; a connection found closed is opened again."""
        for attempt in (0, 1):
            if self.writer is None:
                async with CONNECTING.get():
                    self.reader, self.writer = await asyncio.open_connection(self.host, self.port, ssl=self.ctx)
                self.tally.reconnects += self.connected_once
                self.connected_once = True
            assert self.reader is not None
            try:
                self.writer.write(request)
                await self.writer.drain()
                status, body, close = await read_answer(self.reader)
            except (ConnectionResetError, asyncio.IncompleteReadError, BrokenPipeError):
                self.drop()
                if attempt:
                    raise
                continue  # the server closed a kept-alive connection between two heartbeats: once more, anew
            if close:
                self.drop()
            return status, body
        raise AssertionError("unreachable")

    def drop(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def full_report(self, now: float) -> tuple[int, bytes]:
        status, body = await self.exchange(self.report())
        if status == 422 and self._speaks(body):
            status, body = await self.exchange(self.report())
        if status == 200:
            self.last_full = now
            if self.renewals:
                self._take(json.loads(body))
        return status, body

    async def heartbeat(self, now: float) -> tuple[bool, bool]:
        """(answered, whether it went as a full report)."""
        if self.wants_full(now):
            status, body = await self.full_report(now)
            return self._ok(status, body), True
        status, body = await self.exchange(self.renewal)
        if status == 200:
            desired = json.loads(body).get("desired")
            if desired:
                self._take(desired)
            return True, False
        if status == 404:
            self.renewals = False  # a control plane without renewals: full reports from now on
        elif status == SEND_REPORT:
            self.tally.sent_back += 1
        else:
            return self._ok(status, body), False
        self.token = ""
        status, body = await self.full_report(now)
        return self._ok(status, body), True

    def _speaks(self, body: bytes) -> bool:
        speaks = json.loads(body).get("speaks")
        if isinstance(speaks, int) and speaks < self.version:
            self.version = speaks
            return True
        return False

    def _take(self, desired: dict[str, Any]) -> None:
        token, etag = desired.get("lease") or "", desired.get("etag") or ""  # "lease": the token's name on the wire
        if (token, etag) != (self.token, self.etag):
            self.token, self.etag = token, etag
            body = json.dumps({"version": self.version, "node_id": self.node_id, "lease": token, "etag": etag,
                               "loads": []}, separators=(",", ":")).encode()
            self.renewal = post(f"{self.host}:{self.port}", RENEWAL_PATH, body)

    def _ok(self, status: int, body: bytes) -> bool:
        if status != 200:
            self.tally.error(f"{status} {body[:80]!r}")
        return status == 200


@dataclass
class Plan:
    """What every generator process is told: where, how often, from when, for how long, and how."""

    pki: str
    urls: list[str]
    interval: float
    seconds: float
    start_at: float  # wall clock: every process spreads its nodes' first heartbeats over one interval from here
    renewals: bool = True
    changes: float = 0.01
    loop: str = "uvloop"
    warmup: int = WARMUP_INTERVALS

    @property
    def measure_from(self) -> float:
        return self.start_at + self.warmup * self.interval


async def node_loop(node: Node, i: int, n_all: int, plan: Plan) -> None:
    tally, end = node.tally, plan.measure_from + plan.seconds
    due = plan.start_at + plan.interval * i / max(1, n_all)
    while due < end:
        await asyncio.sleep(max(0.0, due - time.time()))
        t0 = time.time()
        tally.sent += 1
        try:
            async with asyncio.timeout(TIMEOUT_S):  # no task of its own per heartbeat, unlike wait_for
                ok, full = await node.heartbeat(t0)
        except (OSError, ssl.SSLError, ValueError, TimeoutError, asyncio.IncompleteReadError) as e:
            ok, full = False, True
            tally.error(type(e).__name__)
            node.drop()
        if plan.measure_from <= due:
            tally.late.append(t0 - due)
        if ok:
            tally.lat.append(time.time() - t0)
            tally.when.append(due - plan.start_at)  # by schedule: a late send still belongs to its own window
            tally.full.append(full)
        due += plan.interval
    node.drop()


async def generate(nodes: list[Node], indexes: list[int], n_all: int, plan: Plan) -> Tally:
    tally = nodes[0].tally if nodes else Tally()
    CONNECTING.set(asyncio.Semaphore(HANDSHAKES_AT_ONCE))
    cpu0 = time.process_time()
    window = asyncio.ensure_future(_window_cpu(plan))
    await asyncio.gather(*(node_loop(nd, i, n_all, plan) for nd, i in zip(nodes, indexes, strict=True)))
    tally.cpu_s = time.process_time() - cpu0
    tally.window_cpu_s = await window
    return tally


async def _window_cpu(plan: Plan) -> float:
    """The generator's CPU over the measured window alone: its steady cost, without the warm-up's handshakes."""
    await asyncio.sleep(max(0.0, plan.measure_from - time.time()))
    cpu0 = time.process_time()
    await asyncio.sleep(max(0.0, plan.measure_from + plan.seconds - time.time()))
    return time.process_time() - cpu0


def generator(indexes: list[int], n_all: int, plan: Plan, conn: Any) -> None:
    """One load-generating process (multiprocessing's target): builds its nodes, says "ready" on `conn`, is sent the
    start time, runs its nodes' heartbeats, then sends its Tally back."""
    if plan.loop == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    tally = Tally()
    nodes = [Node(i, Path(plan.pki), plan.urls[i % len(plan.urls)], plan.renewals, plan.changes, tally)
             for i in indexes]
    conn.send("ready")
    plan.start_at = conn.recv()
    conn.send(asyncio.run(generate(nodes, indexes, n_all, plan)))
    conn.close()
