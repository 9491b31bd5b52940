"""What `llmgw dev` prints once it is up: where everything is, and one command for each thing it shows."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol


class NodeShown(Protocol):
    @property
    def id(self) -> str: ...


class PlanShown(Protocol):
    """What the banner reads of a dev cluster's plan (llmgw.dev.cluster.ClusterPlan)."""

    @property
    def nodes(self) -> Sequence[NodeShown]: ...
    @property
    def models(self) -> list[dict[str, Any]]: ...
    @property
    def admin_port(self) -> int: ...
    @property
    def admin(self) -> str: ...
    @property
    def api(self) -> str: ...
    @property
    def token_file(self) -> Path: ...


def _admin_env(plan: PlanShown) -> str:
    admin = "" if plan.admin_port == 9090 else f"LLMGW_ADMIN={plan.admin} "
    return f"export {admin}LLMGW_ADMIN_TOKEN_FILE={plan.token_file}"


def banner(plan: PlanShown, key: str, workdir: Path) -> str:
    return f"""
llmgw dev is up (state and logs in {workdir})
  OpenAI API:      {plan.api}/v1
  management API:  {plan.admin}   (llmgw ctl nodes | status | models | explain MODEL)
                   ctl needs the operator token: {_admin_env(plan)}
  dashboard:       {plan.admin}/admin   (paste the operator token from {plan.token_file})
  API key:         {key}

  nodes: {", ".join(n.id for n in plan.nodes)}; models: {", ".join(m["name"] for m in plan.models)}
  smollm2 runs on a real llama-server on this CPU; sim-405b spans two nodes of one fabric; sim-8b loads on demand.
{_showcase(plan, key)}
First request (once 'ready: smollm2' is printed below):
  curl -s {plan.api}/v1/chat/completions -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' \\
    -d '{{"model": "smollm2", "messages": [{{"role": "user", "content": "Say hello in five words."}}]}}'
Streamed:
  curl -sN {plan.api}/v1/chat/completions -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' \\
    -d '{{"model": "smollm2", "stream": true, "messages": [{{"role": "user", "content": "Count to five."}}]}}'
Ctrl-C stops everything.
"""


def _showcase(plan: PlanShown, key: str) -> str:
    """What else the dev cluster shows, one command each, every command line indented four spaces
    (tests/integration/test_dev.py runs them)."""
    chat = (f"curl -s {plan.api}/v1/chat/completions -H 'Authorization: Bearer {key}' "
            "-H 'Content-Type: application/json' -d '{{\"model\": \"{}\", \"max_tokens\": 16, "
            "\"messages\": [{{\"role\": \"user\", \"content\": \"Hi!\"}}]}}'")
    adapters = [a["name"] for m in plan.models for a in m.get("adapters", [])]
    lines = ["What else it shows (ctl needs the operator token, as above):"]
    if adapters:
        lines += [f"  a LoRA adapter served as a model ({adapters[0]}, over smollm2):",
                  f"    {chat.format(adapters[0])}"]
    lines += [
        "  a model that sleeps when idle (sim-8b: loaded on demand, asleep 20 s after its last request, its GPUs",
        "  free; the next request wakes it): ask it, then look a little later",
        f"    {chat.format('sim-8b')}",
        "    llmgw ctl status",
        "  a pinned model above the others (sim-405b, priority 500: it may take their GPUs, never they its):",
        "    llmgw ctl explain sim-405b",
        "  GPU time and its cost per key (charged in 10 s windows, 20 s after they end: half a minute after a",
        "  request):",
        "    llmgw ctl usage --by key",
    ]
    return "\n".join(lines) + "\n"
