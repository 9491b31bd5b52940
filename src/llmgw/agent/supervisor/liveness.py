"""Whether a serving engine still answers a request, not only its health check: an engine can answer `/health`
with 200 while every completion hangs. An idle shard (its own gauges say nothing runs or waits: traffic would show
a hang to the router first) is asked for a one-token completion every IDLE_EVERY_S; one that gets no answer
within the timeout, or a 5xx, takes the shard out of ready with the engine's words until a later probe (every
WEDGED_EVERY_S) is answered. Any 2xx-4xx is an answer: a model that does not do completions still answered.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp

from llmgw.wire.messages import EngineLoad

IDLE_EVERY_S = 60.0
WEDGED_EVERY_S = 10.0
TIMEOUT_S = 30.0
WORDS_MAX = 300


@dataclass
class EngineLiveness:
    due_at: float | None = None  # the clock's monotonic time of the next probe; None: not scheduled yet
    wedged: str = ""  # why the engine is taken for hung; "" while it answers
    task: asyncio.Task[str] | None = None  # the probe in flight: its words, "" when answered


def idle(load: EngineLoad | None) -> bool:
    """Nothing runs or waits in the engine, as far as its gauges tell; without gauges, taken as idle (a one-token
    request costs little)."""
    return load is None or not (load.running or load.waiting)


async def one_token(session: aiohttp.ClientSession, url: str, model: str, headers: dict[str, str],
                    timeout: float) -> str:
    """Ask for one token; "" when the engine answered, else what went wrong, in words."""
    body = {"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0}
    t0 = time.monotonic()  # for the words only
    try:
        async with session.post(url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            text = (await r.content.read(WORDS_MAX)).decode("utf-8", "replace")
            if r.status >= 500:
                return f"a one-token completion was answered {r.status}: {' '.join(text.split())[:200]}"
            return ""
    except TimeoutError:
        return (f"the engine answers its health check but a one-token completion got no answer within "
                f"{timeout:.0f}s")
    except aiohttp.ClientError as e:
        return f"a one-token completion failed after {time.monotonic() - t0:.1f}s: {type(e).__name__}: {e}"[:WORDS_MAX]
