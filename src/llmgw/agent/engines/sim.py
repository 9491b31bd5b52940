"""sim: llmgw's own stand-in engine. The leader waits for every worker before serving; workers serve nothing."""

from __future__ import annotations

import itertools

from llmgw.agent.engines.base import (
    KEY_ENV,
    Bounds,
    Launch,
    LaunchContext,
    Packaging,
    SleepControl,
    http_bind,
    nccl_env,
)
from llmgw.agent.engines.gauges import Gauges
from llmgw.agent.engines.vllm import DEEP_WAKE
from llmgw.wire.messages import ShardSpec

# the names llmgw.sim.server exports (the KV gauge only with a prefix cache: --cache-blocks)
GAUGES = Gauges(running=("sim:requests_running",), waiting=("sim:requests_waiting",),
                kv_cache_usage=("sim:kv_cache_usage_ratio",))

# the sim reports the memory it would hold in /is_sleeping's answer, and discards its weights at level 2 as vLLM
# does, to be woken as vLLM is (sim/sleep.py)
SLEEP = SleepControl(memory_field="gpu_memory_used_bytes", deep_wake=DEEP_WAKE)

# llmgw.sim.engine's words when its group broke: the leader names the worker that went, a worker its leader
LOST_PEER = r"worker rank (\d+) disconnected|lost the leader"


class Sim:
    name = "sim"
    packaging = Packaging(kind="builtin")
    bounds = Bounds()

    def launch(self, spec: ShardSpec, ctx: LaunchContext) -> Launch:
        argv = [
            ctx.binary,
            "-m",
            "llmgw.sim.engine",
            "--model",
            spec.model,
            "--rank",
            str(spec.rank),
            "--world-size",
            str(spec.world_size),
            "--host",
            ctx.host,
        ]
        port = 0
        if spec.rank == 0 and spec.serve_port:
            host, port = http_bind(spec, ctx)
            argv += ["--http-host", host, "--port", str(port)]
        if spec.world_size > 1:
            argv += ["--rendezvous-port", str(spec.rendezvous_port), "--leader-address", spec.leader_address]
        if spec.can_sleep:
            argv += ["--enable-sleep-mode"]
        argv += spec.args
        env = nccl_env(spec)
        if spec.api_key:
            env[KEY_ENV] = spec.api_key
        running = [int(v) for f, v in itertools.pairwise(argv) if f == "--max-running" and v.isdigit()]
        return Launch(argv=argv, env=env, serves_http=spec.rank == 0, health_path="/health", metrics_path="/metrics",
                      slots=running[-1] if running and running[-1] > 0 else None,
                      gauges=GAUGES, lost_peer=LOST_PEER, http_port=port,
                      sleep=SLEEP if spec.can_sleep and spec.rank == 0 else None)

    def flags(self) -> list[str]:
        return ["--model", "--rank", "--world-size", "--host", "--http-host", "--port", "--rendezvous-port",
                "--leader-address", "--enable-sleep-mode"]
