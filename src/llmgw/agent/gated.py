"""`python -m llmgw.agent.gated [--listen HOST:PORT --upstream URL] [--tunnel-in ...] -- ENGINE...`: one shard's
engine behind its gate (agent/gate.py) or tunnels (agent/tunnel.py), the engine its child on loopback and dying
with it, started first (it loads while the gate opens). Apart from the agent, so traffic goes on while the agent
restarts. The secret comes in GATE_KEY_ENV and leaves the environment before the engine starts. Exit codes: the
engine's (128 + signal for a signal); 1 a port or the node's certificate could not be had (the engine stopped);
2 bad usage; 127 the engine would not start."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

GATE_KEY_ENV = "LLMGW_GATE_KEY"
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class TlsFiles:
    """The node's certificate, its key and the cluster's CA: what the tunnels between ranks authenticate with."""

    cert: str
    key: str
    ca: str


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def gated_argv(python: str, command: Sequence[str], *, listen: str = "", upstream: str = "", tunnel_in: str = "",
               tunnels_out: Sequence[str] = (), tls: TlsFiles | None = None) -> list[str]:
    """The command that runs `command` behind a gate: an HTTP one (`listen` to `upstream`), a tunnel's end
    (`tunnel_in`: "HOST:PORT=ENGINE_PORT"), tunnels to peers (`tunnels_out`: "LOCAL_PORT=HOST:PORT")."""
    argv = [python, "-m", "llmgw.agent.gated"]
    if listen:
        argv += ["--listen", listen, "--upstream", upstream]
    if tunnel_in:
        argv += ["--tunnel-in", tunnel_in]
    for t in tunnels_out:
        argv += ["--tunnel-out", t]
    if tls is not None and (tunnel_in or tunnels_out):
        argv += ["--tls-cert", tls.cert, "--tls-key", tls.key, "--tls-ca", tls.ca]
    return [*argv, "--", *command]


def _die_with_parent() -> None:
    """In the engine, before exec: killed when the gate goes, however it goes (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _say(message: str) -> None:
    print(f"gate: {message}", file=sys.stderr, flush=True)


async def _open(args: argparse.Namespace, key: str, closers: list[Callable[[], Awaitable[None]]]) -> None:
    """Every listener the arguments ask for; raises OSError (a port taken) or ValueError (bad arguments). Its
    modules are imported here, once the engine has started: their import (the web stack, TLS) is a third of a
    second of a core, which a cold start waited for before the engine began loading."""
    from llmgw.agent import tunnel
    from llmgw.agent.gate import EngineGate
    from llmgw.config.types import split_listen
    from llmgw.pki.tls import client_context, server_context

    if args.listen:
        gate = EngineGate(key, args.upstream)
        closers.append(gate.close)
        await gate.open(*split_listen(args.listen))
    if not (args.tunnel_in or args.tunnel_out):
        return
    if not (args.tls_cert and args.tls_key and args.tls_ca):
        raise ValueError("tunnels need --tls-cert, --tls-key and --tls-ca")
    files = (Path(args.tls_cert), Path(args.tls_key), Path(args.tls_ca))
    servers: list[asyncio.Server] = []
    if args.tunnel_in:
        listen, _, engine_port = args.tunnel_in.rpartition("=")
        servers.append(await tunnel.serve_in(*split_listen(listen), int(engine_port), key,
                                             server_context(*files, require_client=True)))
    for t in args.tunnel_out:
        local, _, remote = t.partition("=")
        servers.append(await tunnel.serve_out(int(local), *split_listen(remote), key, client_context(*files)))
    for server in servers:
        closers.append(_closer(server))


def _closer(server: asyncio.Server) -> Callable[[], Awaitable[None]]:
    async def close() -> None:
        server.close()
    return close


async def _run(args: argparse.Namespace, key: str, proc: subprocess.Popen[bytes]) -> int:
    """The gate's listeners in front of the engine already started; the engine's exit code once it ends, or 1 (the
    engine stopped) when a listener cannot be opened."""
    from llmgw.core.errors import PKIError

    closers: list[Callable[[], Awaitable[None]]] = []
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # (the agent signals the whole group; anyone else, us alone)
        loop.add_signal_handler(sig, _pass_on, proc, sig)
    try:
        try:
            await _open(args, key, closers)
        except (OSError, ValueError, PKIError) as e:
            _say(f"cannot open the gate: {e}")
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.to_thread(proc.wait)
            return 1
        code = await asyncio.to_thread(proc.wait)
        return code if code >= 0 else 128 - code
    finally:
        for close in closers:
            await close()


def _pass_on(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmgw.agent.gated", description="an engine behind its gate")
    p.add_argument("--listen", default="", help="HOST:PORT the router reaches (the node's address)")
    p.add_argument("--upstream", default="", help="http://127.0.0.1:PORT, where the engine's HTTP server listens")
    p.add_argument("--tunnel-in", default="", metavar="HOST:PORT=ENGINE_PORT",
                   help="a tunnel's end: peers of this replica reach the engine's loopback ENGINE_PORT here")
    p.add_argument("--tunnel-out", action="append", default=[], metavar="LOCAL_PORT=HOST:PORT",
                   help="loopback LOCAL_PORT carried to a peer's tunnel at HOST:PORT")
    p.add_argument("--tls-cert", default="")
    p.add_argument("--tls-key", default="")
    p.add_argument("--tls-ca", default="")
    p.add_argument("command", nargs="+", help="the engine's command, after --")
    args = p.parse_args(argv)
    if bool(args.listen) != bool(args.upstream):
        p.error("--listen and --upstream go together")
    key = os.environ.pop(GATE_KEY_ENV, "")  # out of the environment before the engine is started with it
    try:  # the engine first: it loads while the gate's own modules are imported and its listeners opened
        proc = subprocess.Popen(args.command, preexec_fn=_die_with_parent)
    except OSError as e:
        _say(f"cannot start {args.command[0]}: {e.strerror or e}")
        return 127
    return asyncio.run(_run(args, key, proc))


if __name__ == "__main__":
    sys.exit(main())
