"""A model's sleep block is validated where it is read: refused, in words that say why, on an engine that cannot
sleep, on a model that is not on demand, on a replica spanning nodes, and with values out of range."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from llmgw.config.server import ModelSpec


def spec(**kw: Any) -> ModelSpec:
    base: dict[str, Any] = {"name": "m", "source": "/m", "engine": "vllm", "scaling": {"min": 0, "max": 1},
                            "sleep": {}}
    return ModelSpec.model_validate(base | kw)


def test_a_full_sleep_block_is_read() -> None:
    s = spec(sleep={"level": 2, "stop_after": "2h", "host_memory": "16GiB", "min_stay": "30s"}).sleep
    assert s is not None and (s.level, s.stop_after, s.host_memory, s.min_stay) == (2, 7200.0, 16 << 30, 30.0)


@pytest.mark.parametrize("kw,words", [
    ({"engine": "llamacpp"}, "engine llamacpp cannot sleep (engines that can: sim, vllm)"),
    ({"scaling": {"min": 1, "max": 1}}, "only an on-demand model"),
    ({"profile": {"nodes": 2}}, "a replica spanning nodes never sleeps"),
    ({"sleep": {"level": 3}}, "sleep.level"),
    ({"sleep": {"stop_after": "-1s"}}, "sleep.stop_after"),
    ({"sleep": {"host_memory": "lots"}}, "sleep.host_memory"),
    ({"sleep": {"wake": True}}, "sleep.wake"),
])
def test_a_sleep_block_that_could_never_apply_is_refused_with_its_reason(kw: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError) as e:
        spec(**kw)
    assert words in str(e.value)
