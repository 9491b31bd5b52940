"""A real PostgreSQL for tests (bench/postgres.py), skipped where its binaries are missing, failed instead in CI."""

from __future__ import annotations

from bench.postgres import MISSING, binaries
from bench.postgres import PASSWORD as PASSWORD  # re-exported: the tests import it from here
from bench.postgres import Postgres as Server

from tests.tools import unavailable


def require_postgres() -> tuple[str, str]:
    """initdb's and pg_ctl's paths; without them, fail in CI (or with LLMGW_REQUIRE_TOOLS=1), skip elsewhere."""
    found = binaries()
    if found is None:
        unavailable(MISSING)
    return found


class Postgres(Server):
    def __init__(self) -> None:
        super().__init__(require_postgres())
