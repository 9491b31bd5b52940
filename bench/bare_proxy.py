"""The least a Python proxy can do on llmgw's HTTP stack (aiohttp server + aiohttp client): no auth, routing, usage
or JSON parsing; read the body, POST it upstream, relay the answer (chunk by chunk for text/event-stream). The
router is measured against it (docs/benchmarks.md, "Router").

Run: python -m bench.bare_proxy --port 18001 --upstream http://127.0.0.1:18000 [--no-uvloop]
"""

from __future__ import annotations

import argparse

import aiohttp
from aiohttp import web

from bench.standin import serve


def make_app(upstream: str) -> web.Application:
    session: aiohttp.ClientSession | None = None

    async def handle(request: web.Request) -> web.StreamResponse:
        nonlocal session
        if session is None:
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False)
        body = await request.read()
        async with session.post(upstream + request.path, data=body, headers={"Content-Type": "application/json"}) as up:
            ctype = up.headers.get("Content-Type", "application/json")
            if not ctype.startswith("text/event-stream"):
                return web.Response(status=up.status, body=await up.read(), headers={"Content-Type": ctype})
            resp = web.StreamResponse(status=up.status, headers={"Content-Type": ctype, "Cache-Control": "no-cache"})
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    async def close(app: web.Application) -> None:
        if session is not None:
            await session.close()

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    app.on_cleanup.append(close)
    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True, help="base URL of the engine, e.g. http://127.0.0.1:18000")
    ap.add_argument("--no-uvloop", action="store_true", help="serve on asyncio's default loop")
    args = ap.parse_args()
    serve(make_app(args.upstream.rstrip("/")), args.host, args.port, uvloop=not args.no_uvloop)


if __name__ == "__main__":
    main()
