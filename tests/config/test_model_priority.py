"""A model's priority: a whole number in range, or absent (then min >= 1 ranks above on demand); a slip is named."""

from __future__ import annotations

import pytest

from llmgw.config.loader import parse
from llmgw.config.server import PROMISED, ServerConfig
from llmgw.core.errors import ConfigError

TLS = {"ca": "x", "cert": "x", "key": "x"}


def _model(**kw: object) -> dict[str, object]:
    return {"name": "a", "source": "org/a", "engine": "sim", "scaling": {"min": 0, "max": 1}, **kw}


def test_priority_defaults_to_the_promise_and_may_be_set() -> None:
    cfg = parse(ServerConfig, {"tls": TLS, "models": [
        _model(), _model(name="b", scaling={"min": 1, "max": 1}), _model(name="c", priority=-5, pinned=True)]},
        "server.yaml")
    assert [m.rank for m in cfg.models] == [0, PROMISED, -5]
    assert cfg.models[2].pinned


@pytest.mark.parametrize("bad", ["high", "10", 1.5, True, 1001, -1001])
def test_a_priority_that_is_no_whole_number_in_range_is_refused_by_name(bad: object) -> None:
    with pytest.raises(ConfigError) as e:
        parse(ServerConfig, {"tls": TLS, "models": [_model(priority=bad)]}, "server.yaml")
    assert str(e.value) == (f"server.yaml: models[0].priority: must be a whole number from -1000 to 1000, not "
                            f"{bad!r} (higher preempts lower; default {PROMISED} with min >= 1, else 0)")
