"""`python -m llmgw.agent.gated --listen HOST:PORT --upstream URL -- ENGINE...`: an engine behind its gate.

One process per shard, as the engine was before: it opens the gate (agent/gate.py) on the replica's port, then runs
the engine as its child, which binds loopback only, and exits with the engine's exit code. Kept apart from the agent
so that traffic does not stop when the agent does: an agent restarted, upgraded or stalled leaves its engines
serving, and the next agent adopts them whole. The engine dies with it (the kernel's parent-death signal).

The secret comes in GATE_KEY_ENV and leaves the environment before the engine starts. Exit codes: the engine's
(128 + signal when a signal ended it); 1 the gate's port could not be had; 2 bad usage; 127 the engine would not
start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Sequence

from llmgw.agent.gate import EngineGate
from llmgw.config.types import split_listen

GATE_KEY_ENV = "LLMGW_GATE_KEY"
PR_SET_PDEATHSIG = 1


def gated_argv(python: str, listen: str, upstream: str, command: Sequence[str]) -> list[str]:
    """The command that runs `command` behind a gate."""
    return [python, "-m", "llmgw.agent.gated", "--listen", listen, "--upstream", upstream, "--", *command]


def _die_with_parent() -> None:
    """In the engine, before exec: killed when the gate goes, however it goes (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _say(message: str) -> None:
    print(f"gate: {message}", file=sys.stderr, flush=True)


async def _run(listen: str, upstream: str, command: list[str]) -> int:
    gate = EngineGate(os.environ.pop(GATE_KEY_ENV, ""), upstream)
    host, port = split_listen(listen)
    try:
        await gate.open(host, port)
    except OSError as e:
        _say(f"cannot listen on {listen}: {e.strerror or e}")
        await gate.close()
        return 1
    try:
        try:
            proc = await asyncio.create_subprocess_exec(*command, preexec_fn=_die_with_parent)
        except OSError as e:
            _say(f"cannot start {command[0]}: {e.strerror or e}")
            return 127
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):  # (the agent signals the whole group; anyone else, us alone)
            loop.add_signal_handler(sig, _pass_on, proc, sig)
        code = await proc.wait()
        return code if code >= 0 else 128 - code
    finally:
        await gate.close()


def _pass_on(proc: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmgw.agent.gated", description="an engine behind its gate")
    p.add_argument("--listen", required=True, help="HOST:PORT the router reaches (the node's address)")
    p.add_argument("--upstream", required=True, help="http://127.0.0.1:PORT, where the engine listens")
    p.add_argument("command", nargs="+", help="the engine's command, after --")
    args = p.parse_args(argv)
    return asyncio.run(_run(args.listen, args.upstream, args.command))


if __name__ == "__main__":
    sys.exit(main())
