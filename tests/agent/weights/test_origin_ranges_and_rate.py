"""Origins that answer ranges in ways fetch_part does not expect: capping every range does not dodge the minimum
rate, and a 206 of unknown length is not taken for the rest of the file."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from llmgw.agent.transfer import MinRate, Source, fetch_part
from llmgw.agent.weights.fetcher import Ready
from llmgw.core.errors import TransferFailed
from llmgw.wire.messages import WeightsPlan
from tests.agent.weights.kit import fetcher, settled
from tests.agent.weights.test_origin_hostile_answers import DATA, HALF, cut_at_half, honest, raw_origin

SMALL = os.urandom(20_000)


async def test_a_source_that_caps_every_range_cannot_dodge_the_min_rate(tmp_path: Path) -> None:
    """An origin or peer that answers every range with 100 bytes and a 206 is still left for the next source when far
    below MinRate (50 B/s here on the test's clock, 64 kB/s required): each new request is not a fresh window."""
    ticks = itertools.count()
    rate = MinRate(64 * 1024.0, 5.0, lambda: float(next(ticks)))  # every reading of the clock: one second later

    async def answer(h: dict[str, str], n: int) -> bytes:
        rng = h.get("range", "")
        start = int(rng[6:-1]) if rng.startswith("bytes=") else 0
        last = min(start + 99, len(SMALL) - 1)
        return (f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{last}/{len(SMALL)}\r\n"
                f"Content-Length: {last - start + 1}\r\n\r\n").encode() + SMALL[start:last + 1]

    async with raw_origin(answer) as (port, requests):
        with pytest.raises(TransferFailed) as e:
            await fetch_part(Source(f"http://127.0.0.1:{port}/m.gguf"), tmp_path / "m.gguf.part",
                             max_bytes=1 << 30, progress=lambda d, t: None, min_rate=rate)
    assert e.value.resumable and len(requests) < 50, f"{len(requests)} requests"


async def test_a_206_of_unknown_length_is_not_taken_for_the_rest_of_the_file(tmp_path: Path) -> None:
    """A resume answered with a slice of complete-length "*" (RFC 9110 allows "bytes 1000000-1000999/*"): with no size
    or digest in the catalog, the 1.001 MB on disk are not renamed as the whole 2 MB file."""
    async def answer(h: dict[str, str], n: int) -> bytes:
        if n == 1:
            return cut_at_half()
        rng = h.get("range", "")
        if rng == f"bytes={HALF}-":
            return (f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {HALF}-{HALF + 999}/*\r\n"
                    f"Content-Length: 1000\r\n\r\n").encode() + DATA[HALF:HALF + 1000]
        return honest(h)

    async with raw_origin(answer) as (port, _):
        f = fetcher(tmp_path)
        got = await settled(f, f"http://127.0.0.1:{port}/m.gguf", WeightsPlan())
        await f.close()
    assert isinstance(got, Ready), got
    size = got.path.stat().st_size
    assert size == len(DATA), f"{size} bytes named as the whole file (the origin serves {len(DATA)})"
