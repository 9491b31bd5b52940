"""The router bench's load generator: closed-loop clients against one server under test, a cell at a time (one mode,
one concurrency), its latencies and CPU per request; a cell measured again while the machine is busy."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass

import aiohttp

from bench.router_cpu import NOISY_CORES, CpuSnap, quiet
from bench.router_servers import MODEL, Server

SYSTEM = {"chars": 0}  # --system-chars: a system prompt of this many characters in every request (0: none)


def request_body(stream: bool) -> bytes:
    system = [{"role": "system", "content": ("You are a careful assistant. " * 1000)[:SYSTEM["chars"]]}] \
        if SYSTEM["chars"] else []
    body: dict[str, object] = {
        "model": MODEL,
        "messages": [*system, {"role": "user", "content": "Say something short."}],
        "max_tokens": 30,
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return json.dumps(body).encode()


@dataclass
class Cell:
    target: str  # a, b, c, d
    label: str
    loop: str  # the server's event loop
    stream: bool
    concurrency: int
    ok: int
    errors: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    server_cpu_us: float | None = None  # CPU time of the server under test (its whole process tree), per request
    standin_cpu_us: float | None = None
    client_cpu_us: float | None = None  # this process, the load generator
    others_cores: float | None = None  # CPU busy on the machine outside these processes: noise, in cores
    added_p50_ms: float | None = None
    added_p99_ms: float | None = None
    first_error: str = ""

    @property
    def total_cpu_us(self) -> float | None:
        """CPU all three processes spent per request. At saturation 2 cores / this is the throughput, so the ratio
        of two cells' totals estimates their throughput ratio even when other work on the machine blurs req/s."""
        if self.server_cpu_us is None or self.client_cpu_us is None:
            return None
        return self.server_cpu_us + self.client_cpu_us + ((self.standin_cpu_us or 0.0) if self.target != "a" else 0.0)


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values) + 0.5) - 1))  # nearest rank
    return sorted_values[i]


async def one(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str], stream: bool) -> str:
    """'' when the answer is whole and right, else what was wrong."""
    async with session.post(url, data=body, headers=headers) as r:
        if stream:
            end = b""
            async for chunk in r.content.iter_any():
                end = (end + chunk)[-32:]
            if r.status != 200:
                return f"HTTP {r.status}"
            return "" if end.rstrip().endswith(b"data: [DONE]") else f"stream ended without [DONE]: {end!r}"
        data = await r.read()
        if r.status != 200:
            return f"HTTP {r.status}: {data[:200]!r}"
        return "" if b'"usage"' in data else f"no usage in {data[:200]!r}"


async def load(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    stream: bool,
    concurrency: int,
    requests: int,
    seconds: float,
) -> tuple[list[float], int, str, float]:
    """`concurrency` closed-loop clients until `requests` are issued or `seconds` pass: latencies, errors, elapsed."""
    body = request_body(stream)
    latencies: list[float] = []
    errors = 0
    first_error = ""
    issued = 0
    start = time.perf_counter()
    deadline = start + seconds

    async def client() -> None:
        nonlocal issued, errors, first_error
        while issued < requests and time.perf_counter() < deadline:
            issued += 1
            t0 = time.perf_counter()
            try:
                wrong = await one(session, url, body, headers, stream)
            except (aiohttp.ClientError, TimeoutError) as e:
                wrong = f"{type(e).__name__}: {e}"
            if wrong:
                errors += 1
                first_error = first_error or wrong
            else:
                latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return latencies, errors, first_error, time.perf_counter() - start


@dataclass
class Target:
    key: str  # a, b, c, d
    label: str
    loop: str
    srv: Server
    seconds: float


async def measure(t: Target, standin: Server, stream: bool, c: int, args: argparse.Namespace) -> Cell:
    url = t.srv.base + "/v1/chat/completions"
    conn = aiohttp.TCPConnector(limit=c)
    async with aiohttp.ClientSession(
        connector=conn, timeout=aiohttp.ClientTimeout(total=120), auto_decompress=False
    ) as s:
        await load(s, url, t.srv.headers, stream, c, max(args.warmup, c), min(args.warmup_seconds, t.seconds))
        before = CpuSnap.take(t.srv.proc.pid, standin.proc.pid)
        lat, errors, first_error, elapsed = await load(s, url, t.srv.headers, stream, c, args.requests, t.seconds)
        after = CpuSnap.take(t.srv.proc.pid, standin.proc.pid)
    lat.sort()
    x = Cell(
        t.key,
        t.label,
        t.loop,
        stream,
        c,
        len(lat),
        errors,
        round(elapsed, 3),
        len(lat) / elapsed,
        percentile(lat, 0.50) * 1e3,
        percentile(lat, 0.99) * 1e3,
        first_error=first_error,
    )
    if before and after and lat:
        per = 1e6 / (len(lat) + errors)
        x.server_cpu_us = (after.server - before.server) * per
        x.standin_cpu_us = (after.standin - before.standin) * per if t.key != "a" else x.server_cpu_us
        x.client_cpu_us = (after.client - before.client) * per
        ours = (after.server - before.server) + (after.client - before.client)
        if t.key != "a":
            ours += after.standin - before.standin
        x.others_cores = max(0.0, (after.busy - before.busy - ours) / elapsed)
    print(
        f"  ({t.key}) {t.label:<20} {t.loop:<8} {'stream' if stream else 'whole':<6} c={c:<3} "
        f"{x.rps:7.0f} req/s  p50 {x.p50_ms:7.2f} ms  p99 {x.p99_ms:7.2f} ms  "
        f"server {fmt(x.server_cpu_us, '5.0f')} us/req  others {fmt(x.others_cores, '.2f')} cores"
        + (f"  errors {errors} ({first_error[:80]})" if errors else ""),
        flush=True,
    )
    return x


async def grid(targets: list[Target], standin: Server, args: argparse.Namespace) -> list[Cell]:
    """Every cell of every target; the targets of one cell run back to back so they meet the same background.

    A cell during which other processes took more than NOISY_CORES is measured again (up to --retries times),
    after waiting a little for the machine to calm down; the best run counts."""
    cells = []
    for stream in (False, True):
        for c in args.concurrency:
            for t in targets:
                cell = await measure(t, standin, stream, c, args)
                for _ in range(args.retries):
                    if (cell.others_cores or 0) <= NOISY_CORES or args.retry_budget <= 0:
                        break
                    t0 = time.monotonic()
                    await quiet(max_wait=5.0)
                    again = await measure(t, standin, stream, c, args)
                    cell = again if again.rps > cell.rps else cell
                    args.retry_budget -= time.monotonic() - t0
                cells.append(cell)
    return cells


def fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)

