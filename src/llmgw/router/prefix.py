"""Which replica was last sent which prompt prefix: hashed blocks of a request's leading content, no tokenizer.

A request's prompt (its messages' roles and text, or its `prompt`) is cut into blocks of `block_chars` characters;
block i's key hashes the model, block i and the key of block i-1, so a key names a whole prefix, not a block. The
index remembers, for the most recent `entries` keys, the last few replicas sent that prefix (HOLDERS, the latest
first): an engine that served a prompt keeps its KV cache for a while (vLLM's and SGLang's prefix caches,
llama.cpp's prompt cache), so those replicas are the ones likely to skip recomputing it. Bounded: least recently
used keys go first.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

HOLDERS = 4  # replicas remembered per prefix: a prefix sent to a second replica (the first was busy) is in both
MAX_PART_CHARS = 1 << 20  # of one message: enough for any prefix worth matching, bounded whatever a client sends


def prompt_text(payload: dict[str, Any], limit: int) -> str:
    """The request's leading content, up to `limit` characters: what an engine would put first in its context."""
    parts: list[str] = []
    size = 0
    messages = payload.get("messages")
    if isinstance(messages, list):
        for m in messages:
            if not isinstance(m, dict):
                continue
            role, content = m.get("role"), m.get("content")
            text = ""
            if isinstance(content, str):
                text = content
            elif isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
                text = "".join(p["text"] for p in content
                               if isinstance(p, dict) and isinstance(p.get("text"), str))
            piece = f"<{role if isinstance(role, str) else ''}>{text[:MAX_PART_CHARS]}"
            parts.append(piece)
            size += len(piece)
            if size >= limit:
                break
    else:
        prompt = payload.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            parts.append(prompt[:limit])
    return "".join(parts)[:limit]


def chain(model: str, text: str, block_chars: int) -> list[bytes]:
    """The key of each complete leading block (a partial last block is not a prefix an engine caches whole)."""
    keys: list[bytes] = []
    prev = hashlib.blake2b(model.encode(), digest_size=8).digest()
    for i in range(0, len(text) - block_chars + 1, block_chars):
        prev = hashlib.blake2b(prev + text[i:i + block_chars].encode("utf-8", "surrogatepass"),
                               digest_size=8).digest()
        keys.append(prev)
    return keys


class PrefixIndex:
    def __init__(self, entries: int) -> None:
        self.entries = entries
        self._last: OrderedDict[bytes, tuple[str, ...]] = OrderedDict()  # prefix key -> replicas last sent it

    def matches(self, keys: list[bytes]) -> dict[str, int]:
        """Per replica, how many leading blocks of this request it was sent last time it saw them."""
        out: dict[str, int] = {}
        for n, key in enumerate(keys, start=1):
            for rid in self._last.get(key, ()):
                out[rid] = n  # keys are chained: holding block n means it was sent blocks 1..n together
        return out

    def record(self, keys: list[bytes], replica_id: str) -> None:
        for key in keys:
            held = self._last.get(key, ())
            self._last[key] = (replica_id, *(r for r in held if r != replica_id))[:HOLDERS]
            self._last.move_to_end(key)
        while len(self._last) > self.entries:
            self._last.popitem(last=False)

    def __len__(self) -> int:
        return len(self._last)
