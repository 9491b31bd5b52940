from tests.integration.conftest import running  # noqa: F401  (a fixture: every cluster a test started is stopped)
