"""What a node may be told to fetch: a plain-http weights source needs the sha256 its file must have (anyone on the
way can change the bytes), and agent.yaml's redirects_allowed holds places, each a host, host:port or network."""

from __future__ import annotations

import pydantic
import pytest

from llmgw.config.agent import AgentConfig
from llmgw.config.server import ModelSpec

DIGEST = "ab" * 32


def test_a_plain_http_source_needs_a_digest() -> None:
    with pytest.raises(pydantic.ValidationError, match="sha256"):
        ModelSpec(name="m", source="http://models.internal/m.gguf", engine="llamacpp")
    with pytest.raises(pydantic.ValidationError, match="sha256"):
        ModelSpec(name="m", source="HTTP://models.internal/m.gguf", engine="llamacpp", size=10)
    ModelSpec(name="m", source="http://models.internal/m.gguf", engine="llamacpp", sha256=DIGEST)
    ModelSpec(name="m", source="https://models.internal/m.gguf", engine="llamacpp")  # TLS vouches for the bytes


def _agent(allowed: list[str]) -> AgentConfig:
    return AgentConfig.model_validate({"control_planes": ["https://cp:7443"], "tls": {"ca": "a", "cert": "b",
                                       "key": "c"}, "redirects_allowed": allowed})


def test_redirect_places_are_hosts_ports_or_networks() -> None:
    good = ["cdn.internal", "cdn.internal:8443", "127.0.0.1:9000", "[::1]:80", "[fd00::1]", "10.0.0.0/8", "::1/128"]
    assert _agent(good).redirects_allowed == good
    for bad in ["a b", "cdn:99999", "cdn:", "10.0.0.0/33", "http://cdn", "user@cdn", "[::1]:x", ""]:
        with pytest.raises(pydantic.ValidationError, match="redirects_allowed"):
            _agent([bad])
