"""llama.cpp: llama-server leads; with several nodes the others run ggml-rpc-server and the leader offloads to them."""

from __future__ import annotations

import os

from llmgw.agent.engines.base import Launch, LaunchContext, nccl_env
from llmgw.wire.messages import ShardSpec

DEFAULT_RPC_PORT = 50052


def rpc_port(spec: ShardSpec, rank: int) -> int:
    """A worker's RPC port: the replica's rendezvous port plus the worker's rank."""
    return (spec.rendezvous_port or DEFAULT_RPC_PORT) + rank


class LlamaCpp:
    name = "llamacpp"

    def launch(self, spec: ShardSpec, ctx: LaunchContext) -> Launch:
        env = nccl_env(spec)
        if spec.rank > 0:
            rpc = os.path.join(os.path.dirname(ctx.binary), "ggml-rpc-server")
            return Launch(argv=[rpc, "-H", ctx.host, "-p", str(rpc_port(spec, spec.rank))], env=env)
        argv = [
            ctx.binary,
            "-m",
            ctx.model_path,
            "--host",
            ctx.host,
            "--port",
            str(spec.serve_port),
            "--alias",
            spec.model,
            "-t",
            str(ctx.threads),
            "-np",
            "1",
            "--metrics",
        ]
        if spec.gpus or spec.world_size > 1:
            argv += ["-ngl", "99"]
        if spec.world_size > 1:
            workers = [f"{addr}:{rpc_port(spec, rank)}" for rank, addr in enumerate(spec.peer_addresses) if rank > 0]
            argv += ["--rpc", ",".join(workers)]
        files = {}
        if spec.api_key:
            # a file, not --api-key: the command line is readable by every user of the node
            argv += ["--api-key-file", ctx.key_file]
            files[ctx.key_file] = spec.api_key + "\n"
        argv += spec.args
        return Launch(argv=argv, env=env, serves_http=True, health_path="/health", files=files)

    def flags(self) -> list[str]:
        return ["-m", "--host", "--port", "--alias", "-t", "-np", "--metrics", "-ngl", "--rpc", "--api-key-file"]
