"""SGLang: every rank runs launch_server with --nnodes/--node-rank; only rank 0 is given to clients."""

from __future__ import annotations

from llmgw.agent.engines.base import (
    KEY_ENV,
    Bounds,
    Launch,
    LaunchContext,
    Packaging,
    http_bind,
    hub_offline_env,
    nccl_env,
)
from llmgw.agent.engines.gauges import Gauges
from llmgw.wire.messages import ShardSpec

# SGLang takes its key only as --api-key. Started through this shim, the key is added to sys.argv inside the process,
# so it never appears in /proc/PID/cmdline where every user of the node could read it.
KEY_SHIM = (
    "import os, runpy, sys; "
    f"sys.argv[1:1] = ['--api-key', os.environ.pop('{KEY_ENV}')]; "
    "runpy.run_module('sglang.launch_server', run_name='__main__', alter_sys=True)"
)

# /metrics, served only when started with --enable-metrics; token_usage is the fraction of KV cache tokens in use
GAUGES = Gauges(running=("sglang:num_running_reqs",), waiting=("sglang:num_queue_reqs",),
                kv_cache_usage=("sglang:token_usage",))


class SGLang:
    name = "sglang"
    # launched as the environment's python -m sglang.launch_server. Every flag below is in its --help as of 0.5.23
    # (2,813 lines; tests/fixtures/engines/sglang-0.5.23-launch-server-help.txt): --model-path, --served-model-name,
    # --tp-size, --host, --port, --nnodes, --node-rank, --dist-init-addr, --api-key, --enable-metrics
    # max_new_tokens: its native sampling parameters' name
    bounds = Bounds(length=("max_tokens", "max_completion_tokens", "max_output_tokens", "max_new_tokens"))
    packaging = Packaging(
        kind="pip", executable="bin/python",
        version_args=("-c", "import sglang; print('version:', sglang.__version__)"),
        help_args=("-m", "sglang.launch_server", "--help"), min_help_lines=1000,
    )

    def launch(self, spec: ShardSpec, ctx: LaunchContext) -> Launch:
        env = nccl_env(spec) | hub_offline_env(ctx)
        if spec.api_key:
            start = [ctx.binary, "-c", KEY_SHIM]
            env[KEY_ENV] = spec.api_key
        else:
            start = [ctx.binary, "-m", "sglang.launch_server"]
        host, port = http_bind(spec, ctx)
        argv = [
            *start,
            "--model-path",
            ctx.model_path,
            "--served-model-name",
            spec.model,
            "--tp-size",
            str(max(len(spec.gpus), 1) * spec.world_size),
            "--host",
            host,
            "--port",
            str(port or 30000),
            "--enable-metrics",
        ]
        if spec.world_size > 1:
            argv += [
                "--nnodes",
                str(spec.world_size),
                "--node-rank",
                str(spec.rank),
                "--dist-init-addr",
                f"{spec.leader_address}:{spec.rendezvous_port}",
            ]
        argv += spec.args
        return Launch(argv=argv, env=env, serves_http=spec.rank == 0, health_path="/health", metrics_path="/metrics",
                      gauges=GAUGES, http_port=(port or 30000) if spec.rank == 0 else 0)

    def flags(self) -> list[str]:
        return [
            "--model-path",
            "--served-model-name",
            "--tp-size",
            "--host",
            "--port",
            "--nnodes",
            "--node-rank",
            "--dist-init-addr",
            "--api-key",
            "--enable-metrics",
        ]
