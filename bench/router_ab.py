"""A/B of llmgw's router in one run: (c) and (l) of bench/router.py served from two source trees at once, against
one engine stand-in and one bare proxy (b), measured cell after cell in alternation (A, B in one round, B, A in the
next), so that both sides meet the same background. Each side's router is built by that side's own
bench/router.py (`--serve-router`), over that side's `llmgw`; the stand-in and (b) come from this tree.

    python -m bench.router_ab --a /tmp/base-tree --rounds 6 --concurrency 64
    python -m bench.router_ab --smoke      # both sides from this tree, two short rounds: that it runs

The figure to read is the paired one: per round, B's server CPU per request over A's, and its median over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
from dataclasses import asdict
from pathlib import Path

from bench.router import parse_args
from bench.router_load import Cell, Target, measure
from bench.router_servers import Servers, servers, wait_up

SIDES = ("A", "B")
KINDS = ("c", "l")


def start(ss: Servers, kind: str, side: str, src: Path) -> Target:
    """One router of `kind` (c: a key without limits, l: one with every limit) running `llmgw` from `src`."""
    key_file = ss.tmp / f"key-{kind}{side}"
    srv, _ = ss.start(
        f"router-{kind}{side}",
        [sys.executable, "-m", "bench.router", "--serve-router", "{port}", "--upstream", "{standin}",
         "--key-file", str(key_file), "--db", str(ss.tmp / f"router-{kind}{side}.db"), "--no-uvloop",
         *(["--serve-limited"] if kind == "l" else [])],
        env={"PYTHONPATH": os.pathsep.join((str(src / "src"), str(src)))},
        cwd=src,  # the side's own bench/router.py builds its router: the two trees' control planes differ
    )
    return Target(f"{kind}{side}", f"llmgw router {kind} {side}", "asyncio", srv, 0.0)


async def run(args: argparse.Namespace, trees: dict[str, Path], rounds: int) -> list[Cell]:
    cells: list[Cell] = []
    with servers() as ss:
        standin, _ = ss.start("stand-in", [sys.executable, "-m", "bench.standin", "--port", "{port}"])
        bare, _ = ss.start("bare", [sys.executable, "-m", "bench.bare_proxy", "--port", "{port}", "--upstream",
                                    "{standin}", "--no-uvloop"])
        routers = {(k, s): start(ss, k, s, trees[s]) for k in KINDS for s in SIDES}
        await wait_up(standin, "/health", 30)
        b = Target("b", "bare aiohttp proxy", "asyncio", bare, args.seconds)
        await wait_up(bare, "/v1/models", 30)
        for (k, s), t in routers.items():
            await wait_up(t.srv, "/v1/models", 30)
            t.seconds = args.seconds
            t.srv.headers = {"Authorization": f"Bearer {(ss.tmp / f'key-{k}{s}').read_text()}"}
        for r in range(rounds):
            order = SIDES if r % 2 == 0 else SIDES[::-1]
            print(f"round {r + 1} of {rounds} ({', '.join(order)})", flush=True)
            for stream in (False, True):
                for c in args.concurrency:
                    cells.append(await measure(b, standin, stream, c, args))
                    for k in KINDS:
                        for s in order:
                            cells.append(await measure(routers[(k, s)], standin, stream, c, args))
    return cells


def summary(cells: list[Cell], rounds: int) -> str:
    """Per kind and mode: each side's median server CPU per request and req/s over (b)'s, and the median over
    rounds of B's CPU per request over A's in the same round."""
    lines = ["| router | mode | conc | A us/req | B us/req | B/A us/req, paired (median; per round) "
             "| A (x)/(b) req/s | B (x)/(b) req/s |", "|---|---|---:|---:|---:|---|---:|---:|"]
    for k in KINDS:
        for stream in (False, True):
            for c in sorted({x.concurrency for x in cells}):
                def of(target: str, st: bool = stream, cc: int = c) -> list[Cell]:
                    return [x for x in cells if x.target == target and x.stream == st and x.concurrency == cc]
                a, b, bare = of(f"{k}A"), of(f"{k}B"), of("b")
                paired = [(y.server_cpu_us or 0) / (x.server_cpu_us or 1) for x, y in zip(a, b, strict=True)]
                rel = {s: statistics.median(x.rps / z.rps for x, z in zip(of(f"{k}{s}"), bare, strict=True))
                       for s in SIDES}
                lines.append(
                    f"| ({k}) | {'stream' if stream else 'whole'} | {c} "
                    f"| {statistics.median(x.server_cpu_us or 0 for x in a):.0f} "
                    f"| {statistics.median(x.server_cpu_us or 0 for x in b):.0f} "
                    f"| {statistics.median(paired):.3f} ({' '.join(f'{p:.2f}' for p in paired)}) "
                    f"| {rel['A']:.2f} | {rel['B']:.2f} |")
    return f"{rounds} rounds\n" + "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", type=Path, help="the A side's source tree (holding src/llmgw); --smoke: this one")
    ap.add_argument("--b", default=Path(__file__).resolve().parent.parent, type=Path, help="the B side's (this one)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--json", help="also write the cells here")
    own, rest = ap.parse_known_args()
    args = parse_args(rest)
    if own.a is None and not args.smoke:
        ap.error("--a is required (the A side's tree), except with --smoke")
    if args.smoke:  # both sides from this tree, two rounds of bench/router.py's short cells: it still runs
        own.a, own.rounds = own.a or own.b, 2
    trees = {"A": own.a.resolve(), "B": own.b.resolve()}
    cells = asyncio.run(run(args, trees, own.rounds))
    print("\n" + summary(cells, own.rounds))
    if own.json:
        Path(own.json).write_text(json.dumps([asdict(x) for x in cells], indent=1))


if __name__ == "__main__":
    main()
