"""Usage record ids: what the store counts a request once by."""

from __future__ import annotations

import os

import pytest

from llmgw.store.base import Usage, UsageRecord, new_usage_id


def test_ids_are_distinct_and_follow_each_other_in_one_process() -> None:
    ids = [new_usage_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)  # one process's records land side by side in the store's index on id
    assert all(8 <= len(i) <= 64 for i in ids)
    assert UsageRecord(key_id="k", model="m", replica_id="r", prompt_tokens=0, completion_tokens=0,
                       started_at=0.0, duration_s=0.0, status=200).id > ids[-1]  # the default is the same counter


@pytest.mark.real  # processes (tests/tiers.py)
def test_a_forked_child_makes_ids_of_its_own() -> None:
    """Forked API workers must not count from the parent's prefix: the store would take a worker's request and the
    parent's as one, and bill one of them never."""
    before = new_usage_id()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: say its next ids, and leave without running anything of the parent's
        try:
            os.write(w, " ".join(new_usage_id() for _ in range(3)).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        child = f.read().decode().split()
    os.waitpid(pid, 0)
    mine = [new_usage_id() for _ in range(3)]
    assert len(child) == 3
    assert not set(child) & set(mine)
    assert {c[:16] for c in child}.isdisjoint({before[:16]})  # another prefix, not the same counter run on


def test_a_journal_line_reads_back_as_the_same_record() -> None:
    """The router writes its own records' journal lines by hand (a pydantic model costs microseconds a line): what
    it writes must be what UsageRecord reads, for any key id, model name or time."""
    odd = 'q"uo\\te\n\t\x00é漢😀'
    for u in (Usage(new_usage_id(), odd, odd, odd, 2**31, 0, 1_700_000_000.123456789, 1e-7, 999),
              Usage(new_usage_id(), "", "m", "", 0, 7, 0.0, 0.0, 0)):
        line = u.json_line()
        assert line.endswith(b"\n") and b"\n" not in line[:-1]
        back = UsageRecord.model_validate_json(line)
        assert back == u.record()
        assert back.model_dump() == {f: getattr(u, f) for f in Usage.__slots__}
