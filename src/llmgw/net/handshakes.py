"""TLS connections before their handshake ends, counted from the accept.

asyncio tells a TLS server's protocol of a connection only once its handshake is done, so the listener's limiter
(net/listeners.py) never sees one that never starts it: a flood of them held a control plane's file
descriptors until each one's handshake deadline. Here each is counted from its accept, at most `cap` at once; at
the cap the oldest is closed for the new one. An agent's handshake takes milliseconds, so only a connection that
stalls is ever the oldest, and a flood must outpace real handshakes to delay one.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from asyncio import sslproto
from collections.abc import Callable
from typing import Any

from llmgw.net.guards import OncePerKind

log = logging.getLogger(__name__)

HANDSHAKES_MAX = 256


def handshake_cap(cap: int) -> int:
    """Connections a TLS listener with a cap of `cap` lets wait in their handshake: an eighth, 8 to 256."""
    return max(8, min(HANDSHAKES_MAX, cap // 8))


class Handshakes:
    """The connections of one TLS listener still in their handshake, oldest first."""

    def __init__(self, name: str, cap: int) -> None:
        self.name = name
        self.cap = cap
        self.pending: dict[Counted, None] = {}
        self.evicted = 0
        self._quiet = OncePerKind(60.0)

    def factory(self, app: Callable[[], asyncio.Protocol], tls: ssl.SSLContext,
                timeout: float) -> Callable[[], asyncio.BaseProtocol]:
        """The protocol factory of a plain TCP server that speaks TLS to `app`, with a handshake deadline."""
        loop = asyncio.get_running_loop()

        def make() -> asyncio.BaseProtocol:
            return Counted(self, loop, app(), tls, None, server_side=True, ssl_handshake_timeout=timeout)

        return make

    def began(self, conn: Counted) -> None:
        if len(self.pending) >= self.cap:
            oldest = next(iter(self.pending))
            self.ended(oldest)
            oldest.abort()
            self.evicted += 1
            n = self._quiet.due("evicted", asyncio.get_running_loop().time())
            if n:
                log.warning("%s listener: %d connection(s) closed in the last minute for new ones: %d at once had not "
                            "finished their TLS handshake", self.name, n, self.cap)
        self.pending[conn] = None

    def ended(self, conn: Counted) -> None:
        self.pending.pop(conn, None)


class Counted(sslproto.SSLProtocol):
    """asyncio's TLS protocol, telling its Handshakes when a connection starts and ends its handshake."""

    def __init__(self, handshakes: Handshakes, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handshakes = handshakes
        self._raw: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._raw = transport
        self._handshakes.began(self)
        super().connection_made(transport)

    def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
        self._handshakes.ended(self)
        super()._on_handshake_complete(handshake_exc)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._handshakes.ended(self)
        super().connection_lost(exc)

    def abort(self) -> None:
        if self._raw is not None:
            self._raw.abort()  # type: ignore[attr-defined]
