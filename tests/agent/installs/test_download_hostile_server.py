"""download() against a release server that lies, trickles or never ends (raw sockets, so it can lie): bounded on
disk and in time, and nothing it did not vouch for is kept."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from llmgw.agent.installs.download import download
from llmgw.core.errors import InstallRefused

Serve = Callable[[socket.socket, str], None]  # (connection, request text)


@contextmanager
def raw_server(serve: Serve) -> Iterator[str]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def loop() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            req = b""
            while b"\r\n\r\n" not in req:
                req += c.recv(4096)
            threading.Thread(target=_run, args=(c, req.decode()), daemon=True).start()

    def _run(c: socket.socket, req: str) -> None:
        try:
            serve(c, req)
        except OSError:
            pass
        finally:
            c.close()

    threading.Thread(target=loop, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}/llama-b1-bin-ubuntu-x64.tar.gz"
    finally:
        stop.set()
        srv.close()


BODY = bytes(range(256)) * 4096  # 1 MiB
DIGEST = hashlib.sha256(BODY).hexdigest()


async def test_an_endless_body_over_the_limit_is_not_kept_on_disk(tmp_path: Path) -> None:
    """No Content-Length and no end: refused at max_bytes, and its junk is not kept as a .part for every later
    attempt to resume."""
    def serve(c: socket.socket, req: str) -> None:
        c.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        while True:
            c.sendall(b"\0" * 65536)

    with raw_server(serve) as url:
        dest = tmp_path / "llama-b1-bin-ubuntu-x64.tar.gz"
        for _ in range(2):
            with pytest.raises(InstallRefused) as e:
                await download(url, dest, DIGEST, lambda a, b: None, max_bytes=4 << 20)
            print("\n", e.value.reason, e.value)
        kept = sorted((p.name, p.stat().st_size) for p in tmp_path.iterdir())
        print("kept:", kept)
        assert not kept, f"junk from a refused endless body is kept: {kept}"


async def test_a_trickling_server_is_stopped_by_the_download_deadline(tmp_path: Path) -> None:
    """One byte every half second never trips the per-read timeout; the deadline on the whole download does."""
    def serve(c: socket.socket, req: str) -> None:
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n")
        for _ in range(1000):
            c.sendall(b"x")
            time.sleep(0.5)

    with raw_server(serve) as url:
        t0 = time.monotonic()
        with pytest.raises(InstallRefused) as e:
            await download(url, tmp_path / "a.tar.gz", DIGEST, lambda a, b: None, 16 << 30, timeout=1.0, deadline=3.0)
        assert e.value.reason == "DownloadFailed" and "the next attempt resumes it" in str(e.value)
        assert time.monotonic() - t0 < 10


async def test_a_206_that_lies_about_its_start_is_refused_and_dropped(tmp_path: Path) -> None:
    """A resume answered 206 from byte 0: refused for what it is (not blamed on the published digest), and what was
    kept is dropped so the next attempt starts over."""
    def serve(c: socket.socket, req: str) -> None:
        if "Range:" in req:
            c.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-%d/%d\r\nContent-Length: %d\r\n\r\n"
                      % (len(BODY) - 1, len(BODY), len(BODY)) + BODY)
        else:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)

    with raw_server(serve) as url:
        dest = tmp_path / "llama-b1-bin-ubuntu-x64.tar.gz"
        (tmp_path / (dest.name + ".part")).write_bytes(BODY[:1000])
        with pytest.raises(InstallRefused) as e:
            await download(url, dest, DIGEST, lambda a, b: None, 16 << 30)
        print("\n", e.value.reason, str(e.value)[:120])
        assert e.value.reason == "DownloadFailed" and "a range it was not asked for" in str(e.value)
        assert not dest.exists() and not (tmp_path / (dest.name + ".part")).exists()
        assert await download(url, dest, DIGEST, lambda a, b: None, 16 << 30) == dest  # next attempt: fine


async def test_more_than_content_length_is_not_written(tmp_path: Path) -> None:
    def serve(c: socket.socket, req: str) -> None:
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(BODY) + BODY
                  + b"\0" * (8 << 20))

    with raw_server(serve) as url:
        dest = tmp_path / "a.tar.gz"
        assert await download(url, dest, DIGEST, lambda a, b: None, 16 << 30) == dest
        assert dest.stat().st_size == len(BODY)
