"""Running a long-lived coroutine until SIGINT or SIGTERM, with config errors printed before anything starts."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable

from llmgw.core.errors import LlmgwError


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def run_until_signal(main: Callable[[asyncio.Event], Awaitable[None]]) -> int:
    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    try:
        asyncio.run(runner())
    except LlmgwError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
