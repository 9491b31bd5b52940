"""A fast engine stand-in: answers /v1/chat/completions at once from precomputed bytes, a chat.completion or 32 SSE
chunks (with a usage chunk when asked) and `data: [DONE]`. It costs as little CPU as it can, since it shares the
cores with the proxy under test and the load generator (docs/benchmarks.md, "Router": what runs).

Run: python -m bench.standin --port 18000 [--no-uvloop]
"""

from __future__ import annotations

import argparse
import json
import time

from aiohttp import web

MODEL = "bench"
TOKENS = 30  # content chunks; with the role and finish chunks that makes 32
STREAM_CHUNKS = TOKENS + 2
PROMPT_TOKENS = 8
WORDS = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do".split()


def _sse(obj: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _bodies() -> tuple[bytes, list[bytes], list[bytes]]:
    """The whole answer, and the stream's messages without and with include_usage."""
    created = int(time.time())
    usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": TOKENS, "total_tokens": PROMPT_TOKENS + TOKENS}
    tokens = [(" " if i else "") + WORDS[i % len(WORDS)] for i in range(TOKENS)]
    whole = json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": created,
            "model": MODEL,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "".join(tokens)}, "finish_reason": "length"}
            ],
            "usage": usage,
        }
    ).encode()

    def stream(include_usage: bool) -> list[bytes]:
        def chunk(delta: dict[str, str], finish: str | None) -> bytes:
            c: dict[str, object] = {
                "id": "chatcmpl-bench",
                "object": "chat.completion.chunk",
                "created": created,
                "model": MODEL,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            if include_usage:
                c["usage"] = None
            return _sse(c)

        events = [chunk({"role": "assistant", "content": ""}, None)]
        events += [chunk({"content": t}, None) for t in tokens]
        events.append(chunk({}, "length"))
        if include_usage:
            events.append(
                _sse(
                    {
                        "id": "chatcmpl-bench",
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": MODEL,
                        "choices": [],
                        "usage": usage,
                    }
                )
            )
        events.append(b"data: [DONE]\n\n")
        return events

    return whole, stream(False), stream(True)


def make_app() -> web.Application:
    whole, plain, with_usage = _bodies()
    models = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]}).encode()

    async def chat(request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        if not body.get("stream"):
            return web.Response(body=whole, content_type="application/json")
        options = body.get("stream_options") or {}
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for e in with_usage if options.get("include_usage") else plain:
            await resp.write(e)
        await resp.write_eof()
        return resp

    async def list_models(request: web.Request) -> web.Response:
        return web.Response(body=models, content_type="application/json")

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/health", health)
    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--no-uvloop", action="store_true", help="serve on asyncio's default loop")
    args = ap.parse_args()
    serve(make_app(), args.host, args.port, uvloop=not args.no_uvloop)


def serve(app: web.Application, host: str, port: int, *, uvloop: bool) -> None:
    """Run `app` until SIGTERM/SIGINT, on uvloop when asked and installed; no access log, no banner."""
    loop = None
    if uvloop:
        try:
            import uvloop as _uvloop
        except ImportError:
            pass
        else:
            loop = _uvloop.new_event_loop()
    web.run_app(app, host=host, port=port, access_log=None, print=None, loop=loop)


if __name__ == "__main__":
    main()
