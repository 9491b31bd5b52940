"""Tools a test needs from the machine (Debian packages .ci/run installs): missing, the test fails in CI (or with
LLMGW_REQUIRE_TOOLS=1) and is skipped elsewhere, saying how to install them."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(why: str) -> NoReturn:
    if os.environ.get("CI") or os.environ.get("LLMGW_REQUIRE_TOOLS") == "1":
        pytest.fail(f"{why}; required because CI or LLMGW_REQUIRE_TOOLS=1 is set")
    pytest.skip(f"{why}; set LLMGW_REQUIRE_TOOLS=1 to make this a failure")
