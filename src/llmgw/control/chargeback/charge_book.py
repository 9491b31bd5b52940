"""The last day's GPU time and cost per key, as the dashboard and /api/status show them: read from the store's
hourly charges at most once per REFRESH seconds (charges change once per chargeback window, not per request), so a
page view or a scrape costs no store read in between."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from llmgw.control.chargeback.charge_views import ChargesByKey, by_key
from llmgw.control.storage.storage import Storage
from llmgw.core.errors import StoreError
from llmgw.records.chargeback import ChargeRow

REFRESH = 10.0  # seconds a reading is shown before the store is read again


class ChargeBook:
    """The charges since a time, summed per key and model, re-read when older than REFRESH (by the injected clock);
    what was read before is shown while the store cannot be read."""

    def __init__(self, currency: str = "USD") -> None:
        self.currency = currency
        self._charges: list[ChargeRow] = []
        self._read_at: float | None = None  # when the charges shown were read
        self._tried_at: float | None = None  # when a read was last started, whether it worked or not
        self._reading: asyncio.Future[None] | None = None  # the read in flight
        self._shown: tuple[float | None, dict[str, str], ChargesByKey] | None = None  # summed once per reading

    async def charges_by_key(self, storage: Storage, since: float, names: Mapping[str, str]) -> ChargesByKey:
        """Per key (named), the operator's share last."""
        charges = await self.since(storage, since)
        shown = self._shown
        if shown is None or shown[0] != self._read_at or shown[1] != names:
            shown = self._shown = (self._read_at, dict(names), by_key(charges, names, self.currency))
        return shown[2]

    async def since(self, storage: Storage, since: float) -> list[ChargeRow]:
        """The last reading; a new one first if it is REFRESH old. One read at a time and one try per REFRESH, failed
        or not: while the store is out (a read may wait out a connect timeout) views show the last reading."""
        now = storage.clock.monotonic()
        starts = self._reading is None and (self._tried_at is None or now - self._tried_at >= REFRESH)
        if starts:
            self._tried_at = now
            self._reading = asyncio.ensure_future(self._read(storage, since, now))
        reading = self._reading
        if reading is not None and (starts or self._read_at is None):  # others show what was read before
            await asyncio.shield(reading)
        return self._charges

    async def _read(self, storage: Storage, since: float, now: float) -> None:
        try:
            self._charges = await storage.read(storage.store.charges_by_key_model, since)
            self._read_at = now
        except StoreError:
            pass  # the store is out: the last reading does, and a view after REFRESH tries again
        finally:
            self._reading = None
