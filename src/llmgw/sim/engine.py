"""`python -m llmgw.sim.engine`: the sim engine process, standing in for vLLM/SGLang on machines without GPUs.

Rank 0 waits until every worker has joined (sim/rendezvous.py), then serves the OpenAI API; workers serve nothing.
Exit codes: 0 stopped by SIGTERM or SIGINT (a leader's workers too); 1 the group broke or could not form (as a
broken collective ends a real engine), or a port could not be bound; 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Sequence
from typing import TypeVar

from aiohttp import web

from llmgw.agent.engines.base import KEY_ENV
from llmgw.sim.behaviour import Behaviour
from llmgw.sim.rendezvous import Leader, RendezvousError, Worker
from llmgw.sim.server import DEFAULT_TOKENS, make_app
from llmgw.sim.sleep import SleepMode

T = TypeVar("T")

DEFAULT_PORT = 8000
DEFAULT_RENDEZVOUS_PORT = 29500
DEFAULT_JOIN_TIMEOUT = 600.0
SHUTDOWN_GRACE = 1.0  # seconds in-flight HTTP requests get after SIGTERM


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m llmgw.sim.engine", description="llmgw's stand-in for vLLM/SGLang")
    p.add_argument("--model", required=True, help="the model name to serve")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--host", default="127.0.0.1", help="address the leader binds (rendezvous, and HTTP by default)")
    p.add_argument("--http-host", default="", help="address the leader's HTTP server binds (default: --host)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="the leader's HTTP port (0: any free port)")
    p.add_argument("--rendezvous-port", type=int, default=DEFAULT_RENDEZVOUS_PORT)
    p.add_argument("--leader-address", help="host of rank 0 (required for workers)")
    p.add_argument("--tokens-per-second", type=float, default=0.0, help="generation pace; 0 = as fast as possible")
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help="tokens per completion (max_tokens caps it)")
    p.add_argument("--prefill-tokens-per-second", type=float, default=0.0,
                   help="prompt tokens computed per second before the first token (cached ones are free); 0 = instant")
    p.add_argument("--cache-blocks", type=int, default=0, help="prefix cache size, in 64-character blocks; 0 = none")
    p.add_argument("--max-running", type=int, default=0, help="requests generating at once; the rest wait; 0 = any")
    p.add_argument("--fault", choices=["", "hang", "slow", "error"], default="",
                   help="a planted fault: hang (accept, never answer), slow (10x), error (503)")
    p.add_argument("--load-seconds", type=float, default=0.0,
                   help="the model takes this long to load after the server starts: 503 'Loading model' meanwhile")
    p.add_argument("--enable-sleep-mode", action="store_true",
                   help="answer POST /sleep?level=N, POST /wake_up and GET /is_sleeping as vLLM does")
    p.add_argument("--wake-seconds", type=float, default=0.0, help="a wake from level-1 sleep takes this long")
    p.add_argument("--gpu-memory-mb", type=int, default=1024, help="the GPU memory it would hold awake")
    p.add_argument("--sleep-leak-mb", type=int, default=0,
                   help="GPU memory still held after a level-1 sleep (a planted leak; level 2 frees it)")
    p.add_argument("--sleep-leak-deep", action="store_true", help="the leak holds after a level-2 sleep too")
    p.add_argument("--fail-load", default="", metavar="WORDS",
                   help="play a model that failed to load: /health answers, nothing else does (a planted fault)")
    p.add_argument(
        "--join-timeout",
        type=float,
        default=DEFAULT_JOIN_TIMEOUT,
        help="seconds to wait for the group to form; 0 = forever",
    )
    args = p.parse_args(argv)
    if args.world_size < 1:
        p.error("--world-size must be at least 1")
    if not 0 <= args.rank < args.world_size:
        p.error(f"--rank must be in 0..{args.world_size - 1}")
    if args.rank > 0 and not args.leader_address:
        p.error("workers (--rank > 0) need --leader-address")
    if min(args.tokens, args.tokens_per_second, args.join_timeout, args.prefill_tokens_per_second,
           args.cache_blocks, args.max_running, args.load_seconds, args.wake_seconds, args.gpu_memory_mb,
           args.sleep_leak_mb) < 0:
        p.error("--tokens, --tokens-per-second, --join-timeout, --prefill-tokens-per-second, --cache-blocks, "
                "--max-running, --load-seconds, --wake-seconds, --gpu-memory-mb and --sleep-leak-mb must not be "
                "negative")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return asyncio.run(_run(args))


def _say(rank: int, message: str) -> None:
    print(f"sim[rank {rank}]: {message}", file=sys.stderr, flush=True)


async def _run(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.rank == 0:
        return await _lead(args, stop)
    return await _work(args, stop)


async def _lead(args: argparse.Namespace, stop: asyncio.Event) -> int:
    def say(message: str) -> None:
        _say(0, message)

    leader: Leader | None = None
    runner: web.AppRunner | None = None
    orderly = False
    try:
        if args.world_size > 1:
            leader = Leader(args.host, args.rendezvous_port, args.world_size, log=say)
            try:
                await leader.start()
            except OSError as e:
                say(f"cannot bind rendezvous port {args.host}:{args.rendezvous_port}: {e.strerror or e}")
                return 1
            say(f"waiting for {args.world_size - 1} worker(s) on {args.host}:{leader.port}")
            try:
                await _until(stop, leader.wait_all_joined(), args.join_timeout)
            except _Stopped:
                orderly = True
                return 0
            except TimeoutError:
                say(f"only {len(leader.joined)} of {args.world_size - 1} workers joined within {args.join_timeout}s")
                return 1
            except RendezvousError as e:
                say(f"group broke while forming: {e}")
                return 1
            say("all workers joined")

        http_host = args.http_host or args.host
        runner = web.AppRunner(_app(args), handle_signals=False, shutdown_timeout=SHUTDOWN_GRACE, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, http_host, args.port).start()
        except OSError as e:
            say(f"cannot bind HTTP port {http_host}:{args.port}: {e.strerror or e}")
            return 1
        port = runner.addresses[0][1]  # the bound port, which differs from args.port when that is 0
        say(f"serving {args.model} on http://{http_host}:{port}")

        if leader is None:
            await stop.wait()
            return 0
        try:
            reason = await _until(stop, leader.wait_broken(), 0)
        except _Stopped:
            orderly = True
            return 0
        say(f"collective broken: {reason}; exiting")
        return 1
    finally:
        if runner is not None:
            await runner.cleanup()
        if leader is not None:
            await leader.close(orderly=orderly)


def _app(args: argparse.Namespace) -> web.Application:
    """The OpenAI-compatible app the leading rank serves, as the arguments describe it."""
    # the replica's secret comes through the environment (never argv) and leaves it at once
    key = os.environ.pop(KEY_ENV, "")
    behaviour = Behaviour(prefill_tokens_per_second=args.prefill_tokens_per_second,
                          cache_blocks=args.cache_blocks, max_running=args.max_running, fault=args.fault,
                          load_seconds=args.load_seconds, sleep=SleepMode(
                              enabled=args.enable_sleep_mode, wake_seconds=args.wake_seconds,
                              reload_seconds=args.load_seconds, memory_bytes=args.gpu_memory_mb << 20,
                              leak_bytes=min(args.sleep_leak_mb, args.gpu_memory_mb) << 20,
                              deep_leak=args.sleep_leak_deep))
    return make_app(args.model, tokens=args.tokens, tokens_per_second=args.tokens_per_second, api_key=key,
                    load_failure=args.fail_load, behaviour=behaviour)


async def _work(args: argparse.Namespace, stop: asyncio.Event) -> int:
    def say(message: str) -> None:
        _say(args.rank, message)

    worker = Worker(args.leader_address, args.rendezvous_port, args.rank, log=say)
    try:
        say(f"joining leader at {args.leader_address}:{args.rendezvous_port}")
        try:
            await _until(stop, worker.join(), args.join_timeout)
        except _Stopped:
            return 0
        except TimeoutError:
            say(f"could not join leader {args.leader_address}:{args.rendezvous_port} within {args.join_timeout}s")
            return 1
        except RendezvousError as e:
            say(str(e))
            return 1
        say("joined")
        try:
            gone = await _until(stop, worker.wait_lost(), 0)
        except _Stopped:
            return 0
        if gone.orderly:
            say(f"{gone.reason}; exiting")
            return 0
        say(f"lost the leader: {gone.reason}; exiting")
        return 1
    finally:
        await worker.close()


class _Stopped(Exception):
    """SIGTERM or SIGINT arrived while waiting."""


async def _until(stop: asyncio.Event, aw: Awaitable[T], timeout: float) -> T:
    """`aw`'s result; _Stopped if `stop` is set first; TimeoutError after `timeout` seconds (0 = no limit)."""
    task = asyncio.ensure_future(asyncio.wait_for(aw, timeout) if timeout > 0 else aw)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    raise _Stopped


if __name__ == "__main__":
    sys.exit(main())
