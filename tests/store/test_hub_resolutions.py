"""Hub models' resolutions in the store: the first written for a source is kept, so servers sharing the store use
one commit; it is dropped only while it still names the commit nodes reported gone; it outlives a restart."""

from __future__ import annotations

from collections.abc import Callable

from llmgw.store.sql import SqlStore
from llmgw.wire.hub import HubFile, Resolution

SRC = "hf://org/m@main"
FILES = (HubFile(path="model.safetensors", size=3000, sha256="ab" * 32), HubFile(path="config.json", size=7,
                                                                                  git_sha1="cd" * 20))


def res(commit: str, gated: bool = False) -> Resolution:
    return Resolution("org/m", "main", commit, FILES, gated=gated)


def test_the_first_resolution_written_is_the_one_kept(opener: Callable[[], SqlStore]) -> None:
    a, b = opener(), opener()
    assert a.get_resolution(SRC) is None
    assert a.claim_resolution(SRC, res("1" * 40, gated=True)) == res("1" * 40, gated=True)
    assert b.claim_resolution(SRC, res("2" * 40)) == res("1" * 40, gated=True), "the second server adopts the first"
    assert b.get_resolution(SRC) == res("1" * 40, gated=True)
    assert b.get_resolution("hf://org/m@v2") is None


def test_a_resolution_is_dropped_only_while_it_names_the_commit_gone(opener: Callable[[], SqlStore]) -> None:
    a, b = opener(), opener()
    a.claim_resolution(SRC, res("1" * 40))
    a.drop_resolution(SRC, "1" * 40)
    assert a.claim_resolution(SRC, res("2" * 40)) == res("2" * 40)
    b.drop_resolution(SRC, "1" * 40)  # a server late to hear the old commit is gone does not drop the new one
    assert b.get_resolution(SRC) == res("2" * 40)


def test_a_resolution_outlives_reopening(opener: Callable[[], SqlStore]) -> None:
    s = opener()
    s.claim_resolution(SRC, res("1" * 40))
    s.close()
    assert opener().get_resolution(SRC) == res("1" * 40)
