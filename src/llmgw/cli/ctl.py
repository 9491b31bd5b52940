"""`llmgw ctl`: the operator's view, over the management API."""

from __future__ import annotations

import http.client
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from llmgw.api.adapter_lines import AdapterLine, adapter_rows
from llmgw.api.model_weights import ModelWeights, weights_lines
from llmgw.api.router import ModelExplanation, model_explanation_lines
from llmgw.cli import keys as key_commands
from llmgw.cli.admin_client import (
    DEFAULT_ADMIN,
    AdminOpt,
    ApiRefused,
    JsonOpt,
    call,
    console,
    json_out,
    request,
    safe,
)

ctl = typer.Typer(help="Inspect and steer a running control plane (management API).", no_args_is_help=True)
keys_cli = typer.Typer(help="API keys.", no_args_is_help=True)
nodes_cli = typer.Typer(help="Nodes: list them, cut one off.", no_args_is_help=False, invoke_without_command=True)
ctl.add_typer(keys_cli, name="keys")
ctl.add_typer(nodes_cli, name="nodes")


@nodes_cli.callback()
def nodes(ctx: typer.Context, admin: AdminOpt = DEFAULT_ADMIN, as_json: JsonOpt = False) -> None:
    """Nodes: address, liveness, GPUs, RAM, engines and warnings."""
    if ctx.invoked_subcommand is not None:
        return
    rows = call(admin, "GET", "/api/nodes")
    if json_out(rows, as_json):
        return
    console.print(_node_table(rows))


def _node_table(rows: list[dict[str, Any]]) -> Table:
    t = Table("node", "address", "state", "GPUs", "RAM", "engines", "fabrics", "not so / warnings")
    for r in rows:
        state = "[green]live[/green]" if r["state"] == "live" else f"[red]{safe(r['state'])}[/red]"
        told = [f"{c['type']} {c['status']}: {c['reason']}" + (f": {c['message']}" if c["message"] else "")
                for c in r.get("conditions", []) if c["status"] != "True"]
        said = " ".join(told)
        extra = [w for w in r["warnings"] if w not in said]
        t.add_row(
            safe(r["node"]),
            safe(r["address"]),
            state,
            safe(r["gpus"]),
            safe(r["ram"]),
            safe(r["engines"]),
            safe(r["fabrics"]),
            "\n".join(safe(w) for w in told + extra) or "-",
        )
    return t


def _cert_serial(path: Path) -> str:
    from cryptography import x509

    from llmgw.pki.tls import serial_text

    try:
        return serial_text(x509.load_pem_x509_certificate(path.read_bytes()))
    except (OSError, ValueError) as e:
        console.print(f"[red]error:[/red] {safe(path)}: not a readable PEM certificate ({safe(e)})")
        raise typer.Exit(2) from None


@nodes_cli.command("wait")
def nodes_wait(
    node: str,
    cert: Annotated[Path | None, typer.Option(help="wait until the node has spoken with this certificate")] = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait at most")] = 120.0,
    admin: AdminOpt = DEFAULT_ADMIN,
    as_json: JsonOpt = False,
) -> None:
    """Wait until NODE is live (with --cert: registered with that certificate, a node just onboarded), then print
    what the control plane says of it. At the deadline, exit 1 saying what was last seen."""
    import time

    serial = _cert_serial(cert) if cert is not None else None
    deadline = time.monotonic() + timeout
    seen = "no answer from the management API yet"
    while True:
        try:
            row = next((r for r in request(admin, "GET", "/api/nodes") if r.get("node") == node), None)
            if row is None:
                seen = f"node {node} has not registered"
            elif serial is not None and row.get("cert_serial") != serial:
                seen = (f"node {node} last spoke with certificate {row.get('cert_serial') or '(none)'}, "
                        f"not {serial} ({cert})")
            elif row.get("state") != "live":
                seen = f"node {node} is {row.get('state')}"
            else:
                if not json_out(row, as_json):
                    console.print(_node_table([row]))
                return
        except ApiRefused as e:
            seen = f"the management API answered {e}"
            if e.code in (401, 403):
                console.print(f"[red]error:[/red] {safe(seen)}")
                raise typer.Exit(1) from None
        except (OSError, http.client.HTTPException, ValueError) as e:
            # unreachable, a connection closed without an answer (a server restarting), a read timed out, an
            # answer that is not JSON: all may pass, so waited out like a node not registered yet
            why = e.reason if isinstance(e, urllib.error.URLError) else f"{type(e).__name__}: {e}"
            seen = f"cannot get an answer from the management API at {admin}: {why}"
        if time.monotonic() >= deadline:
            console.print(f"[red]error:[/red] gave up after {timeout:g} s: {safe(seen)}")
            raise typer.Exit(1)
        time.sleep(0.5)


@nodes_cli.command("revoke")
def nodes_revoke(
    node: str,
    serial: Annotated[str, typer.Option(help="revoke only this certificate (hex serial; `ctl nodes --json`)")] = "",
    reason: Annotated[str, typer.Option(help="why, for the event log")] = "",
    admin: AdminOpt = DEFAULT_ADMIN,
) -> None:
    """Cut a node off: its heartbeats are refused from now on and its replicas are rebuilt elsewhere. With
    --serial, only that certificate is refused (a stolen one), and a renewed certificate still works."""
    out = call(admin, "POST", f"/api/nodes/{urllib.parse.quote(node, safe='')}/revoke",
               {"serial": serial, "reason": reason})
    console.print(safe(out["message"]), highlight=False)


@ctl.command()
def status(admin: AdminOpt = DEFAULT_ADMIN, as_json: JsonOpt = False) -> None:
    """Capacity per GPU class, free whole nodes per fabric, replicas, idle replicas and usage."""
    s = call(admin, "GET", "/api/status")
    if json_out(s, as_json):
        return
    console.print(f"nodes: {s['nodes_live']} live of {s['nodes_total']}")
    t = Table("GPU class", "total", "used", "free", "faulty", title="capacity")
    for c in s["capacity"]:
        t.add_row(safe(c["gpu_class"]), str(c["total"]), str(c["used"]), str(c["free"]), str(c["faulty"]))
    console.print(t)
    t = Table("fabric", "nodes", "free whole nodes", "models held", title="fabrics")
    for f in s["fabrics"]:
        t.add_row(safe(f["fabric"]), str(f["nodes"]), str(f["free_whole_nodes"]),
                  safe(", ".join(f.get("models_held", []))) or "-")
    console.print(t)
    t = Table("model", "wanted", "ready", "why not", title="models")
    for m in s.get("models", []):
        t.add_row(safe(m["model"]), str(m["wanted"]), str(m["ready"]), safe(" | ".join(m["why"])) or "-")
    console.print(t)
    if s.get("adapters"):
        t = Table("adapter", "model", "ready replicas serving it", title="LoRA adapters")
        for row in adapter_rows([AdapterLine.model_validate(a) for a in s["adapters"]]):
            t.add_row(*(safe(x) for x in row))
        console.print(t)
    t = Table("replica", "model", "state", "nodes", "endpoint", "why", title="replicas")
    for r in s["replicas"]:
        t.add_row(
            safe(r["id"]),
            safe(r["model"]),
            safe(r["state"]),
            safe(", ".join(r["nodes"])) or "-",
            safe(r["endpoint"]) or "-",
            safe("; ".join(r.get("placement") or [])
                 or (f"{r['reason']}: {r['message']}" if r["message"] else (r["reason"] or ""))),
        )
    console.print(t)
    if s["usage"]:
        t = Table("key", "model", "in flight", "requests 24h", "requests", "prompt tokens", "completion tokens",
                  title="usage")
        for u in s["usage"]:
            t.add_row(
                safe(u.get("key_name") or u["key_id"]), safe(u["model"]), str(u.get("in_flight", 0)),
                str(u.get("day_requests", 0)), str(u["requests"]), str(u["prompt_tokens"]),
                str(u["completion_tokens"]),
            )
        console.print(t)


@ctl.command()
def models(admin: AdminOpt = DEFAULT_ADMIN, as_json: JsonOpt = False) -> None:
    """The catalog, how many replicas each model has ready, and where its weights stand (a hub id or a URL)."""
    rows = call(admin, "GET", "/api/models")
    if json_out(rows, as_json):
        return
    console.print(_model_table(rows))


def _weights_cell(w: dict[str, Any] | None) -> str:
    """What a fetched source resolved to (or why not) and each node's part; "-" for a source nodes do not fetch."""
    if w is None:
        return "-"
    return "\n".join(safe(ln) for ln in weights_lines(ModelWeights.model_validate(w)))


def _model_table(rows: list[dict[str, Any]]) -> Table:
    t = Table("model", "engine", "min", "max", "on demand", "GPUs/shard", "nodes", "ready/replicas", "weights")
    for m in rows:
        t.add_row(
            safe(m["name"]),
            safe(m["engine"]),
            str(m["min"]),
            str(m["max"]),
            "yes" if m["on_demand"] else "no",
            str(m["gpus_per_shard"]),
            str(m["nodes"]),
            f"{m['ready']}/{m['replicas']}",
            _weights_cell(m.get("weights")),
        )
    return t


@ctl.command()
def replicas(admin: AdminOpt = DEFAULT_ADMIN, as_json: JsonOpt = False) -> None:
    """Every replica with its shards and conditions."""
    rows = call(admin, "GET", "/api/replicas")
    if json_out(rows, as_json):
        return
    t = Table("replica", "model", "shards", "conditions")
    for r in rows:
        shards = "\n".join(safe(f"rank {a['rank']}: {a['node_id']} gpus {a['gpus']}") for a in r["assignments"])
        conds = "\n".join(safe(f"{c['type']}={c['status']} {c['reason']}: {c['message']}") for c in r["conditions"])
        t.add_row(safe(r["id"]), safe(r["model"]), shards or "-", conds or "-")
    console.print(t)


@ctl.command()
def explain(model: str, admin: AdminOpt = DEFAULT_ADMIN, as_json: JsonOpt = False) -> None:
    """Why a model's last placement failed, or where it went."""
    out = call(admin, "GET", f"/api/explain/{urllib.parse.quote(model, safe='')}")
    if json_out(out, as_json):
        return
    for line in model_explanation_lines(ModelExplanation.model_validate(out)):
        console.print(safe(line), highlight=False)


@ctl.command()
def events(admin: AdminOpt = DEFAULT_ADMIN, limit: int = 50) -> None:
    """The log of what changed."""
    import datetime as dt

    for e in call(admin, "GET", f"/api/events?limit={limit}"):
        when = dt.datetime.fromtimestamp(e["at"], tz=dt.UTC).strftime("%H:%M:%S")
        console.print(f"{when} {safe(e['message'])}", highlight=False)


@keys_cli.command("revoke")
def keys_revoke(
    key_id: Annotated[str | None, typer.Argument(help="the key's id (`ctl keys list`)")] = None,
    name: Annotated[str | None, typer.Option("--name", help="revoke every live key with this name")] = None,
    admin: AdminOpt = DEFAULT_ADMIN,
) -> None:
    """Revoke one key by id, or with --name every live key of that name (after a rotation there can be several)."""
    if (key_id is None) == (name is None):
        console.print("[red]error:[/red] give a key id, or --name NAME, not both")
        raise typer.Exit(2)
    if key_id is not None:
        out = call(admin, "DELETE", f"/api/keys/{urllib.parse.quote(key_id, safe='')}")
    else:
        out = call(admin, "POST", "/api/keys/revoke", {"name": name})
    if out.get("already_revoked"):
        console.print(f"key {safe(key_id)} was already revoked")
        return
    ids = out["revoked"]
    console.print(f"revoked {len(ids)} key(s): {safe(', '.join(ids)) or 'none live'}")


@ctl.command("engine-check")
def engine_check(
    engine: Annotated[str, typer.Option(help="llamacpp, vllm or sglang")] = "llamacpp",
    binary: Annotated[str | None, typer.Option(help="the engine's executable (default: the newest build installed "
                                                    "under --install-dir)")] = None,
    install_dir: Annotated[str, typer.Option(help="where the agent installs engines")] = "/var/lib/llmgw-agent/engines",
    help_file: Annotated[str | None, typer.Option(help="check a stored --help text instead of running the engine "
                                                       "(SGLang, which cannot run without its GPU build)")] = None,
) -> None:
    """Check every flag llmgw would ever pass the engine (multi-node included) against the engine's own --help."""
    import asyncio

    from llmgw.agent.engines import installable
    from llmgw.agent.installs.engine_check import check_flags
    from llmgw.agent.installs.probe import engine_help, worker_problem
    from llmgw.agent.installs.recipes import newest_installed

    known = installable()
    if engine not in known:
        console.print(f"[red]unknown engine {safe(engine)}[/red]: {', '.join(known[:-1])} or {known[-1]}")
        raise typer.Exit(2)
    worker = None
    if help_file is not None:
        try:
            text = Path(help_file).read_text(errors="replace")
        except OSError as e:
            console.print(f"[red]cannot read {safe(help_file)}: {safe(e.strerror or str(e))}[/red]")
            raise typer.Exit(1) from None
        where = help_file
    else:
        binary = binary or newest_installed(Path(install_dir), engine)
        if binary is None:
            console.print(f"[red]no {engine} installed under {safe(install_dir)}[/red]; pass --binary or --help-file")
            raise typer.Exit(1)
        result, argv = asyncio.run(engine_help(engine, binary))
        text, where = result.output, " ".join(argv)
        if result.code != 0:
            console.print(f"[red]{safe(where)} failed:[/red] {safe(text.strip()[-500:])}")
            raise typer.Exit(1)
        worker = asyncio.run(worker_problem(engine, binary))
    report = check_flags(engine, text, multi_node=True)
    console.print(f"checked against: {safe(where)}")
    t = Table("flag", "in --help")
    for f in report.flags:
        t.add_row(f, "[red]missing[/red]" if f in report.missing else "[green]yes[/green]")
    console.print(t)
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    if worker is not None:
        state = "[green]runs[/green]" if not worker[1] else f"[red]cannot run[/red]: {safe(worker[1])}"
        console.print(f"multi-node worker {safe(worker[0])}: {state}")
        if worker[1]:
            raise typer.Exit(1)
    if not report.ok:
        console.print(f"[red]{len(report.missing)} flag(s) llmgw uses are not accepted by this {engine}[/red]")
        raise typer.Exit(1)
    console.print(f"all {len(report.flags)} flags accepted")


# keys with limits, and usage (cli/keys.py): registered last, so that they are listed after the commands above
keys_cli.command("create")(key_commands.keys_create)
keys_cli.command("update")(key_commands.keys_update)
keys_cli.command("list")(key_commands.keys_list)
ctl.command("usage")(key_commands.usage)
