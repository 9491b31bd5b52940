"""The HTTP client huggingface_hub uses in the control plane: the library reads each answer whole into memory, so
every answer's body is cut off past MAX_ANSWER bytes (a hub or mirror answering gigabytes of JSON is refused, not
read). Installed with `install()` before the first request."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
from huggingface_hub import set_client_factory
from huggingface_hub.utils._http import hf_request_event_hook

from llmgw.core.units import mb

MAX_ANSWER = 64 << 20  # a listing of 100,000 files with their digests is some 30 MB


class AnswerTooLarge(ValueError):
    """An answer longer than MAX_ANSWER: not a hub's (read as an answer not in the hub's shape)."""


class _Capped(httpx2.SyncByteStream):
    def __init__(self, inner: httpx2.SyncByteStream, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise AnswerTooLarge(f"an answer of more than {mb(self._limit)}")
            yield chunk

    def close(self) -> None:
        self._inner.close()


class CappedTransport(httpx2.BaseTransport):
    def __init__(self) -> None:
        self._inner = httpx2.HTTPTransport()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        resp = self._inner.handle_request(request)
        if isinstance(resp.stream, httpx2.SyncByteStream):
            resp.stream = _Capped(resp.stream, MAX_ANSWER)
        return resp

    def close(self) -> None:
        self._inner.close()


def client() -> httpx2.Client:
    """The library's own client (its request hook, redirects followed, no timeout of its own) on a capped
    transport."""
    return httpx2.Client(event_hooks={"request": [hf_request_event_hook]}, follow_redirects=True, timeout=None,
                         transport=CappedTransport())


def install() -> None:
    set_client_factory(client)
