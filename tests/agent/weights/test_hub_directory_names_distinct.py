"""Each hub repository has a directory of its own on a node: the hub's `org--name` spelling of `org/name` is one
repository's only, so an id the hub itself refuses (one with "--") never names another's directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.agent.weights.hubdir import dir_for
from llmgw.wire.hub import parse_hub

COMMIT = "c" * 40


@pytest.mark.parametrize("source", ["hf://a--b/c", "hf://a/b--c", "hf://a--b--c", "hf://a--b"])
def test_an_id_with_a_double_dash_is_refused(source: str) -> None:
    with pytest.raises(ValueError, match="not a hub repository id"):
        parse_hub(source)


def test_ids_the_parser_takes_have_distinct_directories(tmp_path: Path) -> None:
    ids = ["a/b-c", "a-b/c", "a-b-c", "a/b", "ab", "a.b/c", "a/b.c"]
    dirs = {dir_for(tmp_path, f"hf://{i}@{COMMIT}") for i in ids}
    assert len(dirs) == len(ids)
