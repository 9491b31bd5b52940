"""A real PostgreSQL of a run's own, for the tests (tests/pg.py) and the benches that measure a store on it: Debian's
server binaries, a cluster made by initdb in a temporary directory, run by pg_ctl as the unprivileged `postgres` user
when the run is root's, on a loopback port. The `llmgw` role has a password (scram-sha-256 over TCP), so the store
reaches it the way a deployment does."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Self

import psycopg

from bench.addresses import free_port

PASSWORD = "pg-test-password-9f3c"
MISSING = "PostgreSQL's server binaries not found (apt-get install postgresql)"


def pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return versions[-1] if versions else None


def binaries() -> tuple[str, str] | None:
    """initdb's and pg_ctl's paths, or None where either is missing."""
    initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
    return (initdb, pg_ctl) if initdb and pg_ctl else None


class Postgres:
    def __init__(self, binaries: tuple[str, str]) -> None:
        self.initdb, self.pg_ctl = binaries
        self.dir = Path(tempfile.mkdtemp(prefix="llmgw-pg-"))  # under /tmp: the postgres user can reach it
        self.data = self.dir / "data"
        self.port = free_port()
        self._dbs = 0

    def _as_owner(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    def _ctl_start(self) -> list[str]:
        return [self.pg_ctl, "-D", str(self.data), "-w", "-t", "60", "-l", str(self.dir / "log"), "-o",
                f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=500",
                "start"]

    def outage(self) -> None:
        """Stop the server (fast: its connections are cut), keeping its data, until back()."""
        out = self._as_owner([self.pg_ctl, "-D", str(self.data), "-w", "-m", "fast", "stop"])
        assert out.returncode == 0, out.stdout + out.stderr

    def back(self) -> None:
        out = self._as_owner(self._ctl_start())
        assert out.returncode == 0, out.stdout + out.stderr

    def start(self) -> Self:
        pw = self.dir / "pw"
        pw.write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
            shutil.chown(pw, "postgres")
        self.dir.chmod(0o700)
        for argv in (
            [self.initdb, "-D", str(self.data), "-U", "llmgw", f"--pwfile={pw}", "--auth-local=trust",
             "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync"],
            self._ctl_start(),
        ):
            out = self._as_owner(argv)
            if out.returncode != 0:
                log = (self.dir / "log").read_text(errors="replace")[-2000:] if (self.dir / "log").exists() else ""
                raise RuntimeError(f"{argv[0]} failed: {out.stdout}{out.stderr}{log}")
        return self

    def dsn(self, db: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=llmgw dbname={db}"

    def fresh_db(self) -> str:
        """A new, empty database; its DSN (without the password)."""
        self._dbs += 1
        name = f"t{self._dbs}"
        with psycopg.connect(self.dsn(), password=PASSWORD, autocommit=True) as c:
            c.execute(f"CREATE DATABASE {name}")
        return self.dsn(name)

    def stop(self) -> None:
        self._as_owner([self.pg_ctl, "-D", str(self.data), "-m", "immediate", "stop"])
        shutil.rmtree(self.dir, ignore_errors=True)
