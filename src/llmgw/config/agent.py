"""agent.yaml: the control planes to talk to and TLS files; everything else is discovered unless written."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from llmgw.config.places import check_allowed
from llmgw.config.types import HEARTBEAT_MAX_S, HEARTBEAT_MIN_S, ByteSize, ConfigPath, Duration, within
from llmgw.core.strict import Strict


class AgentTLS(Strict):
    ca: ConfigPath
    cert: ConfigPath
    key: ConfigPath


class FabricAttachment(Strict):
    name: str = Field(min_length=1)
    adapters: list[str] = Field(min_length=1)


class EngineOverride(Strict):
    path: ConfigPath


class AgentConfig(Strict):
    control_planes: list[str] = Field(min_length=1)
    tls: AgentTLS
    node_id: str | None = None  # default: hostname, which is also the certificate's CN
    address: str | None = None  # default: local address on the route to the control plane
    host_root: ConfigPath = "/"  # where /proc, /sys and /etc are read
    gpu_inventory: ConfigPath | None = None  # a simulated node's GPUs, standing in for NVML
    weights_dirs: list[ConfigPath] = []
    weights_dir: ConfigPath = "/var/lib/llmgw-weights"  # where fetched weights land; always looked in
    # most bytes of fetched weights kept in weights_dir; room is made by removing the least recently used files no
    # shard uses. Unset: the disk's free space is the only bound
    weights_budget: ByteSize | None = None
    max_weights_file: ByteSize = 2 * 1024**4  # no single weights file may be larger
    # the port this node serves the weights it holds on, to the nodes of its cluster (mutual TLS); 0: it does not
    peer_port: int = Field(default=7480, ge=0, le=65535)
    state_dir: ConfigPath = "/var/lib/llmgw-agent"
    fabrics: list[FabricAttachment] = []
    # engines named on purpose: used as they are (checked, never installed over); what is written wins
    engines: dict[str, EngineOverride] = {}
    # which engines this node runs: those the control plane names and this list holds are installed here; a
    # simulated node says [sim] so it never installs or claims a real engine
    probe_engines: list[str] = ["sim", "llamacpp", "vllm", "sglang"]
    install_dir: ConfigPath | None = None  # where engines are installed; default: state_dir/engines
    engine_python: str = "python3.11"  # what vLLM's and SGLang's environments are made from
    # the threads llama.cpp computes with (-t) where it runs on the CPU (its CPU build, the CPU share of a GPU one).
    # Unset: every core the agent may use (its CPU affinity), which is what one CPU shard on a node wants
    engine_threads: int | None = Field(default=None, ge=1, le=4096)
    max_download: ByteSize = 16 * 1024**3
    # where an origin of weights or engines may redirect this node besides public addresses: "host", "host:port"
    # or a network ("10.0.0.0/8"); a redirect to anything else private (loopback, link-local, ...) is refused
    redirects_allowed: list[str] = Field(default=[], max_length=256)
    apt_get: str = "apt-get"  # the OS package tools a build's packages are installed with
    dpkg_query: str = "dpkg-query"
    # a shard whose engine exits is started again after restart_backoff, doubling up to restart_backoff_max;
    # after max_restarts it fails, with its exit code and last log lines, and its replica is placed again
    restart_backoff: Duration = 10.0
    restart_backoff_max: Duration = 300.0
    max_restarts: int = Field(default=5, ge=0, le=1000)
    port_range: str = "20000-20999"
    # until the control plane names its own
    heartbeat_interval: Annotated[Duration, within(HEARTBEAT_MIN_S, HEARTBEAT_MAX_S)] = 3.0
    request_timeout: Annotated[Duration, within(0.1, 3600)] = 5.0

    @field_validator("control_planes")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        for u in v:
            if not u.startswith("https://"):
                raise ValueError(f"{u!r}: must be an https:// address (agents speak mutual TLS)")
        return v

    @field_validator("redirects_allowed")
    @classmethod
    def _places(cls, v: list[str]) -> list[str]:
        return check_allowed(v)

    @field_validator("port_range")
    @classmethod
    def _range(cls, v: str) -> str:
        m = re.match(r"^(\d+)-(\d+)$", v)
        if not m or not 1024 <= int(m.group(1)) <= int(m.group(2)) <= 65535:
            raise ValueError(f"{v!r}: must be LOW-HIGH within 1024-65535")
        return v

    def engines_dir(self) -> str:
        import os

        return self.install_dir or os.path.join(self.state_dir, "engines")

    def ports(self) -> tuple[int, int]:
        lo, hi = self.port_range.split("-")
        return int(lo), int(hi)
