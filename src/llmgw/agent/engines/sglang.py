"""SGLang: every rank runs launch_server with --nnodes/--node-rank; only rank 0 is given to clients."""

from __future__ import annotations

from llmgw.agent.engines.base import Launch, LaunchContext, nccl_env
from llmgw.wire.messages import ShardSpec


class SGLang:
    name = "sglang"

    def launch(self, spec: ShardSpec, ctx: LaunchContext) -> Launch:
        argv = [
            ctx.binary,
            "-m",
            "sglang.launch_server",
            "--model-path",
            ctx.model_path,
            "--served-model-name",
            spec.model,
            "--tp-size",
            str(max(len(spec.gpus), 1) * spec.world_size),
            "--host",
            ctx.host,
            "--port",
            str(spec.serve_port or 30000),
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
        return Launch(argv=argv, env=nccl_env(spec), serves_http=spec.rank == 0, health_path="/health")

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
        ]
