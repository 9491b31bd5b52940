"""A job cancelled while its file is being put in place and wanted again at once keeps the file; making room
survives a job started meanwhile."""

from __future__ import annotations

import hashlib
import os
import threading
import types
from pathlib import Path

import pytest

from llmgw.agent import transfer
from llmgw.agent.weights import fetcher as fetcher_mod
from llmgw.agent.weights import local
from llmgw.agent.weights.fetcher import Ready
from llmgw.wire.messages import WeightsPlan
from tests.agent.installs.release import Release
from tests.agent.weights.kit import fetcher, settled
from tests.harness import await_until

DATA = os.urandom(3_000_000)
DIGEST = hashlib.sha256(DATA).hexdigest()


async def test_a_job_cancelled_during_finish_and_wanted_again_keeps_the_file(
        tmp_path: Path, origin: Release, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job cancelled while its _finish thread renames the file into place, then wanted again: the second job must not
    unlink the verified file the first just put there, and the node keeps the file, not Failed."""
    origin.files["m.gguf"] = DATA
    url = origin.url("m.gguf")
    plan = WeightsPlan(sha256=DIGEST, size=len(DATA))
    target = local.target_for(tmp_path, url)
    first_record, release_first, renamed = threading.Event(), threading.Event(), threading.Event()
    hashed = threading.Event()
    state = {"calls": 0, "second_job": False}

    real_record, real_hash_of = local.record, transfer.hash_of

    def record(folder: Path, u: str, size: int, sha256: str) -> None:
        state["calls"] += 1
        if state["calls"] == 1:  # the first job's _finish: held here, as a slow disk would hold it
            first_record.set()
            assert release_first.wait(20)
        real_record(folder, u, size, sha256)

    def replace(src: str | Path, dst: str | Path) -> None:
        os.replace(src, dst)
        renamed.set()

    def hash_of(path: Path, upto: int | None = None) -> hashlib._Hash:
        if state["second_job"]:
            hashed.set()  # the second job read the .part: before the first rename ended, it would rename it again
        return real_hash_of(path, upto)

    monkeypatch.setattr(local, "record", record)
    monkeypatch.setattr(transfer, "hash_of", hash_of)
    shim = types.SimpleNamespace(**{k: getattr(os, k) for k in ("open", "close", "fsync", "O_RDONLY")},
                                 replace=replace)
    monkeypatch.setattr(fetcher_mod, "os", shim)

    f = fetcher(tmp_path)
    f.ensure(url, plan)
    await await_until(first_record.is_set, 20, "the first job in _finish")
    f.keep(set())  # no shard wants it for one heartbeat
    state["second_job"] = True
    f.ensure(url, plan)  # wanted again at the next: a second job, while the first rename is held in its thread

    def second_job_acted() -> bool:
        st = f.jobs[url].status
        return hashed.is_set() or (st is not None and st.message == "finishing the last transfer of this file")

    await await_until(second_job_acted, 10, "the second job read the .part, or waits for the first rename")
    release_first.set()  # the first thread goes on and renames the file into place
    got = await settled(f, url, plan)
    assert renamed.is_set() and not hashed.is_set(), "the second job waited for the first rename, read nothing"
    await f.close()
    assert isinstance(got, Ready) and target.exists(), f"{got}; file there: {target.exists()}"


async def test_making_room_survives_a_new_job_started_meanwhile(tmp_path: Path, origin: Release) -> None:
    """room() iterates the jobs in a worker thread while ensure() adds jobs on the event loop: no "dictionary changed
    size during iteration". Forced here by one job whose status is read slowly (a GIL switch there does the same)."""
    from llmgw.agent.weights.fetcher import _Job
    from llmgw.wire.messages import FetchStatus

    entered, go = threading.Event(), threading.Event()
    main = threading.get_ident()

    class SlowJob(_Job):
        @property
        def status(self) -> FetchStatus:
            if threading.get_ident() != main and not go.is_set():
                entered.set()
                go.wait(20)
            return FetchStatus(source=self.url, state="waiting")

        @status.setter
        def status(self, _: object) -> None:
            pass

    origin.files["m.gguf"] = DATA
    origin.files["other.gguf"] = DATA
    url = origin.url("m.gguf")
    f = fetcher(tmp_path)
    f.jobs["http://elsewhere/slow.gguf"] = SlowJob("http://elsewhere/slow.gguf", WeightsPlan(origin=False))
    f.ensure(url, WeightsPlan(sha256=DIGEST, size=len(DATA)))
    await await_until(entered.is_set, 20, "room() reading the other jobs in its thread")
    f.ensure(origin.url("other.gguf"), None)  # a shard placed meanwhile: a new job
    go.set()
    got = await settled(f, url, WeightsPlan(sha256=DIGEST, size=len(DATA)))
    f.jobs.pop("http://elsewhere/slow.gguf", None)
    await f.close()
    assert isinstance(got, Ready), got
