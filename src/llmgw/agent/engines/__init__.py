"""Engine adapters behind one small interface. Building a command is pure; running it is the supervisor's job."""

from __future__ import annotations

from llmgw.agent.engines.base import EngineAdapter, Launch, LaunchContext
from llmgw.agent.engines.llamacpp import LlamaCpp
from llmgw.agent.engines.sglang import SGLang
from llmgw.agent.engines.sim import Sim
from llmgw.agent.engines.vllm import VLLM

ADAPTERS: dict[str, EngineAdapter] = {a.name: a for a in (LlamaCpp(), Sim(), VLLM(), SGLang())}

__all__ = ["ADAPTERS", "EngineAdapter", "Launch", "LaunchContext"]
