"""The last day's GPU time and cost per key, as the dashboard and /api/status show them: read from the store's
hourly charges at most once per REFRESH seconds (charges change once per accounting window, not per request), so a
page view or a scrape costs no store read in between."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from llmgw.control.storage import Storage
from llmgw.control.usage_charges import name_of
from llmgw.core.errors import StoreError
from llmgw.records.chargeback import OPERATOR, ChargeRow

REFRESH = 10.0  # seconds a reading is shown before the store is read again


class KeyCharge(BaseModel):
    """One key's (or the operator's: key_id OPERATOR) GPU-seconds and their cost over the period."""

    key_id: str
    name: str = ""
    gpu_seconds: float = 0.0
    busy_s: float = 0.0
    load_s: float = 0.0
    idle_s: float = 0.0
    cost: float = 0.0


def by_key(charges: list[ChargeRow], names: Mapping[str, str]) -> list[KeyCharge]:
    """Per key, every model and hour summed; the operator's share last."""
    out: dict[str, KeyCharge] = {}
    for c in charges:
        k = out.get(c.key_id)
        if k is None:
            k = out[c.key_id] = KeyCharge(key_id=c.key_id, name=name_of(c.key_id, names))
        k.busy_s += c.busy_s
        k.load_s += c.load_s
        k.idle_s += c.idle_s
        k.gpu_seconds += c.gpu_s
        k.cost += c.cost
    return [out[k] for k in sorted(out, key=lambda k: (k == OPERATOR, k))]


class ChargeBook:
    """The charges since a time, re-read when older than REFRESH (by the injected clock); what was read before is
    shown while the store cannot be read."""

    def __init__(self, currency: str = "USD") -> None:
        self.currency = currency
        self._charges: list[ChargeRow] = []
        self._read_at: float | None = None

    async def since(self, storage: Storage, since: float) -> list[ChargeRow]:
        now = storage.clock.monotonic()
        if self._read_at is None or now - self._read_at >= REFRESH:
            try:
                self._charges = await storage.read(storage.store.charges_since, since)
            except StoreError:
                pass  # the store is out: the last reading does, and the next view tries again
            else:
                self._read_at = now
        return self._charges
