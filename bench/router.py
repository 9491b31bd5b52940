"""Router benchmark: requests/s and added latency of llmgw's router against a bare proxy, LiteLLM and the ceiling.

One run measures, at concurrency 1, 16 and 64, non-streaming and streaming (32 chunks + usage + [DONE]):
  (a) the engine stand-in called directly: the ceiling;
  (b) a bare aiohttp proxy (bench/bare_proxy.py): no auth, routing or usage, i.e. what Python itself allows;
  (c) llmgw's router with API keys, routing and usage on;
  (p) the same with the model's routing policy `prefix` (the prompt hashed in blocks on every request);
  (l) the same with a key that has every limit (rates, concurrency, budget), set high enough to refuse nothing:
      every request reserved at admission and settled at its end;
  (g) the same with a key that has budgets in GPU-seconds and money (high enough to refuse nothing), over a store
      holding a month of chargeback's hourly charges for it and 49 other keys: the metering's cost per request
      against (c) in the same run;
  (d) LiteLLM's proxy, from its own virtual environment (skipped, with a message, when that is absent).
Each server runs in its own process (started here with sys.executable, bound to 127.0.0.1 on a free port, killed by
PID at the end); this process is only the load generator. (b) and (c) run on uvloop and on asyncio's own loop.

    .venv/bin/python -m bench.router                 # everything, about 3-4 minutes on 2 cores
    .venv/bin/python -m bench.router --repeat 2      # best of two rounds for (a)-(c), about 5.5 minutes
    .venv/bin/python -m bench.router --quick         # 0.5 s cells, no retries: under a minute
    .venv/bin/python -m bench.router --smoke         # (a)-(c), (p), (l), (g) on asyncio, c=8, 0.3 s cells: it runs
    .venv/bin/python -m bench.router --only a,c --loops asyncio --json /tmp/out.json

Results, method and what they showed: docs/benchmarks.md, "Router".

LiteLLM: python3.11 -m venv .bench-venv && .bench-venv/bin/pip install 'litellm[proxy]'
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import aiohttp

from bench.router_cpu import NOISY_CORES, background_load
from bench.router_llmgw import serve_router
from bench.router_load import SYSTEM, Cell, Target, grid
from bench.router_report import best_of, fill_added, ratios, table
from bench.router_servers import LITELLM_HOWTO, LITELLM_KEY, REPO, litellm_config, servers, wait_up


async def run(args: argparse.Namespace) -> list[Cell]:
    py = sys.executable
    cells: list[Cell] = []
    litellm_bin = Path(args.litellm_venv) / "bin" / "litellm"
    others = await background_load()
    print(
        f"before starting: other processes keep {others:.2f} of {os.cpu_count()} cores busy"
        + ("  <- the machine is not quiet: throughput will be low and noisy" if others > NOISY_CORES else ""),
        flush=True,
    )
    with servers() as ss:
        standin, _ = ss.start("stand-in", [py, "-m", "bench.standin", "--port", "{port}"])
        targets = [Target("a", "direct (stand-in)", "uvloop", standin, args.seconds)] if "a" in args.only else []
        for loop in args.loops:
            flag = [] if loop == "uvloop" else ["--no-uvloop"]
            if "b" in args.only:
                bare, _ = ss.start(
                    f"bare-{loop}", [py, "-m", "bench.bare_proxy", "--port", "{port}", "--upstream", "{standin}", *flag]
                )
                targets.append(Target("b", "bare aiohttp proxy", loop, bare, args.seconds))
            for key, policy, label in (("c", "least_loaded", "llmgw router"),
                                       ("p", "prefix", "llmgw router, prefix policy"),
                                       ("l", "least_loaded", "llmgw router, key with limits"),
                                       ("g", "least_loaded", "llmgw router, key with GPU budgets")):
                if key not in args.only:
                    continue
                key_file = ss.tmp / f"key-{key}-{loop}"
                router, _ = ss.start(
                    f"router-{key}-{loop}",
                    [
                        py,
                        "-m",
                        "bench.router",
                        "--serve-router",
                        "{port}",
                        "--upstream",
                        "{standin}",
                        "--key-file",
                        str(key_file),
                        "--db",
                        str(ss.tmp / f"router-{key}-{loop}.db"),
                        "--serve-routing",
                        policy,
                        *({"l": ["--serve-limited"], "g": ["--serve-gpu-budgets"]}.get(key, [])),
                        *flag,
                    ],
                )
                targets.append(Target(key, label, loop, router, args.seconds))
        await wait_up(standin, "/health", 30)
        for t in targets:
            await wait_up(t.srv, "/v1/models", 30)
            if t.key in ("c", "p", "l", "g"):
                t.srv.headers = {"Authorization": f"Bearer {(ss.tmp / f'key-{t.key}-{t.loop}').read_text()}"}
        for i in range(args.repeat):
            if args.repeat > 1:
                print(f"round {i + 1} of {args.repeat}", flush=True)
            cells += await grid(targets, standin, args)
        for t in targets:
            if t.srv is not standin:
                ss.stop(t.srv)
        if "d" in args.only:
            if not litellm_bin.exists():
                print(f"\n(d) LiteLLM skipped: {litellm_bin} not found. Create its venv with:\n  {LITELLM_HOWTO}\n")
            else:
                cfg = litellm_config(ss.tmp, standin.base)
                lite, _ = ss.start(
                    "litellm",
                    [
                        str(litellm_bin),
                        "--config",
                        str(cfg),
                        "--host",
                        "127.0.0.1",
                        "--port",
                        "{port}",
                        "--num_workers",
                        "1",
                    ],
                    env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"},
                )
                await wait_up(lite, "/health/liveliness", 180)
                lite.headers = {"Authorization": f"Bearer {LITELLM_KEY}"}
                cells += await grid(
                    [Target("d", "LiteLLM proxy", "uvicorn", lite, args.litellm_seconds)], standin, args
                )
    cells = best_of(cells)
    fill_added(cells)
    return cells


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Cells are bounded by time first: each should span a few of the router's usage flushes (one a second), whose
    # cost and pauses are part of what is measured. The request cap only bounds a very fast target.
    ap.add_argument("--requests", type=int, default=30000, help="requests per cell, at most (default 30000)")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per cell, at most (default 3)")
    ap.add_argument("--litellm-seconds", type=float, default=8.0, help="seconds per LiteLLM cell, at most (default 8)")
    ap.add_argument("--warmup", type=int, default=200, help="warm-up requests per cell, not measured (default 200)")
    ap.add_argument("--warmup-seconds", type=float, default=1.0, help="warm-up seconds per cell, at most (default 1)")
    ap.add_argument("--concurrency", default="1,16,64", help="comma-separated (default 1,16,64)")
    ap.add_argument("--only", default="a,b,c,p,l,g,d", help="which of a,b,c,p,l,g,d to run (default all)")
    ap.add_argument("--loops", default="uvloop,asyncio", help="event loops for (b) and (c): uvloop,asyncio")
    ap.add_argument("--litellm-venv", default=str(REPO / ".bench-venv"), help="venv holding litellm[proxy]")
    ap.add_argument("--repeat", type=int, default=1, help="rounds over the (a)-(c) grid; the best of each cell counts")
    ap.add_argument("--retries", type=int, default=2, help="re-measure a cell this often while the machine is busy")
    ap.add_argument("--retry-budget", type=float, default=60.0, help="seconds that re-measuring may add, in all")
    ap.add_argument("--quick", action="store_true", help="500 requests or 0.5 s per cell, no retries")
    ap.add_argument("--smoke", action="store_true", help="every server but LiteLLM, one loop, c=8, 0.3 s cells, "
                    "failing on any error: that it runs")
    ap.add_argument("--json", help="also write the cells here")
    ap.add_argument("--system-chars", type=int, default=0, help="a system prompt this long in every request")
    # internal: the process that serves (c)
    ap.add_argument("--serve-router", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--upstream", help=argparse.SUPPRESS)
    ap.add_argument("--key-file", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    ap.add_argument("--serve-routing", default="least_loaded", help=argparse.SUPPRESS)
    ap.add_argument("--serve-limited", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--serve-gpu-budgets", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-uvloop", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    args.only = set(args.only.split(","))
    SYSTEM["chars"] = args.system_chars
    args.loops = [x for x in args.loops.split(",") if x]
    if "uvloop" in args.loops:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            print("uvloop not installed: measuring asyncio's loop only")
            args.loops = ["asyncio"]
    if args.quick:
        args.requests, args.seconds, args.litellm_seconds, args.warmup, args.warmup_seconds = 500, 0.5, 2.0, 50, 0.3
        args.retries = 0
    if args.smoke:
        args.requests, args.seconds, args.warmup, args.warmup_seconds, args.retries = 300, 0.3, 20, 0.2, 0
        args.only, args.loops, args.concurrency, args.repeat = {"a", "b", "c", "p", "l", "g"}, ["asyncio"], [8], 1
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.serve_router is not None:
        serve_router(args.serve_router, args.upstream, Path(args.key_file), Path(args.db), not args.no_uvloop,
                     args.serve_routing, "gpu" if args.serve_gpu_budgets else "tokens" if args.serve_limited else "")
        return
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    started = time.monotonic()
    print(
        f"llmgw router bench: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, aiohttp {aiohttp.__version__}"
        f"; per cell at most {args.requests} requests or {args.seconds:g} s after a warm-up",
        flush=True,
    )
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        cells = runner.run(run(args))
    print("\n" + table(cells))
    rows, verdicts = ratios(cells, args.loops)
    print("\n" + rows + "\n")
    print("\n".join(verdicts))
    noisy = [x for x in cells if (x.others_cores or 0) > NOISY_CORES]
    if noisy:
        print(
            f"\nWARNING: in {len(noisy)} of {len(cells)} cells other processes took more than {NOISY_CORES} cores "
            f"(column 'others'): those throughputs are low. Rerun on a quiet machine, or with --repeat 2 or 3."
        )
    print(f"\ntotal {time.monotonic() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(x) for x in cells], indent=1))
    failed = [x for x in cells if x.errors or not x.ok]
    if args.smoke and failed:
        raise SystemExit(f"{len(failed)} cells had errors, the first: ({failed[0].target}) {failed[0].first_error}")


if __name__ == "__main__":
    main()
