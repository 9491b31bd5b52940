"""Runs shard processes: start, health-probe, restart with backoff, stop; reports each shard's state."""

from llmgw.agent.supervisor.supervisor import Supervisor

__all__ = ["Supervisor"]
