"""Talks to the control plane: POST the whole observed state, get the whole desired state, or send a renewal for
an unchanged one (wire/renewal.py). Fails over in order. A control plane of an older wire version is sent reports in
its own version (agent/report_versions.py), once it has said which in its refusal."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from aiohttp.client_proto import ResponseHandler
from pydantic import ValidationError

from llmgw.agent.report_versions import OLDEST_WRITTEN, report_in
from llmgw.core.errors import ControlPlaneUnreachable, UpstreamError
from llmgw.core.strict import Strict
from llmgw.pki.tls import speaks_as_node
from llmgw.wire.messages import WIRE_VERSION, DesiredState, NodeReport
from llmgw.wire.renewal import RENEWAL_PATH, REPORT_REFRESH_S, SEND_REPORT, Renewal, RenewalAnswer

log = logging.getLogger(__name__)


class ControlPlaneConnector(aiohttp.TCPConnector):
    """Connections whose server proved, in the handshake, to be a control plane: our CA's certificate for the
    address dialled, and not a node's. Node certificates can serve too (the weights a node holds, to its peers),
    so without this a node whose certificate names the control plane's address could pass for it, and be sent
    the report and obeyed. Checked before a byte is sent."""

    async def _wrap_create_connection(self, *args: Any, **kwargs: Any) -> tuple[asyncio.Transport, ResponseHandler]:
        transport, proto = await super()._wrap_create_connection(*args, **kwargs)
        if speaks_as_node(transport.get_extra_info("ssl_object")):
            transport.close()
            raise aiohttp.ClientConnectionError("the server presented a node's certificate, not a control plane's")
        return transport, proto

HEARTBEAT_PATH = "/v1/agent/heartbeat"
WATCH_PATH = "/v1/agent/watch"
WATCH_TIMEOUT_S = 40.0  # the control plane answers a watch within 25 s (agent_api.WATCH_HOLD_S)
MAX_WATCH_BYTES = 4096


Answer = TypeVar("Answer", bound=Strict)


def _read(url: str, text: str, kind: type[Answer], what: str = "desired state") -> Answer:
    """The answer, once its version is one this agent speaks: a newer control plane's fields would otherwise read as
    a malformed answer."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise UpstreamError(f"{url}: the {what} is not JSON") from None
    version = data.get("version") if isinstance(data, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= WIRE_VERSION:
        raise UpstreamError(f"{url}: {what} wire version {str(version)[:20]} not understood by this agent "
                            f"(speaks {WIRE_VERSION}): keep nodes and control planes on the same release")
    try:
        return kind.model_validate(data)
    except ValidationError as e:
        raise UpstreamError(f"{url}: unreadable {what}: {e}") from None


def _desired(url: str, text: str) -> DesiredState:
    return _read(url, text, DesiredState)


def _field(text: str, key: str) -> object:
    """One field of a JSON object answer (a refusal), or None."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return data.get(key) if isinstance(data, dict) else None


@dataclass(frozen=True)
class SendReport:
    """A renewal the control plane did not take: the node sends its report whole, now. `words`: why, as it said."""

    words: str


class ControlPlaneClient:
    """`make_ssl` builds the TLS context from the certificate files; when any of `watch` changes (a renewed
    certificate copied in), the next heartbeat uses the new files without restarting the agent. A control plane
    that reads an older wire version is asked in the newest again after `retry_newest_s`."""

    def __init__(
        self,
        urls: list[str],
        make_ssl: Callable[[], ssl.SSLContext],
        timeout: float,
        watch: Sequence[str] = (),
        retry_newest_s: float = REPORT_REFRESH_S,
    ) -> None:
        self.urls = urls
        self.current = 0
        self._make_ssl = make_ssl
        self._watch = list(watch)
        self._stamp = self._stamps()
        self._ssl = make_ssl()
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        # control planes that read an older wire version: the version, and when (the event loop's time) they said so
        self._older: dict[str, tuple[int, float]] = {}
        self._retry_newest_s = retry_newest_s

    @property
    def url(self) -> str:
        """The control plane that last answered (the one its renewal token is sent back to)."""
        return self.urls[self.current].rstrip("/")

    def _stamps(self) -> list[float]:
        out = []
        for p in self._watch:
            try:
                out.append(os.stat(p).st_mtime)
            except OSError:
                out.append(-1.0)
        return out

    async def _reload_if_renewed(self) -> None:
        stamp = self._stamps()
        if stamp == self._stamp:
            return
        try:
            ctx = self._make_ssl()
        except Exception as e:  # a half-copied pair: keep the old one and try again next time
            log.warning("certificate files changed but cannot be loaded yet: %s", e)
            return
        self._stamp, self._ssl = stamp, ctx
        log.info("certificate files changed: using the renewed certificate from now on")
        await self.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout),
                connector=ControlPlaneConnector(ssl=self._ssl),
            )
        return self._session

    async def heartbeat(self, report: NodeReport) -> DesiredState:
        """Try each control plane once, starting with the one that last answered."""
        await self._reload_if_renewed()
        errors: list[str] = []
        for i in range(len(self.urls)):
            idx = (self.current + i) % len(self.urls)
            base = self.urls[idx].rstrip("/")
            try:
                desired = await self._report_to(base, report)
            except (aiohttp.ClientError, TimeoutError, ssl.SSLError) as e:
                errors.append(f"{base + HEARTBEAT_PATH}: {type(e).__name__}: {e}")
                continue
            if idx != self.current:
                log.warning("control plane failover: now talking to %s", self.urls[idx])
            self.current = idx
            return desired
        raise ControlPlaneUnreachable("no control plane answered: " + "; ".join(errors))

    async def _post(self, url: str, body: str) -> tuple[int, str]:
        async with self._http().post(url, data=body, headers={"Content-Type": "application/json"},
                                     allow_redirects=False) as r:  # only the server the TLS check vouched for
            return r.status, await r.text()

    async def _report_to(self, base: str, report: NodeReport) -> DesiredState:
        """The report to one control plane, in the newest version it reads. An answer is an answer: a refusal is not a
        reason to try another control plane."""
        url = base + HEARTBEAT_PATH
        version = self._version_at(base)
        status, text = await self._post(url, report_in(report, version))
        speaks = _field(text, "speaks") if status == 422 else None
        if isinstance(speaks, int) and not isinstance(speaks, bool) and OLDEST_WRITTEN <= speaks < version:
            if self._older.get(base, (0, 0.0))[0] != speaks:
                log.warning("control plane %s reads wire version %d: sending it every report whole, in that version "
                            "(upgrade control planes before agents)", base, speaks)
            self._older[base] = (speaks, asyncio.get_running_loop().time())
            status, text = await self._post(url, report_in(report, speaks))
        if status != 200:
            raise UpstreamError(f"{url}: {status} {text.strip()[:300]}")
        return _desired(url, text)

    def _version_at(self, base: str) -> int:
        """The version a control plane last said it reads; the newest again once retry_newest_s has passed (it may
        have been upgraded since)."""
        version, since = self._older.get(base, (WIRE_VERSION, 0.0))
        if version < WIRE_VERSION and asyncio.get_running_loop().time() - since >= self._retry_newest_s:
            return WIRE_VERSION
        return version

    async def renew(self, renewal: Renewal) -> RenewalAnswer | SendReport:
        """Send the renewal to the control plane that answered the last report (the only one its token names).
        SendReport: it holds no such token, or takes no renewals (404). A connection failure raises
        ControlPlaneUnreachable, any other refusal UpstreamError."""
        await self._reload_if_renewed()
        url = self.url + RENEWAL_PATH
        try:
            status, text = await self._post(url, renewal.model_dump_json())
        except (aiohttp.ClientError, TimeoutError, ssl.SSLError) as e:
            raise ControlPlaneUnreachable(f"{url}: {type(e).__name__}: {e}") from None
        if status == SEND_REPORT:
            words = _field(text, "error")
            return SendReport(str(words)[:300] if words else text.strip()[:300])
        if status == 404:
            return SendReport(f"{url}: 404 (no renewals here)")
        if status != 200:
            raise UpstreamError(f"{url}: {status} {text.strip()[:300]}")
        return _read(url, text, RenewalAnswer, "renewal answer")

    async def watch(self, seen: str) -> str | None:
        """Wait, at the control plane that last answered a heartbeat, until the digest of the shards this node is to
        run differs from `seen` (or the control plane's hold ends); the digest it answers. None: that control plane
        does not serve watches (an older release): heartbeats alone keep the node right."""
        await self._reload_if_renewed()
        url = self.urls[self.current].rstrip("/") + WATCH_PATH
        try:
            async with self._http().get(url, params={"seen": seen}, allow_redirects=False,
                                        timeout=aiohttp.ClientTimeout(total=WATCH_TIMEOUT_S)) as r:
                text = (await r.content.read(MAX_WATCH_BYTES)).decode("utf-8", "replace")
                if r.status == 404:
                    return None
                if r.status != 200:
                    raise UpstreamError(f"{url}: {r.status} {text.strip()[:300]}")
        except (aiohttp.ClientError, TimeoutError, ssl.SSLError) as e:
            raise ControlPlaneUnreachable(f"{url}: {type(e).__name__}: {e}") from None
        try:
            digest = json.loads(text)["digest"]
        except (ValueError, TypeError, KeyError, RecursionError):
            raise UpstreamError(f"{url}: unreadable watch answer") from None
        if not isinstance(digest, str) or len(digest) > 64:
            raise UpstreamError(f"{url}: unreadable watch answer")
        return digest

    async def close(self) -> None:
        # forgotten before it is closed: a request begun meanwhile opens a new session instead of using a closing one
        old, self._session = self._session, None
        if old is not None:
            await old.close()
