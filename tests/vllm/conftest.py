"""The vLLM stage's shared fixture: `running` (every cluster a test starts is stopped at its end, pass or fail)."""

from __future__ import annotations

from tests.integration.conftest import running

__all__ = ["running"]
