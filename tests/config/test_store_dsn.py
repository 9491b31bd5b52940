"""The PostgreSQL DSN names where and who, never a secret: it is read the way libpq reads it, so a password in a
URI, in its query, or a file of passwords the DSN points at, is refused by `llmgw server --check` and never shown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml


def _check(tmp_path: Path, dsn: str) -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "server.yaml"
    store = {"kind": "postgres", "dsn": dsn, "password_env": "PGPW"}
    cfg.write_text(yaml.safe_dump({"tls": {"ca": "ca", "cert": "c", "key": "k"}, "store": store}))
    return subprocess.run([sys.executable, "-m", "llmgw.cli.main", "server", "-c", str(cfg), "--check"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("dsn", [
    "postgresql://llmgw:hunter2@db.internal:5432/llmgw",
    "postgres://llmgw@db.internal/llmgw?password=hunter2",
    "host=db.internal user=llmgw passfile=/root/.pgpass-hunter2",
    "host=db.internal user=llmgw password = hunter2",
    "host=db.internal user=llmgw sslpassword=hunter2",
])
def test_a_secret_in_the_dsn_is_refused_and_not_repeated(tmp_path: Path, dsn: str) -> None:
    r = _check(tmp_path, dsn)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "store.dsn must not hold" in r.stderr
    assert "hunter2" not in r.stdout + r.stderr


@pytest.mark.parametrize("dsn", [
    "host=db.internal port=5432 dbname=llmgw user=llmgw",
    "postgresql://llmgw@db.internal:5432/llmgw?sslmode=verify-full",
    "host=db.internal dbname=password_history user=llmgw",  # the word in a value is no password
])
def test_a_dsn_without_a_secret_passes(tmp_path: Path, dsn: str) -> None:
    r = _check(tmp_path, dsn)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.real  # processes (tests/tiers.py)
def test_an_unreadable_dsn_is_refused_in_words(tmp_path: Path) -> None:
    r = _check(tmp_path, "host=db.internal user='llmgw")
    assert r.returncode == 2 and "store.dsn is not a valid" in r.stderr
