"""Talks to the control plane: POST the whole observed state, get the whole desired state. Fails over in order."""

from __future__ import annotations

import logging
import ssl

import aiohttp
from pydantic import ValidationError

from llmgw.core.errors import UpstreamError
from llmgw.wire.messages import DesiredState, NodeReport

log = logging.getLogger(__name__)

HEARTBEAT_PATH = "/v1/agent/heartbeat"


class ControlPlaneClient:
    def __init__(self, urls: list[str], ssl_ctx: ssl.SSLContext, timeout: float) -> None:
        self.urls = urls
        self.current = 0
        self._ssl = ssl_ctx
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout),
                connector=aiohttp.TCPConnector(ssl=self._ssl),
            )
        return self._session

    async def heartbeat(self, report: NodeReport) -> DesiredState:
        """Try each control plane once, starting with the one that last answered."""
        errors: list[str] = []
        body = report.model_dump_json()
        for i in range(len(self.urls)):
            idx = (self.current + i) % len(self.urls)
            url = self.urls[idx].rstrip("/") + HEARTBEAT_PATH
            try:
                async with self._http().post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                    text = await r.text()
                    if r.status != 200:
                        # An answer is an answer: a refusal is not a reason to try another control plane.
                        raise UpstreamError(f"{url}: {r.status} {text.strip()[:300]}")
                    desired = DesiredState.model_validate_json(text)
            except (aiohttp.ClientError, TimeoutError, ssl.SSLError) as e:
                errors.append(f"{url}: {type(e).__name__}: {e}")
                continue
            except ValidationError as e:
                raise UpstreamError(f"{url}: unreadable desired state: {e}") from None
            if idx != self.current:
                log.warning("control plane failover: now talking to %s", self.urls[idx])
            self.current = idx
            return desired
        raise UpstreamError("no control plane answered: " + "; ".join(errors))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
