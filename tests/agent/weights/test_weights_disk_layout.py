"""The weights' on-disk layout and budget: names that collide, a crash at the worst moment, two transfers sharing
one budget."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from llmgw.agent.weights import local
from llmgw.agent.weights.fetcher import Ready
from llmgw.wire.messages import WeightsPlan
from tests.agent.installs.release import Release
from tests.agent.weights.kit import fetcher, settled
from tests.harness import await_until

OLD = os.urandom(1_000_000)
NEW = os.urandom(1_000_000)  # the same size: a re-upload at the same URL, the catalog's digest updated


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.mark.parametrize("name", ["source.json", ".source.json", "x.gguf.part"])
async def test_a_url_named_like_the_metadata_is_held_like_any_other(tmp_path: Path, origin: Release,
                                                                     name: str) -> None:
    """https://host/x/.source.json: were its file and the folder's metadata one path, the rename would overwrite
    the metadata with the weights and the file would never be held (not reported, not served to peers, never
    removable by make_room, fetched again after every restart). A name ending in .part would never be reported."""
    origin.files[name] = OLD
    url = origin.url(name)
    f = fetcher(tmp_path)
    got = await settled(f, url, WeightsPlan(sha256=sha(OLD)))
    await f.close()
    assert isinstance(got, Ready), got
    assert local.read_held(local.folder_for(tmp_path, url)) is not None, "the metadata was overwritten"
    assert url in local.visible([tmp_path])


async def test_a_crash_between_record_and_rename_does_not_vouch_for_the_old_file(
        tmp_path: Path, origin: Release, monkeypatch: pytest.MonkeyPatch) -> None:
    """A held file re-fetched for a new digest: a crash (or a failed rename, or an ensure() racing _finish's thread)
    between writing source.json and the rename must not leave the old bytes answered Ready under the new digest."""
    url = origin.url("model.gguf")
    origin.files["model.gguf"] = OLD
    f = fetcher(tmp_path)
    assert isinstance(await settled(f, url, WeightsPlan(sha256=sha(OLD))), Ready)
    await f.close()

    origin.files["model.gguf"] = NEW
    real_replace = os.replace

    def crash(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if str(src).endswith(".part"):
            raise OSError(5, "simulated crash before the rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash)  # the module the fetcher renames with
    f = fetcher(tmp_path)
    got = await settled(f, url, WeightsPlan(sha256=sha(NEW)))
    await f.close()
    monkeypatch.undo()
    if isinstance(got, Ready):  # the rename never happened: the file there is OLD, vouched for by NEW's digest
        assert sha(got.path.read_bytes()) == sha(NEW), f"Ready with the old bytes under the new digest: {got}"
    restarted = fetcher(tmp_path)  # and after a restart
    got = restarted.ensure(url, WeightsPlan(sha256=sha(NEW)))
    await restarted.close()
    if isinstance(got, Ready):
        assert sha(got.path.read_bytes()) == sha(NEW), "the old file is vouched for by the new digest"


async def test_two_transfers_at_once_stay_within_the_budget(tmp_path: Path, origin: Release) -> None:
    """Two transfers at once stay within the budget together: two 1 MB files cannot both pass a 1.5 MB check and put
    2 MB under it."""
    gate = threading.Event()
    for n in ("a.gguf", "b.gguf"):
        origin.files[n] = os.urandom(1_000_000)
        origin.hold[n] = gate
    budget = 1_500_000
    f = fetcher(tmp_path, budget=budget)
    plans = {n: WeightsPlan(size=1_000_000) for n in ("a.gguf", "b.gguf")}
    for n, p in plans.items():
        f.ensure(origin.url(n), p)
    await await_until(lambda: len(origin.ranges) == 2 or any(s.state == "failed" for s in f.statuses()), 10,
                     "both transfers under way (or one refused)")
    gate.set()
    outcomes = [await settled(f, origin.url(n), p) for n, p in plans.items()]
    await f.close()
    managed = local.managed_bytes(tmp_path)
    assert managed <= budget, f"{managed} bytes under a {budget}-byte budget: {outcomes}"


async def test_a_changed_digest_is_not_answered_with_the_file_fetched_for_the_old_one(tmp_path: Path,
                                                                                    origin: Release) -> None:
    """The catalog's sha256 for a URL changes (the file was re-uploaded) while the agent runs: ensure() looks at the
    plan before answering with a finished job, so the node does not go on launching the old bytes."""
    url = origin.url("model.gguf")
    origin.files["model.gguf"] = OLD
    f = fetcher(tmp_path)
    assert isinstance(await settled(f, url, WeightsPlan(sha256=sha(OLD))), Ready)
    origin.files["model.gguf"] = NEW
    got = f.ensure(url, WeightsPlan(sha256=sha(NEW)))
    if isinstance(got, Ready):
        assert sha(got.path.read_bytes()) == sha(NEW), f"Ready with bytes whose digest is not the plan's: {got}"
    await f.close()


async def test_making_room_never_runs_on_the_event_loop(tmp_path: Path, origin: Release,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """make_room walks the whole fetched tree and removes files of many GB, so every caller runs it in a thread:
    on the event loop, heartbeats, the peer listener and every other transfer would stop while it runs."""
    origin.files["model.gguf"] = OLD
    loop_thread = threading.current_thread()
    on_loop: list[int] = []
    real = local.make_room

    def spy(*a: object, **kw: object) -> list[str]:
        if threading.current_thread() is loop_thread:
            on_loop.append(1)
        return real(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(local, "make_room", spy)
    f = fetcher(tmp_path, budget=10_000_000)
    got = await settled(f, origin.url("model.gguf"), WeightsPlan())
    await f.close()
    assert isinstance(got, Ready), got
    assert not on_loop, f"make_room ran {len(on_loop)} time(s) on the event loop's thread"
