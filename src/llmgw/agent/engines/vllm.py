"""vLLM: rank 0 runs the API server with Ray-less multi-node via torch distributed; others run headless."""

from __future__ import annotations

from llmgw.agent.engines.base import Launch, LaunchContext, nccl_env
from llmgw.wire.messages import ShardSpec


class VLLM:
    name = "vllm"

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
        if spec.rank == 0:
            argv += ["--host", ctx.host, "--port", str(spec.serve_port)]
        else:
            argv += ["--headless"]
        argv += spec.args
        env = nccl_env(spec)
        if spec.api_key:
            env["VLLM_API_KEY"] = spec.api_key  # vLLM reads it as --api-key; the environment is private, argv is not
        return Launch(argv=argv, env=env, serves_http=spec.rank == 0, health_path="/health")

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
        ]
