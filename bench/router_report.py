"""The router bench's report: the best of repeated cells, latency added over the direct call, the table of every
cell, the ratios between servers and the verdicts against the aims."""

from __future__ import annotations

from bench.router_load import Cell, fmt

AIMS = {"c_over_b_at_64": 0.70, "c_over_d_at_64": 20.0, "added_p50_c_minus_b_at_1_ms": 1.0}


def best_of(cells: list[Cell]) -> list[Cell]:
    """With --repeat, the run of each cell with the highest throughput: background noise only ever slows one down."""
    best: dict[tuple[str, str, bool, int], Cell] = {}
    for x in cells:
        k = (x.target, x.loop, x.stream, x.concurrency)
        if k not in best or x.rps > best[k].rps:
            best[k] = x
    return list(best.values())


def fill_added(cells: list[Cell]) -> None:
    direct = {(x.stream, x.concurrency): x for x in cells if x.target == "a"}
    for x in cells:
        d = direct.get((x.stream, x.concurrency))
        if d is not None and x.target != "a":
            x.added_p50_ms = x.p50_ms - d.p50_ms
            x.added_p99_ms = x.p99_ms - d.p99_ms


def table(cells: list[Cell]) -> str:
    rows = [
        "| server | loop | mode | conc | req/s | p50 ms | p99 ms | added p50 ms | added p99 ms | server CPU us/req "
        "| all CPU us/req | others (cores) | n | errors |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for x in sorted(cells, key=lambda x: (x.stream, x.concurrency, x.target, x.loop != "uvloop")):
        rows.append(
            f"| ({x.target}) {x.label} | {x.loop} | {'stream' if x.stream else 'whole'} | {x.concurrency} | "
            f"{x.rps:.0f} | {x.p50_ms:.2f} | {x.p99_ms:.2f} | {fmt(x.added_p50_ms, '.2f')} | "
            f"{fmt(x.added_p99_ms, '.2f')} | {fmt(x.server_cpu_us, '.0f')} | {fmt(x.total_cpu_us, '.0f')} | "
            f"{fmt(x.others_cores, '.2f')} | "
            f"{x.ok} | {x.errors} |"
        )
    return "\n".join(rows)


def ratios(cells: list[Cell], loops: list[str]) -> tuple[str, list[str]]:
    by = {(x.target, x.loop, x.stream, x.concurrency): x for x in cells}
    d_loop = next((x.loop for x in cells if x.target == "d"), "")
    rows = [
        "| (b),(c) loop | mode | conc | (c)/(b) req/s | (c)/(b) by CPU | (p)/(b) req/s | (l)/(b) req/s "
        "| (g)/(c) req/s | (g)/(c) by CPU | (c)/(d) req/s | added p50 (c)-(b) ms | added p99 (c)-(b) ms "
        "| server CPU us/req (c) vs (b) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts: list[str] = []
    for loop in loops:
        for stream in (False, True):
            for c in sorted({x.concurrency for x in cells}):
                rc, rb = by.get(("c", loop, stream, c)), by.get(("b", loop, stream, c))
                rd = by.get(("d", d_loop, stream, c))
                rp = by.get(("p", loop, stream, c))
                pb = rp.rps / rb.rps if rp and rb else None
                rl = by.get(("l", loop, stream, c))
                lb = rl.rps / rb.rps if rl and rb else None
                rg = by.get(("g", loop, stream, c))
                if rc is None:
                    continue
                cb = rc.rps / rb.rps if rb else None
                gc = rg.rps / rc.rps if rg and rc.rps else None
                gc_cpu = rc.total_cpu_us / rg.total_cpu_us if rg and rg.total_cpu_us and rc.total_cpu_us else None
                cb_cpu = rb.total_cpu_us / rc.total_cpu_us if rb and rb.total_cpu_us and rc.total_cpu_us else None
                cd = rc.rps / rd.rps if rd and rd.rps else None
                p50 = rc.p50_ms - rb.p50_ms if rb else None
                p99 = rc.p99_ms - rb.p99_ms if rb else None
                cpu = f"{fmt(rc.server_cpu_us, '.0f')} vs {fmt(rb.server_cpu_us, '.0f')}" if rb else "-"
                mode = "stream" if stream else "whole"
                rows.append(
                    f"| {loop} | {mode} | {c} | {fmt(cb, '.2f')} | {fmt(cb_cpu, '.2f')} | {fmt(pb, '.2f')} | "
                    f"{fmt(lb, '.2f')} | {fmt(gc, '.2f')} | {fmt(gc_cpu, '.2f')} | "
                    f"{fmt(cd, '.1f')} | "
                    f"{fmt(p50, '.3f')} | {fmt(p99, '.3f')} | {cpu} |"
                )
                if c == 64 and cb is not None:
                    verdicts.append(
                        verdict(
                            f"{loop} {mode} c=64: (c)/(b) = {cb:.2f} measured, {fmt(cb_cpu, '.2f')} by CPU",
                            cb >= AIMS["c_over_b_at_64"],
                            f">= {AIMS['c_over_b_at_64']:.2f}",
                        )
                    )
                if c == 64 and cd is not None:
                    verdicts.append(
                        verdict(
                            f"{loop} {mode} c=64: (c)/(d) = {cd:.1f}",
                            cd >= AIMS["c_over_d_at_64"],
                            f">= {AIMS['c_over_d_at_64']:.0f}",
                        )
                    )
                if c == 1 and p50 is not None:
                    verdicts.append(
                        verdict(
                            f"{loop} {mode} c=1: added p50 (c)-(b) = {p50:.3f} ms",
                            p50 < AIMS["added_p50_c_minus_b_at_1_ms"],
                            f"< {AIMS['added_p50_c_minus_b_at_1_ms']:.0f} ms",
                        )
                    )
    return "\n".join(rows), verdicts


def verdict(what: str, ok: bool, aim: str) -> str:
    return f"{'MET   ' if ok else 'MISSED'} {what} (aim {aim})"

