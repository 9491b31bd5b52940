"""A hub model's file list as a node is told it: every file has a place of its own in the directory (listed once,
never under another file), or the plan is refused as a whole before anything is fetched or laid out; a resolution
kept in the store with such a list is not read (it is resolved again)."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from llmgw.wire.hub import HubFile, Resolution
from llmgw.wire.messages import WeightsPlan

BASE = "https://hub.example/acme/m/resolve/" + "c" * 40


def f(path: str, size: int = 10) -> dict[str, object]:
    return {"path": path, "size": size, "git_sha1": "d" * 40}


@pytest.mark.parametrize("files", [
    [f("model.safetensors"), f("model.safetensors", 20)],
    [f("config.json"), f("model.safetensors"), f("config.json")],
    [f("a"), f("a/b")],
    [f("sub/x/y"), f("sub/x")],
])
def test_a_path_without_a_place_of_its_own_is_refused(files: list[dict[str, object]]) -> None:
    with pytest.raises(ValidationError, match="listed twice, or under a file"):
        WeightsPlan.model_validate({"files": files, "base_url": BASE})


def test_siblings_and_folders_are_fine() -> None:
    files = [f("a/b"), f("a/c"), f("ab"), f("a.json"), f("sub/a")]
    assert len(WeightsPlan.model_validate({"files": files, "base_url": BASE}).files) == 5


def test_a_stored_resolution_listing_a_file_twice_is_not_read() -> None:
    body = {"repo": "acme/m", "revision": "main", "commit": "c" * 40, "files": [f("x.json"), f("x.json", 3)]}
    with pytest.raises(ValidationError):
        TypeAdapter(Resolution).validate_python(body)
    with pytest.raises(ValueError):
        Resolution("acme/m", "main", "c" * 40, (HubFile(path="x", size=1), HubFile(path="x/y", size=1)))


def test_a_list_of_more_bytes_than_a_fetch_can_count_is_refused() -> None:
    files = [f(f"model-{i}.safetensors", 2**50) for i in range(16)]  # each allowed; 2**54 in all
    with pytest.raises(ValidationError, match="more than"):
        WeightsPlan.model_validate({"files": files, "base_url": BASE})
