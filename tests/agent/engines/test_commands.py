"""Building a command is pure: same spec and context, same argv and env."""

from __future__ import annotations

from llmgw.agent.engines import ADAPTERS, LaunchContext
from llmgw.agent.engines.llamacpp import LlamaCpp
from llmgw.agent.engines.sim import Sim
from llmgw.wire.messages import ShardSpec

CTX = LaunchContext(binary="/opt/llama/bin/llama-server", model_path="/m/model.gguf", host="10.0.0.5")


def spec(**kw: object) -> ShardSpec:
    base: dict[str, object] = dict(
        replica_id="r1", model="m", engine="llamacpp", source="/m/model.gguf", rank=0, world_size=1, serve_port=20000
    )
    base.update(kw)
    return ShardSpec.model_validate(base)


def test_llamacpp_single_node_on_cpu() -> None:
    launch = LlamaCpp().launch(spec(args=["-c", "4096"]), CTX)
    assert launch.argv == [
        "/opt/llama/bin/llama-server",
        "-m",
        "/m/model.gguf",
        "--host",
        "10.0.0.5",
        "--port",
        "20000",
        "--alias",
        "m",
        "-t",
        "1",
        "-np",
        "1",
        "--metrics",
        "-c",
        "4096",
    ]
    assert launch.serves_http and launch.env == {}


def test_llamacpp_multi_node_leader_offloads_to_worker_rpc_servers() -> None:
    s = spec(
        world_size=3,
        rendezvous_port=20001,
        gpus=[0, 1],
        peer_addresses=["10.0.0.5", "10.0.0.6", "10.0.0.7"],
        fabric_adapters=["mlx5_0", "mlx5_1"],
    )
    leader = LlamaCpp().launch(s, CTX)
    assert leader.argv[leader.argv.index("--rpc") + 1] == "10.0.0.6:20002,10.0.0.7:20003"
    assert "-ngl" in leader.argv
    assert leader.env == {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "CUDA_VISIBLE_DEVICES": "0,1"}
    worker = LlamaCpp().launch(s.model_copy(update={"rank": 2, "serve_port": None}), CTX)
    assert worker.argv == ["/opt/llama/bin/ggml-rpc-server", "-H", "10.0.0.5", "-p", "20003"]
    assert not worker.serves_http


def test_llamacpp_ranks_behind_the_agents_tunnels() -> None:
    """Given loopback ports (as every agent gives them), no rank of llama.cpp listens on the network: the workers'
    RPC servers bind loopback behind a tunnel's end, and the leader reaches them through loopback tunnels."""
    s = spec(world_size=3, rendezvous_port=20001, peer_addresses=["10.0.0.5", "10.0.0.6", "10.0.0.7"])
    ctx = LaunchContext(binary="/opt/llama/bin/llama-server", model_path="/m/x.gguf", host="10.0.0.5",
                        serve_port=41000, peer_tunnels=(0, 41001, 41002))
    leader = LlamaCpp().launch(s, ctx)
    assert leader.argv[leader.argv.index("--rpc") + 1] == "127.0.0.1:41001,127.0.0.1:41002"
    assert leader.argv[leader.argv.index("--host") + 1] == "127.0.0.1" and leader.http_port == 41000
    assert leader.tunnels_out == ((41001, "10.0.0.6", 20002), (41002, "10.0.0.7", 20003))
    worker = LlamaCpp().launch(s.model_copy(update={"rank": 2, "serve_port": None}), ctx)
    assert worker.argv == ["/opt/llama/bin/ggml-rpc-server", "-H", "127.0.0.1", "-p", "41000"]
    assert worker.tunnel_in == (20003, 41000) and not worker.serves_http


def test_sim_workers_serve_nothing_and_know_their_leader() -> None:
    s = spec(engine="sim", world_size=2, rendezvous_port=21001, leader_address="10.0.0.9")
    ctx = LaunchContext(binary="/usr/bin/python3", model_path="org/m", host="10.0.0.5")
    leader = Sim().launch(s, ctx)
    assert leader.serves_http and "--port" in leader.argv
    worker = Sim().launch(s.model_copy(update={"rank": 1, "serve_port": None}), ctx)
    assert not worker.serves_http and "--port" not in worker.argv
    assert worker.argv[worker.argv.index("--leader-address") + 1] == "10.0.0.9"


def test_vllm_and_sglang_multi_node_ranks() -> None:
    s = spec(engine="vllm", world_size=2, gpus=[0, 1, 2, 3], leader_address="10.0.0.9", rendezvous_port=29500)
    v0 = ADAPTERS["vllm"].launch(s, CTX)
    v1 = ADAPTERS["vllm"].launch(s.model_copy(update={"rank": 1}), CTX)
    assert v0.serves_http and "--headless" not in v0.argv
    assert not v1.serves_http and "--headless" in v1.argv
    assert v1.argv[v1.argv.index("--master-addr") + 1] == "10.0.0.9"
    g1 = ADAPTERS["sglang"].launch(s.model_copy(update={"engine": "sglang", "rank": 1}), CTX)
    assert g1.argv[g1.argv.index("--dist-init-addr") + 1] == "10.0.0.9:29500"
    assert g1.argv[g1.argv.index("--tp-size") + 1] == "8"


def test_launch_is_deterministic() -> None:
    for name, adapter in ADAPTERS.items():
        s = spec(engine=name, world_size=2, peer_addresses=["a", "b"], leader_address="a", rendezvous_port=1)
        assert adapter.launch(s, CTX) == adapter.launch(s, CTX)


def test_engines_with_a_fixed_number_of_slots_say_how_many() -> None:
    assert LlamaCpp().launch(spec(), CTX).slots == 1
    assert LlamaCpp().launch(spec(args=["--parallel", "4"]), CTX).slots == 4  # a model's own args win
    sim = spec(engine="sim", args=["--max-running", "2"])
    assert Sim().launch(sim, LaunchContext(binary="python", model_path="m", host="h")).slots == 2
    assert Sim().launch(spec(engine="sim"), LaunchContext(binary="python", model_path="m", host="h")).slots is None
    assert ADAPTERS["vllm"].launch(spec(engine="vllm"), CTX).slots is None  # batches: no fixed number


def test_the_rank_an_engine_says_it_lost_is_read_from_its_words_within_its_group() -> None:
    from llmgw.agent.engines.base import Launch
    from llmgw.agent.engines.sim import LOST_PEER

    launch = Launch(argv=["x"], lost_peer=LOST_PEER)
    assert launch.peer_lost("sim[rank 0]: collective broken: worker rank 3 disconnected; exiting", 4) == 3
    assert launch.peer_lost("sim[rank 2]: lost the leader: leader 10.0.0.1:9 closed the connection", 4) == 0
    assert launch.peer_lost("worker rank 4 disconnected", 4) is None  # outside the group: not believed
    assert launch.peer_lost("worker rank 99999999999999999999 disconnected", 4) is None
    assert launch.peer_lost("exited with code 139", 4) is None
    assert Launch(argv=["x"]).peer_lost("worker rank 1 disconnected", 2) is None  # an engine that says nothing


def test_vllm_and_sglang_load_a_fetched_model_directory_with_their_hub_access_off() -> None:
    """A hub model the node fetched is given as its directory: the engine must not download anything itself
    (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE); a bare hub id it fetches itself keeps its access."""
    fetched = LaunchContext(binary="/opt/e/bin/vllm", model_path="/var/lib/llmgw-weights/hub/org--m/" + "a" * 40,
                            host="10.0.0.5")
    for name in ("vllm", "sglang"):
        env = ADAPTERS[name].launch(spec(engine=name), fetched).env
        assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1", name
        bare = LaunchContext(binary="/opt/e/bin/vllm", model_path="Qwen/Qwen3-8B", host="10.0.0.5")
        assert "HF_HUB_OFFLINE" not in ADAPTERS[name].launch(spec(engine=name), bare).env, name
