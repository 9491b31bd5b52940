"""The heartbeat bench's generator reads an HTTP/1.1 answer by its status line and Content-Length alone: what it
cannot read that way (a chunked body, a length past its bound, a connection closed before an answer) is an error it
counts, never an answer taken for another."""

from __future__ import annotations

import asyncio

import pytest
from bench.heartbeat_load import MAX_ANSWER, read_answer


def fed(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


async def test_an_answer_is_its_status_body_and_whether_the_server_closes() -> None:
    two = fed(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"desired\":null}"
              b"HTTP/1.1 409 Conflict\r\nConnection: close\r\ncontent-length: 2\r\n\r\n{}")
    assert await read_answer(two) == (200, b'{"desired":null}', False)
    assert await read_answer(two) == (409, b"{}", True)  # the second answer on the same connection, read whole


async def test_a_connection_closed_between_answers_is_a_reset() -> None:
    with pytest.raises(ConnectionResetError):
        await read_answer(fed(b""))


@pytest.mark.parametrize("head", [b"Transfer-Encoding: chunked", f"Content-Length: {MAX_ANSWER + 1}".encode(),
                                  b"Content-Length: -1"])
async def test_an_answer_it_cannot_bound_is_refused(head: bytes) -> None:
    with pytest.raises(ValueError):
        await read_answer(fed(b"HTTP/1.1 200 OK\r\n" + head + b"\r\n\r\n0\r\n\r\n"))


async def test_an_answer_cut_short_is_not_taken() -> None:
    with pytest.raises(asyncio.IncompleteReadError):
        await read_answer(fed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"))
