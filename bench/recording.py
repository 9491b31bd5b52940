"""The recording half of bench/reconcile_record.py: a store that logs every write made through it, randomness held
to a seed, and values made plain and comparable (random ids replaced by the ordinal of their first appearance), so
two runs, or two trees, that behave alike record alike.

Of llmgw it imports only llmgw.records.state, which every tree the recording compares has: the control plane's own
modules moved between them."""

from __future__ import annotations

import base64
import dataclasses
import enum
import hashlib
import json
import random
import re
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

from llmgw.records.state import Event

# the store's operations that change it: everything else is a read
WRITE_PREFIXES = ("put_", "add_", "delete_", "drop_", "claim_", "prune", "lead", "release")
# a run of hex digits this long, alone (an id derived from entropy, a secret, an etag): random by construction
HEX_RUN = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{12,}(?![0-9A-Za-z])")


class Names:
    """Random values replaced by `<kind>#<ordinal of first appearance>`: the same value, the same name, in every
    place it shows; which random draw made it does not matter."""

    def __init__(self) -> None:
        self.exact: list[str] = []  # values replaced wherever they appear: drawn by secrets, the lease holder's id
        self._names: dict[str, str] = {}
        self._counts: dict[str, int] = {}

    def name(self, value: str, kind: str) -> str:
        got = self._names.get(value)
        if got is None:
            n = self._counts[kind] = self._counts.get(kind, 0) + 1
            got = self._names[value] = f"<{kind}#{n}>"
        return got

    def text(self, s: str) -> str:
        for value in self.exact:
            if value in s:
                s = s.replace(value, self.name(value, "random"))
        return HEX_RUN.sub(lambda m: self.name(m.group(0), f"hex{len(m.group(0))}")
                           if re.search("[a-f]", m.group(0)) else m.group(0), s)

    def plain(self, x: Any) -> Any:
        """JSON-able, with every string through text(); sets sorted, so their order never shows."""
        if isinstance(x, BaseModel):
            return self.plain(x.model_dump(mode="json"))
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return {"type": type(x).__name__, **{f.name: self.plain(getattr(x, f.name)) for f in dataclasses.fields(x)}}
        if isinstance(x, enum.Enum):
            return self.plain(x.value)
        if isinstance(x, dict):
            return {self.text(str(k)): self.plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [self.plain(v) for v in x]
        if isinstance(x, (set, frozenset)):
            return sorted((self.plain(v) for v in x), key=lambda v: json.dumps(v, sort_keys=True))
        if isinstance(x, bytes):
            return self.text(x.hex())
        if isinstance(x, str):
            return self.text(x)
        if x is None or isinstance(x, (bool, int, float)):
            return x
        return self.text(repr(x))


class Recording:
    """Entries in the order they happened, each a step's label, a kind and its plain value."""

    def __init__(self) -> None:
        self.names = Names()
        self.step = ""
        self.entries: list[dict[str, Any]] = []
        self.reads: dict[str, int] = {}  # store reads by operation: counted, not recorded (not behaviour)

    def add(self, kind: str, value: Any) -> None:
        self.entries.append({"step": self.step, "kind": kind, "value": self.names.plain(value)})

    def lines(self) -> list[str]:
        return [json.dumps(e, sort_keys=True, separators=(",", ":")) for e in self.entries]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.entries:
            out[e["kind"]] = out.get(e["kind"], 0) + 1
        return out

    def digest(self, kind: str | None = None) -> str:
        h = hashlib.sha256()
        for e, line in zip(self.entries, self.lines(), strict=True):
            if kind is None or e["kind"] == kind:
                h.update(line.encode() + b"\n")
        return h.hexdigest()


class RecordingStore:
    """Stands for a store: every operation is the wrapped store's; a write is recorded first (an event as one of
    its own kind), with its arguments made plain."""

    def __init__(self, store: Any, rec: Recording) -> None:
        self._store = store
        self._rec = rec

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._store, name)
        if not callable(target) or name.startswith("_"):
            return target
        rec = self._rec

        def call(*args: Any, **kwargs: Any) -> Any:
            if name == "add_event" and len(args) == 1 and isinstance(args[0], Event):
                e = args[0]
                rec.add("event", {"at": e.at, "kind": e.kind, "subject": e.subject, "message": e.message})
            elif name.startswith(WRITE_PREFIXES):
                rec.add("write", {"op": name, "args": list(args), "kwargs": kwargs})
            else:
                rec.reads[name] = rec.reads.get(name, 0) + 1
            return target(*args, **kwargs)

        return call


@contextmanager
def seeded_secrets(seed: int, names: Names) -> Iterator[None]:
    """secrets' draws taken from a seeded generator for the while, each value named as it is drawn (lease tokens,
    the holder's suffix, id prefixes), so a run draws the same values and records them by name."""
    rng = random.Random(seed)
    saved = {f: getattr(secrets, f) for f in ("token_bytes", "token_hex", "token_urlsafe")}

    def drawn(make: Callable[[bytes], str]) -> Callable[[int | None], str]:
        def draw(n: int | None = None) -> str:
            value = make(rng.randbytes(32 if n is None else n))
            if len(value) >= 16:  # a shorter one could be part of another value by chance: left to HEX_RUN
                names.exact.append(value)
            return value
        return draw

    def token_bytes(n: int | None = None) -> bytes:
        return rng.randbytes(32 if n is None else n)

    secrets.token_bytes = token_bytes  # type: ignore[assignment]
    secrets.token_hex = drawn(bytes.hex)  # type: ignore[assignment]
    secrets.token_urlsafe = drawn(lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode())  # type: ignore[assignment]
    try:
        yield
    finally:
        for f, fn in saved.items():
            setattr(secrets, f, fn)
