"""A stand-in for the Hugging Face hub: the part of its HTTP API huggingface_hub uses to resolve and download a
model, served from directories on disk, with counters and fault switches for tests and benchmarks.

- `GET /api/models/{repo}[/revision/{rev}]` (`?blobs=true`: sizes and digests), `GET /api/models/{repo}/tree/{rev}`.
- `HEAD|GET /{repo}/resolve/{rev}/{path}`: small files directly (ETag = git blob id), LFS files by a 302 to a
  CDN-like site on a second port (another origin, as the real CDN is: a client drops its token there), with
  `X-Linked-Etag` (sha256) and `X-Linked-Size`. Ranges `bytes=N-[M]`.
- Errors as the hub gives them: `X-Error-Code` RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo.
- `python -m llmgw.sim.hub --listen HOST:PORT --repo ORG/NAME=DIR [--gated|--private --token-file F]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import secrets
import signal
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from llmgw.sim.hub_api import ApiHandlers, HubError, ServedFile
from llmgw.sim.hub_repo import LFS_THRESHOLD, HubRepo

__all__ = ["HubHandle", "HubRepo", "start_hub"]


@dataclass
class HubCounters:
    """What the hub served: body bytes per repository file (API site and CDN together), requests per URL path, and
    the requests that carried an Authorization header (method, site, path)."""

    bytes_sent: Counter[str] = field(default_factory=Counter)
    requests: Counter[str] = field(default_factory=Counter)
    authorized: list[tuple[str, str, str]] = field(default_factory=list)
    sending: int = 0  # bodies being sent now (a paced one may outlive the reader that asked for it)

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_sent.values())

    def reset(self) -> None:
        self.bytes_sent.clear()
        self.requests.clear()
        self.authorized.clear()


@dataclass
class SimHubState:
    repos: dict[str, HubRepo]
    tokens: frozenset[str]
    counters: HubCounters = field(default_factory=HubCounters)
    cdn_url: str = ""
    key: bytes = field(default_factory=lambda: secrets.token_bytes(16))
    unavailable: bool = False  # answer 503 to everything
    bytes_per_second: float = 0.0  # 0: as fast as the loop goes

    def sign(self, repo: str, commit: str, path: str) -> str:
        return hmac.new(self.key, f"{repo}\0{commit}\0{path}".encode(), hashlib.sha256).hexdigest()[:32]

    def cdn_location(self, repo: str, commit: str, path: str) -> str:
        return f"{self.cdn_url}/cdn-lfs/{repo}/{commit}/{quote(path)}?sig={self.sign(repo, commit, path)}"


def make_app(state: SimHubState, with_cdn: bool = False) -> web.Application:
    """The hub's API and resolve site (and the CDN's path, `with_cdn`); `/_standin/counters` tells what it served
    (POST `/_standin/counters/reset` tells and zeroes them) to a bench that runs it as a process."""
    api = ApiHandlers(state.repos, state.tokens)
    served = _Serving(state)

    async def info(request: web.Request) -> web.StreamResponse:
        return web.json_response(api.answer(request.rel_url.raw_path, request.query,
                                            request.headers.get("Authorization", "")))

    async def resolve(request: web.Request) -> web.StreamResponse:
        found = api.resolve_file(request.rel_url.raw_path, request.headers.get("Authorization", ""))
        return await served.file(request, found)

    async def counters(request: web.Request) -> web.StreamResponse:
        c = state.counters
        answer = web.json_response({"bytes_sent": dict(c.bytes_sent), "total_bytes": c.total_bytes,
                                    "requests": dict(c.requests), "authorized": c.authorized})
        if request.method == "POST":  # what they were, then zeroed
            c.reset()
        return answer

    app = web.Application(middlewares=[_errors, _observe(state, "hub")])
    app.router.add_get("/_standin/counters", counters)
    app.router.add_post("/_standin/counters/reset", counters)
    app.router.add_get("/api/models/{tail:.+}", info)
    if with_cdn:
        app.router.add_get("/cdn-lfs/{tail:.+}", _cdn_handler(state))
    app.router.add_get("/{tail:.+/resolve/.+}", resolve)
    return app


def make_cdn_app(state: SimHubState) -> web.Application:
    """The CDN site LFS files are redirected to: content by a signed path, no token asked or wanted."""
    app = web.Application(middlewares=[_errors, _observe(state, "cdn")])
    app.router.add_get("/cdn-lfs/{tail:.+}", _cdn_handler(state))
    return app


def _cdn_handler(state: SimHubState) -> Handler:
    served = _Serving(state)

    async def cdn(request: web.Request) -> web.StreamResponse:
        repo_id, commit, path = _cdn_parts(request.rel_url.raw_path)
        repo = state.repos.get(repo_id)
        found = repo.commits.get(commit) if repo else None
        blob = found.files.get(path) if found else None
        if repo is None or blob is None or not hmac.compare_digest(
                request.query.get("sig", ""), state.sign(repo_id, commit, path)):
            raise HubError(403, "", "Request signature does not match")
        return await served.file(request, ServedFile(repo, commit, path, blob, cdn=True))

    return cdn


def _cdn_parts(raw_path: str) -> tuple[str, str, str]:
    parts = [unquote(p) for p in raw_path.split("/")[2:]]
    if len(parts) < 4:
        raise HubError(403, "", "Request signature does not match")
    return f"{parts[0]}/{parts[1]}", parts[2], "/".join(parts[3:])


def _observe(state: SimHubState, site: str) -> Middleware:
    @web.middleware
    async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.rel_url.path.startswith("/_standin/"):
            return await handler(request)
        state.counters.requests[request.rel_url.path] += 1
        if "Authorization" in request.headers:
            state.counters.authorized.append((request.method, site, request.rel_url.path))
        if state.unavailable:
            raise HubError(503, "", "Service Unavailable")
        return await handler(request)

    return observe


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except HubError as e:
        headers = {"X-Error-Message": e.message}
        if e.code:
            headers["X-Error-Code"] = e.code
        if e.commit:
            headers["X-Repo-Commit"] = e.commit
        return web.json_response({"error": e.message}, status=e.status, headers=headers)


class _Serving:
    """A file's answer: a 302 to the CDN for an LFS file asked of the hub, else its bytes (or part of them)."""

    def __init__(self, state: SimHubState) -> None:
        self.state = state

    async def file(self, request: web.Request, s: ServedFile) -> web.StreamResponse:
        b = s.blob
        head = {"X-Repo-Commit": s.commit, "Accept-Ranges": "bytes"}
        if b.lfs and not s.cdn:
            head |= {"Location": self.state.cdn_location(s.repo.repo_id, s.commit, s.path),
                     "X-Linked-Etag": f'"{b.sha256}"', "X-Linked-Size": str(b.size), "ETag": f'"{b.git_sha1}"'}
            return web.Response(status=302, headers=head)
        head["ETag"] = f'"{b.sha256 if b.lfs else b.git_sha1}"'
        start, end = _range(request.headers.get("Range", ""), b.size)
        if start >= end and b.size and request.headers.get("Range"):
            return web.Response(status=416, headers=head | {"Content-Range": f"bytes */{b.size}"})
        status = 206 if request.headers.get("Range") else 200
        if status == 206:
            head["Content-Range"] = f"bytes {start}-{end - 1}/{b.size}"
        resp = web.StreamResponse(status=status, headers=head)
        resp.content_length = end - start
        await resp.prepare(request)
        if request.method == "HEAD":
            return resp
        await self._send(request, resp, s, start, end)
        return resp

    async def _send(self, request: web.Request, resp: web.StreamResponse, s: ServedFile, start: int, end: int) -> None:
        cut = s.repo.truncated.get(s.path)
        stop = min(end, max(start, cut)) if cut is not None else end
        counters = self.state.counters
        counters.sending += 1
        try:
            for chunk in s.blob.chunks(start, stop):
                data = bytes(255 - c for c in chunk) if s.path in s.repo.corrupted else chunk
                if self.state.bytes_per_second > 0:
                    await asyncio.sleep(len(data) / self.state.bytes_per_second)  # pacing, as a slow link would
                if request.transport is None or request.transport.is_closing():
                    return  # the reader is gone (an agent killed mid-file): nothing more is sent, or counted
                counters.bytes_sent[s.path] += len(data)  # counted as handed over: a reader may finish first
                await resp.write(data)
        finally:
            counters.sending -= 1
        if stop < end and request.transport is not None:
            request.transport.close()  # the body ends early: the client sees the connection drop


def _range(header: str, size: int) -> tuple[int, int]:
    """[start, end) of `Range: bytes=N-` or `bytes=N-M`; the whole file without one; start >= end when it asks for
    nothing the file has."""
    if not header:
        return 0, size
    first, _, last = header.removeprefix("bytes=").partition("-")
    try:
        start = int(first)
        end = int(last) + 1 if last else size
    except ValueError:
        return size, 0
    return (start, min(end, size)) if 0 <= start < size and end > start else (size, 0)


class HubHandle:
    """A running stand-in hub: its URLs, repositories, counters, and fault switches."""

    def __init__(self, state: SimHubState, runners: Sequence[web.AppRunner], host: str) -> None:
        self.state = state
        self._runners = runners
        self._host = host
        self._sites: list[web.TCPSite] = []
        self.ports: tuple[int, ...] = ()

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.ports[0]}"

    @property
    def cdn_url(self) -> str:
        return self.state.cdn_url

    @property
    def counters(self) -> HubCounters:
        return self.state.counters

    def repo(self, repo_id: str) -> HubRepo:
        return self.state.repos[repo_id]

    async def _listen(self, ports: Sequence[int]) -> None:
        self._sites = [web.TCPSite(r, self._host, p) for r, p in zip(self._runners, ports, strict=False)]
        for site in self._sites:
            await site.start()
        self.ports = tuple(s._server.sockets[0].getsockname()[1] for s in self._sites)  # type: ignore[union-attr]
        self.state.cdn_url = f"http://{self._host}:{self.ports[-1]}"

    async def down(self, refuse: bool = True) -> None:
        """Unreachable: connections refused (`refuse`), or every request answered 503."""
        if not refuse:
            self.state.unavailable = True
            return
        for site in self._sites:
            await site.stop()
        self._sites = []

    async def up(self) -> None:
        self.state.unavailable = False
        if not self._sites:
            await self._listen(self.ports)

    def slow(self, bytes_per_second: float) -> None:
        self.state.bytes_per_second = bytes_per_second

    async def close(self) -> None:
        for runner in self._runners:
            await runner.cleanup()


async def start_hub(repos: Sequence[HubRepo], *, host: str = "127.0.0.1", port: int = 0, cdn_port: int | None = 0,
                    tokens: Sequence[str] = ()) -> HubHandle:
    """Serve `repos` on `host:port` (the hub) and `host:cdn_port` (its CDN, another origin as the real one is);
    port 0 picks a free one; `cdn_port=None` serves the CDN's path on the hub's own origin."""
    state = SimHubState({r.repo_id: r for r in repos}, frozenset(tokens))
    runners = [web.AppRunner(make_app(state, with_cdn=cdn_port is None), access_log=None)]
    if cdn_port is not None:
        runners.append(web.AppRunner(make_cdn_app(state), access_log=None))
    for runner in runners:
        await runner.setup()
    handle = HubHandle(state, runners, host)
    await handle._listen((port, cdn_port or 0))
    return handle


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m llmgw.sim.hub", description="a stand-in for the Hugging Face hub")
    p.add_argument("--listen", required=True, help="HOST:PORT of the hub's API")
    p.add_argument("--cdn-port", type=int, default=0,
                   help="port of its CDN site (default: any free one; -1: on the hub's own origin)")
    p.add_argument("--repo", action="append", required=True, metavar="ORG/NAME=DIR", help="a repository to serve")
    p.add_argument("--gated", action="store_true", help="every repository is gated: files need the token")
    p.add_argument("--private", action="store_true", help="every repository is private: everything needs the token")
    p.add_argument("--token-file", type=Path, help="the token the hub accepts")
    p.add_argument("--lfs-threshold", type=int, default=LFS_THRESHOLD)
    return p.parse_args(argv)


async def _serve(args: argparse.Namespace) -> int:
    host, _, port = args.listen.rpartition(":")
    repos = []
    for spec in args.repo:
        repo_id, _, path = spec.partition("=")
        repos.append(HubRepo.from_dir(repo_id, Path(path), lfs_threshold=args.lfs_threshold,
                                      gated=args.gated, private=args.private))
    tokens = [args.token_file.read_text().strip()] if args.token_file else []
    cdn_port = None if args.cdn_port < 0 else args.cdn_port
    hub = await start_hub(repos, host=host, port=int(port), cdn_port=cdn_port, tokens=tokens)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(f"listening on {hub.url}", flush=True)
    await stop.wait()
    await hub.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(_serve(args))
    except (OSError, ValueError) as e:
        print(f"stand-in hub: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
