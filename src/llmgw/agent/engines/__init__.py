"""Engine adapters behind one small interface. Building a command is pure; running it is the supervisor's job."""

from __future__ import annotations

from llmgw.agent.engines.base import Bounds, EngineAdapter, Launch, LaunchContext
from llmgw.agent.engines.llamacpp import LlamaCpp
from llmgw.agent.engines.sglang import SGLang
from llmgw.agent.engines.sim import Sim
from llmgw.agent.engines.vllm import VLLM

ADAPTERS: dict[str, EngineAdapter] = {a.name: a for a in (LlamaCpp(), Sim(), VLLM(), SGLang())}


def builtin(name: str) -> bool:
    """Whether the engine is part of llmgw (sim): it runs wherever the agent runs and is never installed."""
    adapter = ADAPTERS.get(name)
    return adapter is not None and adapter.packaging.kind == "builtin"


def installable() -> list[str]:
    """The engines a node installs and checks (every one not part of llmgw), in a stable order."""
    return [name for name in ADAPTERS if not builtin(name)]

__all__ = ["ADAPTERS", "Bounds", "EngineAdapter", "Launch", "LaunchContext", "builtin", "installable"]
