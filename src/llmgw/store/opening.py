"""The store server.yaml names, opened; and the lock that keeps a second server off a SQLite file."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from llmgw.config.server import StoreConfig
from llmgw.core.errors import ConfigError, StoreError
from llmgw.store.base import Store
from llmgw.store.postgres import PostgresStore
from llmgw.store.sqlite import SqliteStore


def password_of(cfg: StoreConfig) -> str:
    if cfg.password_file:
        try:
            return Path(cfg.password_file).read_text().strip()
        except OSError as e:
            raise ConfigError("server.yaml", [f"store.password_file {cfg.password_file}: {e.strerror or e}"]) from None
    if cfg.password_env:
        value = os.environ.get(cfg.password_env)
        if value is None:
            raise ConfigError("server.yaml", [f"store.password_env names {cfg.password_env}, which is not set"])
        return value
    return ""


def open_store(cfg: StoreConfig) -> Store:
    if cfg.kind == "postgres":
        return PostgresStore(cfg.dsn, password_of(cfg)).open()
    return SqliteStore(cfg.path).open()


def hold_sqlite(cfg: StoreConfig) -> IO[str] | None:
    """For a SQLite store, an exclusive lock beside the file for as long as the returned file stays open: a second
    server on the same file would be a second writer of replicas and nodes, each overwriting the other. None for
    PostgreSQL, which several servers share."""
    if cfg.kind != "sqlite" or cfg.path == ":memory:":
        return None
    path = Path(os.path.abspath(cfg.path) + ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")  # held open for the server's life
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        other = f.read().strip()[:20]
        f.close()
        raise StoreError(f"another llmgw server (pid {other or 'unknown'}) already uses the SQLite store "
                         f"{cfg.path}: one server per SQLite file (several servers need store.kind postgres)") from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f
