"""The OpenAI API listener's limits, as the server, each router worker and the router bench start it."""

from __future__ import annotations

from llmgw.config.server import ConnectionLimits
from llmgw.net.listeners import Limiter, per_client, refusal
from llmgw.router.errors import openai_error


def api_refusal() -> bytes:
    body = openai_error(503, "too many connections: try again shortly", "service_unavailable", "too_many_connections")
    assert isinstance(body.body, bytes)
    return refusal(body.body)


def api_limiter(limits: ConnectionLimits, cap: int) -> Limiter:
    """The API listener's limiter: `cap` connections in all (the configured number, fitted to the open-file
    limit), a quarter at most per client."""
    return Limiter("api", cap, per_client(limits.api_connections_per_client, cap), api_refusal())
