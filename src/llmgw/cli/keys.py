"""`ctl keys create/update/list` with limits and use, and `ctl usage`: tenants, over the management API."""

from __future__ import annotations

import re
import sys
import urllib.parse
from typing import Annotated, Any

import typer
from rich.table import Table

from llmgw.cli.admin_client import DEFAULT_ADMIN, AdminOpt, JsonOpt, call, console, json_out, safe

Rpm = Annotated[int | None, typer.Option("--rpm", help="requests per minute")]
Tpm = Annotated[int | None, typer.Option("--tpm", help="tokens (prompt + completion) per minute")]
Conc = Annotated[int | None, typer.Option("--concurrency", help="requests in flight at once")]
Budget = Annotated[str | None, typer.Option("--budget", help="tokens per period: N/day, N/month or N/total")]
GpuBudget = Annotated[str | None, typer.Option("--gpu-budget", help="GPU-seconds per period: N/day, N/month or "
                                               "N/total (the period is the token budget's too)")]
CostBudget = Annotated[str | None, typer.Option("--cost-budget", help="money per period, in chargeback.currency: "
                                                "N/day, N/month or N/total")]
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def limits(rpm: int | None, tpm: int | None, concurrency: int | None, budget: str | None,
           gpu_budget: str | None = None, cost_budget: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {k: v for k, v in (("rpm", rpm), ("tpm", tpm), ("concurrency", concurrency))
                           if v is not None}
    periods = set()
    decimal = r"[0-9]{1,13}(?:\.[0-9]{1,6})?"
    for flag, field, given, number, unit in (("--budget", "budget", budget, r"[0-9]{1,15}", "TOKENS"),
                                             ("--gpu-budget", "gpu_budget", gpu_budget, decimal, "GPU_SECONDS"),
                                             ("--cost-budget", "cost_budget", cost_budget, decimal, "MONEY")):
        if not given:
            continue
        m = re.fullmatch(rf"({number})/(day|month|total)", given.strip())
        if m is None:
            console.print(f"[red]error:[/red] {flag} must be {unit}/day, {unit}/month or {unit}/total, not "
                          f"{safe(given)}")
            raise typer.Exit(2)
        out[field] = int(m.group(1)) if field == "budget" else float(m.group(1))
        periods.add(m.group(2))
    if len(periods) > 1:
        console.print("[red]error:[/red] a key's budgets share one period: give them all per day, month or total")
        raise typer.Exit(2)
    if periods:
        out["budget_period"] = periods.pop()
    return out


def described(lim: dict[str, Any]) -> str:
    parts = [f"{lim[k]} {label}" for k, label in (("rpm", "req/min"), ("tpm", "tok/min"),
                                                  ("concurrency", "at once")) if lim.get(k)]
    if lim.get("budget"):
        parts.append(f"{lim['budget']} tok/{lim.get('budget_period', 'month')}")
    parts += [f"{lim[k]:g} {unit}/{lim.get('budget_period', 'month')}"
              for k, unit in (("gpu_budget", "GPU-s"), ("cost_budget", "money")) if lim.get(k)]
    return ", ".join(parts) or "none"


def used(use: dict[str, Any]) -> str:
    lim = use["limits"]
    parts = []
    if lim.get("rpm"):
        parts.append(f"{use['requests_left']} req left this minute")
    if lim.get("tpm"):
        parts.append(f"{use['tokens_left']} tok left this minute")
    if lim.get("concurrency"):
        parts.append(f"{use['in_flight']}/{lim['concurrency']} in flight")
    if lim.get("budget"):
        parts.append(f"{use['budget_used']}/{lim['budget']} tok this {lim.get('budget_period', 'month')}")
    if lim.get("gpu_budget"):
        parts.append(f"{use['gpu_used']:g}/{lim['gpu_budget']:g} GPU-s this {lim.get('budget_period', 'month')}")
    if lim.get("cost_budget"):
        parts.append(f"{use['cost_used']:g}/{lim['cost_budget']:g} {use['currency']} this "
                     f"{lim.get('budget_period', 'month')}")
    return "; ".join(parts) or "-"


def keys_create(
    name: Annotated[str, typer.Option("--name", help="who or what the key is for")],
    model: Annotated[list[str] | None, typer.Option("--model", help="allow only these models (repeatable)")] = None,
    rpm: Rpm = None, tpm: Tpm = None, concurrency: Conc = None, budget: Budget = None,
    gpu_budget: GpuBudget = None, cost_budget: CostBudget = None, admin: AdminOpt = DEFAULT_ADMIN,
) -> None:
    """Create a key, with its own limits if given (else the router's default_limits). Shown once; only its hash is
    kept."""
    body: dict[str, Any] = {"name": name, "models": model or []}
    lim = limits(rpm, tpm, concurrency, budget, gpu_budget, cost_budget)
    if lim:
        body["limits"] = lim
    out = call(admin, "POST", "/api/keys", body)
    console.print(f"key {safe(out['id'])} ({safe(out['name'])}), shown once:")
    print(out["key"])


def keys_update(
    key_id: Annotated[str, typer.Argument(help="the key's id (`ctl keys list`)")],
    rpm: Rpm = None, tpm: Tpm = None, concurrency: Conc = None, budget: Budget = None,
    gpu_budget: GpuBudget = None, cost_budget: CostBudget = None,
    default: Annotated[bool, typer.Option("--default-limits", help="drop its own limits: the router's default")]
    = False,
    admin: AdminOpt = DEFAULT_ADMIN,
) -> None:
    """Set a key's limits (those given; the others none), from its next request on."""
    lim = limits(rpm, tpm, concurrency, budget, gpu_budget, cost_budget)
    if default == bool(lim):
        console.print("[red]error:[/red] give limits (--rpm, --tpm, --concurrency, --budget, --gpu-budget, "
                      "--cost-budget) or --default-limits")
        raise typer.Exit(2)
    out = call(admin, "PATCH", f"/api/keys/{urllib.parse.quote(key_id, safe='')}", {"limits": lim or None})
    console.print(f"key {safe(out['id'])} ({safe(out['name'])}): limits {safe(described(out['use']['limits']))}")


def keys_list(admin: AdminOpt = DEFAULT_ADMIN, as_json: JsonOpt = False) -> None:
    """Keys, their limits (their own, or the default) and their use against them now."""
    rows = call(admin, "GET", "/api/keys")
    if json_out(rows, as_json):
        return
    t = Table("id", "name", "prefix", "models", "limits", "use", "revoked")
    for k in rows:
        lim = k["use"]["limits"]
        t.add_row(
            safe(k["id"]), safe(k["name"]), safe(k["prefix"]) + "…", safe(", ".join(k["models"])) or "all",
            safe(described(lim)) + ("" if k["use"]["own_limits"] else " (default)"), safe(used(k["use"])),
            "yes" if k["revoked_at"] else "no",
        )
    console.print(t)


def seconds(text: str) -> int:
    m = re.fullmatch(r"([0-9]{1,6})([smhd])", text.strip())
    if m is None:
        console.print(f"[red]error:[/red] --since must be like 30m, 24h or 7d, not {safe(text)}")
        raise typer.Exit(2)
    return int(m.group(1)) * UNITS[m.group(2)]


def usage(
    by: Annotated[str, typer.Option("--by", help="key (one row per key, its models summed; the operator's share "
                                                 "last) or model")] = "key",
    since: Annotated[str, typer.Option("--since", help="how far back: 30m, 24h, 7d (from the hour holding it)")]
    = "24h",
    as_csv: Annotated[bool, typer.Option("--csv", help="per hour, key and model, as CSV (for chargeback)")] = False,
    admin: AdminOpt = DEFAULT_ADMIN,
    as_json: JsonOpt = False,
) -> None:
    """Requests, tokens, GPU-seconds and their cost by key or by model since a time; --csv: per hour, key and
    model."""
    if by not in ("key", "model"):
        console.print("[red]error:[/red] --by must be key or model")
        raise typer.Exit(2)
    back = seconds(since)
    if as_csv:
        sys.stdout.write(call(admin, "GET", f"/api/usage.csv?since={back}", raw=True))
        return
    out = call(admin, "GET", f"/api/usage?by={by}&since={back}")
    if json_out(out, as_json):
        return
    t = Table(by, *(["name"] if by == "key" else []), "requests", "prompt tokens", "completion tokens",
              "GPU-s", "busy", "load", "idle", f"cost {safe(out.get('currency', ''))}",
              title=f"usage in the last {safe(since)}")
    total = dict.fromkeys(GPU_COLUMNS, 0.0)
    for r in out["rows"]:
        t.add_row(safe(r[by]), *([safe(r["name"])] if by == "key" else []), str(r["requests"]),
                  str(r["prompt_tokens"]), str(r["completion_tokens"]), *gpu_cells(r))
        total = {c: total[c] + float(r.get(c, 0.0)) for c in GPU_COLUMNS}
    if out["rows"]:
        t.add_section()
        t.add_row("total", *([""] if by == "key" else []), "", "", "", *gpu_cells(total))
    console.print(t)


GPU_COLUMNS = ("gpu_seconds", "busy_s", "load_s", "idle_s", "cost")


def gpu_cells(row: dict[str, Any]) -> list[str]:
    """GPU-seconds to a tenth, cost to four places (a few GPU-seconds cost a fraction of a cent)."""
    return [f"{float(row.get(c, 0.0)):.1f}" for c in GPU_COLUMNS[:4]] + [f"{float(row.get('cost', 0.0)):.4f}"]
