"""The integration tests' `running` fixture: every cluster a test starts is stopped at its end, pass or fail."""

from tests.integration.conftest import running

__all__ = ["running"]
