"""Entry point: `llmgw server | agent | ctl | ca | dev`."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from pydantic import BaseModel

from llmgw.cli.ctl import ctl
from llmgw.cli.run import run_until_signal, setup_logging
from llmgw.core.clock import SystemClock
from llmgw.core.errors import LlmgwError

app = typer.Typer(help="llmgw: one OpenAI-compatible endpoint over a cluster of GPU servers.", no_args_is_help=True)
ca_cli = typer.Typer(help="A small certificate authority for agents and the control plane.", no_args_is_help=True)
app.add_typer(ctl, name="ctl")
app.add_typer(ca_cli, name="ca")


def _fail(e: LlmgwError) -> typer.Exit:
    typer.echo(f"error: {e}", err=True)
    return typer.Exit(2)


ConfigOpt = Annotated[Path, typer.Option("--config", "-c")]
CheckOpt = Annotated[bool, typer.Option("--check", help="check the config file, say what is wrong, and exit")]
M = TypeVar("M", bound=BaseModel)


def _version(show: bool) -> None:
    if show:
        from importlib.metadata import version

        typer.echo(f"llmgw {version('llmgw')}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="print the installed version and exit")] = False,
) -> None:
    """llmgw: one OpenAI-compatible endpoint over a cluster of GPU servers."""


def _config(model: type[M], path: Path, verbose: bool, check: bool = False) -> M:
    """Logging on, then the config loaded; a mistake stops here, naming the key, before anything listens. With
    `check`, only that: the file is said to be fine (exit 0) or what is wrong with it (exit 2)."""
    from llmgw.config.loader import load

    setup_logging(verbose)
    try:
        cfg = load(model, path)
    except LlmgwError as e:
        raise _fail(e) from None
    if check:
        typer.echo(f"{path}: ok")
        raise typer.Exit(0)
    return cfg


@app.command()
def server(config: ConfigOpt, verbose: bool = False, check: CheckOpt = False) -> None:
    """Run the control plane, router and management API."""
    from llmgw.config.server import ServerConfig
    from llmgw.control.server import serve

    cfg = _config(ServerConfig, config, verbose, check)
    raise typer.Exit(run_until_signal(lambda stop: serve(cfg, SystemClock(), stop, str(config))))


@app.command("router-worker", hidden=True)
def router_worker(config: ConfigOpt, verbose: bool = False, parent: int | None = None) -> None:
    """An extra API worker process; `llmgw server` starts these when api_workers > 1."""
    from llmgw.config.server import ServerConfig
    from llmgw.control.workers import serve_worker

    cfg = _config(ServerConfig, config, verbose)
    raise typer.Exit(run_until_signal(lambda stop: serve_worker(cfg, SystemClock(), stop, parent)))


@app.command()
def agent(config: ConfigOpt, verbose: bool = False, check: CheckOpt = False) -> None:
    """Run a node agent."""
    from llmgw.agent.agent import Agent
    from llmgw.config.agent import AgentConfig

    cfg = _config(AgentConfig, config, verbose, check)

    async def run(stop: asyncio.Event) -> None:
        agent = Agent(cfg, SystemClock())

        def hand_over() -> None:  # SIGUSR2: an upgrade; the next agent adopts what runs
            agent.hand_over = True
            stop.set()

        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, hand_over)
        await agent.run(stop)

    raise typer.Exit(run_until_signal(run))


@ca_cli.command("init")
def ca_init(directory: Path) -> None:
    """Create a CA in DIRECTORY (refuses to overwrite one)."""
    from llmgw.pki.ca import init_ca

    try:
        init_ca(directory)
    except LlmgwError as e:
        raise _fail(e) from None
    typer.echo(f"CA created in {directory}")


@ca_cli.command("issue")
def ca_issue(
    directory: Path,
    node: str,
    ip: Annotated[list[str] | None, typer.Option("--ip", help="also valid for this IP address (repeatable)")] = None,
    server: Annotated[bool, typer.Option("--server", help="the control plane's certificate, not a node's")] = False,
    days: Annotated[int | None, typer.Option(help="validity (default: 90 for nodes, 397 for --server)")] = None,
) -> None:
    """Issue a node certificate for NODE (CN = SAN = node id), or with --server the control plane's certificate."""
    from llmgw.pki.ca import issue

    try:
        crt, key = issue(directory, node, ips=ip or [], days=days, server=server)
    except LlmgwError as e:
        raise _fail(e) from None
    typer.echo(f"{crt}\n{key}")


@ca_cli.command("renew")
def ca_renew(
    directory: Path,
    name: str,
    days: Annotated[int | None, typer.Option(help="validity (default: as for issue)")] = None,
) -> None:
    """Re-issue NAME's certificate with a new key, keeping its role and addresses. Copy both files to the node; its
    agent picks them up at its next connection. Then `ctl nodes revoke NAME --serial OLD` retires the old one."""
    from llmgw.pki.ca import renew

    try:
        crt, key = renew(directory, name, days=days)
    except LlmgwError as e:
        raise _fail(e) from None
    typer.echo(f"{crt}\n{key}")


@app.command()
def dev(
    workdir: Annotated[Path | None, typer.Option(help="keep state here instead of a temporary directory")] = None,
    sim_nodes: int = 4,
    cpu_node: bool = True,
    api_port: int = 8080,
    admin_port: int = 9090,
    agent_port: int = 7443,
) -> None:
    """The embedded default: a control plane, simulated GPU nodes and a CPU node with a real llama-server."""
    from llmgw.dev.cluster import run_dev

    setup_logging(False)
    ports = (api_port, admin_port, agent_port)
    raise typer.Exit(run_until_signal(lambda stop: run_dev(stop, workdir, sim_nodes, cpu_node, ports)))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
