"""The engine interface: argv and env for a shard, which rank serves HTTP, how health is probed."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Protocol

from llmgw.agent.engines.gauges import Gauges
from llmgw.wire.messages import ShardSpec

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class LaunchContext:
    """What the node knows that the control plane does not: paths and its own address."""

    binary: str  # the engine's executable (for sim: the Python interpreter)
    model_path: str  # the source resolved on this node
    host: str  # the node's address: what ranks bind and tell each other
    threads: int = 1
    # where the serving rank's HTTP server binds: loopback, behind the agent's gate (agent/gate.py), which alone
    # listens on the replica's port at the node's address. Port 0: the replica's own (spec.serve_port) at `host`
    serve_host: str = LOOPBACK
    serve_port: int = 0
    # by rank: a loopback port that reaches that rank's peer server through the agents' tunnel (agent/tunnel.py),
    # for engines whose ranks talk without authentication (llama.cpp's RPC). Empty: peers' addresses as they are
    peer_tunnels: tuple[int, ...] = ()
    key_file: str = ""  # where a secret file for this shard may be written (0600), for engines that read one
    adapters: tuple[str, ...] = ()  # each of spec.adapters' file on this node, in its order (agent/adapter_files.py)


# The environment variable through which sim (and the SGLang shim) receive the replica's secret. An environment is
# readable only by the process's owner; a command line is readable by every user of the machine.
KEY_ENV = "LLMGW_ENGINE_KEY"


@dataclass(frozen=True)
class Loopback:
    """Loopback ports the supervisor picked for one shard: where its engine serves behind the gate, and one per
    peer rank through which to reach that rank (by rank; its own entry unused)."""

    engine: int = 0
    peers: tuple[int, ...] = ()


def http_bind(spec: ShardSpec, ctx: LaunchContext) -> tuple[str, int]:
    """Where the serving rank's HTTP server binds: behind the gate, or (no gate port given) the replica's port."""
    if ctx.serve_port:
        return ctx.serve_host, ctx.serve_port
    return ctx.host, spec.serve_port or 0


@dataclass(frozen=True)
class WakeStep:
    """One call of an engine's wake: a POST of `body` (JSON, "" none) to `path`, which succeeded when it answered 200
    and, where `field` is named, its JSON answer gives `field` the value `value`."""

    path: str
    body: str = ""
    field: str = ""
    value: object = None


@dataclass(frozen=True)
class SleepControl:
    """How an engine started able to sleep is put to sleep, woken and asked (vLLM's routes; the sim's alike)."""

    sleep_path: str = "/sleep?level={level}"
    wake_path: str = "/wake_up"
    state_path: str = "/is_sleeping"  # answers {"is_sleeping": bool, ...}
    # the field of state_path's answer giving the GPU memory it still holds, read after a sleep to see it was
    # freed ("": the engine says none, and the driver's per-process accounting is read instead, where it can be)
    memory_field: str = ""
    # the wake from level 2, for an engine whose level-2 sleep discards the weights: a bare wake_path brings back
    # only their memory, and it answers, wrongly. (): wake_path serves every level
    deep_wake: tuple[WakeStep, ...] = ()


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    serves_http: bool = False
    http_port: int = 0  # the port its HTTP server binds (http_bind): behind the gate, a loopback one
    # a peer server reached through the tunnel: (the port at the node's address, the loopback port it binds)
    tunnel_in: tuple[int, int] | None = None
    # tunnels to peers' servers: (loopback port the engine is given, peer's address, peer's tunnel port)
    tunnels_out: tuple[tuple[int, str, int], ...] = ()
    health_path: str = "/health"
    # where the engine lists what it serves: healthy and listing no model is not ready ("" skips the check)
    models_path: str = "/v1/models"
    # files the supervisor writes (mode 0600) before starting the process and removes after it stops: secrets
    files: dict[str, str] = field(default_factory=dict)
    # where the engine serves its Prometheus metrics ("": it serves none), and which of them are its load
    metrics_path: str = ""
    # the engine drops its connection after a streamed answer without saying so (llama-server): routers open a
    # fresh one for each stream to it, since a request sent on the dropped one fails and cannot be retried
    closes_after_stream: bool = False
    gauges: Gauges = field(default_factory=Gauges)
    # requests the engine generates at once, when that is a fixed number (llama-server's slots); beyond it they
    # queue, which routers weigh against a cached prefix. None: many, batched (vLLM, SGLang)
    slots: int | None = None
    # where a one-token completion proves the engine answers requests, not just its health check ("": not asked)
    completion_path: str = "/v1/completions"
    # how the engine says a peer rank of its group went (a regular expression over its last log lines: its first
    # group is that rank; a match without one names the leader, rank 0), so the control plane can name the node
    # that went. "": it does not say
    lost_peer: str = ""
    sleep: SleepControl | None = None  # None: this engine, as launched, cannot sleep
    # how the engine says it refuses the way it was started, so restarting it the same way cannot help: (a regular
    # expression over its last log lines, the reason code the shard then fails with at once)
    refusals: tuple[tuple[str, str], ...] = ()

    def refused(self, words: str) -> tuple[str, str]:
        """(the reason code, the line that says it) of the first refusal its last words hold; ("", "") for none."""
        for pattern, code in self.refusals:
            line = next((ln.strip() for ln in words.splitlines() if re.search(pattern, ln)), None)
            if line is not None:
                return code, line[:500]
        return "", ""

    def peer_lost(self, words: str, world_size: int) -> int | None:
        """The rank whose going the engine gave as why it ended, from its last words; None: not said."""
        m = re.search(self.lost_peer, words) if self.lost_peer else None
        if m is None:
            return None
        got = next((g for g in m.groups() if g is not None), "0")
        rank = int(got) if got.isdigit() and len(got) < 5 else -1
        return rank if 0 <= rank < world_size else None


@dataclass(frozen=True)
class Packaging:
    """How an engine arrives on a node and how a node proves it runs: all of it engine knowledge."""

    kind: str  # "archive" (a release archive), "pip" (a virtual environment of its own), "builtin" (part of llmgw)
    executable: str = ""  # archive: the file's name in the archive; pip: its path inside the environment
    version_args: tuple[str, ...] = ("--version",)  # after the executable: proves it starts and says its version
    help_args: tuple[str, ...] = ("--help",)  # after the executable: where every flag llmgw passes is listed
    min_help_lines: int = 0  # a help text shorter than this is cut off: its missing flags prove nothing
    probe_env: tuple[tuple[str, str], ...] = ()  # environment for the checks (e.g. offline, CPU target)
    uninstall: tuple[str, ...] = ()  # pip: distributions removed after install because they break the engine
    # pip: (name, local version suffix) of a distribution the engine's CLI asks for under another name
    dist_alias: tuple[str, str] = ("", "")
    version_runner: str = ""  # run the version check with this file beside the executable (the env's python)
    # a program beside the executable that the ranks after the first run (llama.cpp's RPC server): engine-check
    # proves it runs too. "": the engine's every rank runs the executable
    worker: str = ""
    # archive: the backends beside the executable that it loads at run time (a glob): dlopen'ed, so `ldd` on the
    # executable does not show what they need, and the library check reads each of them too
    plugins: str = ""

    def version_argv(self, binary: str) -> list[str]:
        if self.version_runner:
            return [os.path.join(os.path.dirname(binary), self.version_runner), *self.version_args]
        return [binary, *self.version_args]

    def help_argv(self, binary: str) -> list[str]:
        return [binary, *self.help_args]


@dataclass(frozen=True)
class Bounds:
    """The body fields an engine reads, on any endpoint it serves, as the most it may generate per choice and as how
    many choices it generates: a router that reserves tokens for a request rewrites every one given (all engines')
    to the bound it reserved, so no field it left alone lets the engine generate more."""

    length: tuple[str, ...] = ("max_tokens", "max_completion_tokens")
    choices: tuple[str, ...] = ("n",)


class EngineAdapter(Protocol):
    name: str
    packaging: Packaging
    bounds: Bounds

    def launch(self, spec: ShardSpec, ctx: LaunchContext) -> Launch:
        """Pure: the command for one shard. No I/O."""
        ...

    def flags(self) -> list[str]:
        """Every flag the widest command (multi-node) would use, for engine-check against --help."""
        ...


def hub_offline_env(ctx: LaunchContext) -> dict[str, str]:
    """For an engine built on the Hugging Face libraries: a model given as a path on this node (a hub model the node
    fetched into a directory) is loaded from there, and the engine never reaches the hub itself; a bare hub id
    (`Qwen/Qwen3-8B`, fetched by the engine) leaves its access on."""
    if ctx.model_path.startswith(("/", "./", "../")):
        return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return {}


def nccl_env(spec: ShardSpec) -> dict[str, str]:
    env = {}
    if spec.fabric_adapters:
        env["NCCL_IB_HCA"] = ",".join(spec.fabric_adapters)
    if spec.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpus)
    return env
