"""A Messages API stream that does not open with `message_start` is given one by the router.

Anthropic's clients refuse a stream whose first event is another ("Unexpected event order"), and that event is the
only one that carries the request's input tokens. llama-server writes it with the result of the first generated
token only, and sends no result for a token that ends mid-character (the first bytes of an emoji), so its stream
then opens with `content_block_start`. The router holds the stream until its first event is whole and, when that
event needs a message before it, writes one first, with the input counted by the engine's `count_tokens`.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable

import aiohttp
from yarl import URL

log = logging.getLogger(__name__)

MAX_HELD = 65536  # a first event larger than this is relayed as it came, unlooked at
COUNT_TIMEOUT_S = 5.0
MAX_COUNT_BYTES = 4096  # {"input_tokens": n} and little else
# the events that belong to a message: one of these first means the engine's message_start is missing
_IN_A_MESSAGE = {"content_block_start", "content_block_delta", "content_block_stop", "message_delta",
                 "message_stop"}
_BLANK = re.compile(rb"\r?\n\r?\n")


def _kind(block: bytes) -> str:
    """An event's name: its `event:` line, else the `type` of its data; "" for a comment (llama-server's ping)."""
    for line in block.splitlines():
        if line.startswith(b"event:"):
            return line[6:].strip().decode(errors="replace")
    for line in block.splitlines():
        if line.startswith(b"data:"):
            try:
                data = json.loads(line[5:])
            except (ValueError, RecursionError):
                return "?"
            kind = data.get("type") if isinstance(data, dict) else None
            return kind if isinstance(kind, str) else "?"
    return ""


class MessageStart:
    """Watches a Messages stream's beginning: `feed` holds reads until the first event is whole, then passes them on,
    after a `message_start` of the router's own where the engine sent none. `count` gives the input tokens."""

    def __init__(self, model: str, count: Callable[[], Awaitable[int | None]]) -> None:
        self.model = model
        self.count = count
        self.held = b""
        self.at = 0  # where in `held` the first event not yet looked at begins (comments and pings before it)
        self.checked = False

    async def feed(self, chunk: bytes) -> bytes:
        """What the client gets of this read: nothing while the first event is incomplete."""
        if self.checked:
            return chunk
        data, self.held = self.held + chunk, b""
        kind = self._first_kind(data, max(0, len(data) - len(chunk) - 3))  # (a blank line across two reads)
        if kind is None and len(data) <= MAX_HELD:
            self.held = data
            return b""
        self.checked = True
        if kind not in _IN_A_MESSAGE:
            return data
        return await self._event() + data

    def _first_kind(self, data: bytes, new: int) -> str | None:
        """The name of the first whole event that is neither a comment nor a ping; None while there is none. Each
        byte is looked at once however the reads split it: `new` is where those not looked at yet begin."""
        while (end := _BLANK.search(data, max(self.at, new))) is not None:
            kind = _kind(data[self.at : end.start()])
            if kind not in ("", "ping"):
                return kind
            self.at = new = end.end()
        return None

    def rest(self) -> bytes:
        """What is still held when the engine's stream ends (an incomplete event): relayed as it came."""
        self.checked, held, self.held = True, self.held, b""
        return held

    async def _event(self) -> bytes:
        counted = await self.count()
        if counted is None:
            log.warning("the engine's Messages stream for %s began without message_start and it could not count "
                        "the input: the router's message_start says 0 input tokens", self.model)
        message: dict[str, object] = {
            "id": f"msg_{secrets.token_hex(12)}", "type": "message", "role": "assistant", "content": [],
            "model": self.model, "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": counted or 0, "output_tokens": 0}}
        data = json.dumps({"type": "message_start", "message": message}, separators=(",", ":"))
        return b"event: message_start\ndata: " + data.encode() + b"\n\n"


async def count_input_tokens(session: aiohttp.ClientSession, url: str | URL, body: bytes,
                             headers: dict[str, str]) -> int | None:
    """The engine's count of a Messages request's input (Anthropic's `count_tokens`), or None where it gave none.
    `headers`: those the router sends the engine with any request (its secret)."""
    raw = b""
    try:
        async with session.post(url, data=body, headers=headers, allow_redirects=False,
                                timeout=aiohttp.ClientTimeout(total=COUNT_TIMEOUT_S)) as resp:
            if resp.status != 200:
                return None
            while chunk := await resp.content.read(MAX_COUNT_BYTES):
                raw += chunk
                if len(raw) > MAX_COUNT_BYTES:
                    return None
        got = json.loads(raw)
    except (aiohttp.ClientError, TimeoutError, ValueError, RecursionError):
        return None
    n = got.get("input_tokens") if isinstance(got, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None
