"""What the agent's gate costs a request: the same sim engine asked directly on its loopback port and through its
gate process (agent/gated.py), alternating in rounds so that both see the same machine; and what llama.cpp's RPC
tunnel carries against a plain loopback connection. Method and figures: docs/benchmarks.md, "The agent's gate".

Run: python -m bench.gate [--requests 400] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from bench.addresses import loopback
from llmgw.agent import tunnel
from llmgw.agent.engines.base import KEY_ENV
from llmgw.agent.gate import loopback_ports
from llmgw.agent.gated import GATE_KEY_ENV, gated_argv
from llmgw.pki.ca import init_ca, issue
from llmgw.pki.tls import client_context, server_context

KEY = "bench-gate-" + "k" * 32
NODE, WORKER = loopback(), loopback()  # the leader's node and the worker's, as the tunnel joins them
CHAT = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hello there"}]}
HEADERS = {"Authorization": f"Bearer {KEY}"}


async def _chat(http: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    async with http.post(url + "/v1/chat/completions", json=CHAT, headers=HEADERS) as r:
        assert r.status == 200, r.status
        await r.read()
    t = time.perf_counter() - t0
    return t, t


async def _stream(http: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    first = 0.0
    async with http.post(url + "/v1/chat/completions", json={**CHAT, "stream": True}, headers=HEADERS) as r:
        assert r.status == 200, r.status
        async for _ in r.content.iter_any():
            first = first or time.perf_counter() - t0
    return first, time.perf_counter() - t0


async def _ready(url: str, deadline: float) -> None:
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(url + "/v1/models", headers=HEADERS) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def _cpu_s(pid: int) -> float:
    """CPU seconds `pid` itself has used (user and system; not its children's, so not the engine's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ms(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"median {statistics.median(xs) * 1000:.2f} ms, p90 {xs[int(len(xs) * 0.9)] * 1000:.2f} ms"


async def _throughput(url: str, seconds: float, clients: int = 16) -> float:
    done = 0
    end = time.monotonic() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as http:
        async def client() -> None:
            nonlocal done
            while time.monotonic() < end:
                await _chat(http, url)
                done += 1
        await asyncio.gather(*(client() for _ in range(clients)))
    return done / seconds


async def _sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Reads the size announced in 8 bytes, then that many bytes, then says how many (the tunnel has no half-close)."""
    size = int.from_bytes(await reader.readexactly(8), "big")
    n = 0
    while n < size and (chunk := await reader.read(1 << 16)):
        n += len(chunk)
    writer.write(str(n).encode() + b"\n")
    await writer.drain()
    writer.close()
    await writer.wait_closed()


async def _send(port: int, size: int) -> float:
    """MB/s for `size` bytes to 127.0.0.1:port, counted by the far end."""
    block = os.urandom(1 << 20)
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(size.to_bytes(8, "big"))
    for _ in range(size >> 20):
        writer.write(block)
        await writer.drain()
    got = int(await reader.readline())
    assert got == size, got
    writer.close()
    await writer.wait_closed()
    return size / (time.perf_counter() - t0) / 1e6


async def tunnel_rates(size: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        pki = Path(d)
        init_ca(pki)
        for name, ip in (("leader", NODE), ("worker", WORKER)):
            issue(pki, name, ips=[ip])

        def files(name: str) -> tuple[Path, Path, Path]:
            return pki / f"{name}.crt", pki / f"{name}.key", pki / "ca.crt"

        sink_port, local, exposed = loopback_ports(3)
        servers = [await asyncio.start_server(_sink, "127.0.0.1", sink_port),
                   await tunnel.serve_in(WORKER, exposed, sink_port, KEY,
                                         server_context(*files("worker"), require_client=True)),
                   await tunnel.serve_out(local, WORKER, exposed, KEY, client_context(*files("leader")))]
        try:
            print(f"{size >> 20} MB plain loopback: {await _send(sink_port, size):.0f} MB/s; "
                  f"through the tunnel: {await _send(local, size):.0f} MB/s")
        finally:
            for s in servers:
                s.close()
            # the tunnels' handlers end a moment after the last byte: let them, rather than cancel them at exit
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if others:
                await asyncio.wait(others, timeout=5)


async def run(requests: int, seconds: float) -> None:
    engine_port, = loopback_ports(1)
    gate_port, = loopback_ports(1)  # (free on 127.0.0.1 too, so free enough on NODE)
    direct, gated = f"http://127.0.0.1:{engine_port}", f"http://{NODE}:{gate_port}"
    sim = [sys.executable, "-m", "llmgw.sim.engine", "--model", "m", "--http-host", "127.0.0.1",
           "--port", str(engine_port), "--tokens", "8"]
    argv = gated_argv(sys.executable, sim, listen=f"{NODE}:{gate_port}", upstream=direct)
    proc = subprocess.Popen(argv, env={**os.environ, GATE_KEY_ENV: KEY, KEY_ENV: KEY}, start_new_session=True)
    try:
        await _ready(gated, time.monotonic() + 30)
        cases: dict[str, Callable[[aiohttp.ClientSession, str], Awaitable[tuple[float, float]]]] = {
            "chat": _chat, "stream": _stream}
        seen: dict[tuple[str, str], list[tuple[float, float]]] = {}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as one, \
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as two:
            for _ in range(requests // 10):  # rounds of 10 each way, alternating
                for name, case in cases.items():
                    for way, url, http in (("direct", direct, one), ("gate", gated, two)):
                        for _ in range(10):
                            seen.setdefault((name, way), []).append(await case(http, url))
        for (name, way), got in sorted(seen.items()):
            if name == "chat":
                print(f"{name:6} {way:6}: {_ms([t for t, _ in got])}  (n={len(got)})")
            else:
                print(f"{name:6} {way:6}: first event {_ms([f for f, _ in got])}; end {_ms([t for _, t in got])}")
        for way, url in (("direct", direct), ("gate", gated)):
            before = _cpu_s(proc.pid)
            rate = await _throughput(url, seconds)
            spent = (_cpu_s(proc.pid) - before) / (rate * seconds) * 1000 if way == "gate" else 0.0
            print(f"16 clients {way:6}: {rate:.0f} requests/s" + (f"; the gate's CPU {spent:.2f} ms a request"
                                                                 if spent else ""))
        await tunnel_rates(16 << 20 if requests < 100 else 256 << 20)
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=400, help="per case and way")
    p.add_argument("--seconds", type=float, default=5.0, help="each throughput run")
    p.add_argument("--smoke", action="store_true", help="a few seconds: that it runs, not what it measures")
    a = p.parse_args()
    asyncio.run(run(20, 0.5) if a.smoke else run(a.requests, a.seconds))


if __name__ == "__main__":
    main()
