"""A release server on loopback, made by the test: real HTTP, real archives, and the faults of a real one
(a connection cut part way, a file that is not there, a download held open while the test looks at the node)."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNK = 256 * 1024


@dataclass
class Release:
    files: dict[str, bytes] = field(default_factory=dict)
    cut_after: dict[str, int] = field(default_factory=dict)  # send this many bytes of the body, then hang up
    hold: dict[str, threading.Event] = field(default_factory=dict)  # send one chunk, then wait for the event
    ranges: list[tuple[str, str]] = field(default_factory=list)  # (name, Range header) of every request
    ignore_range: set[str] = field(default_factory=set)  # answer these whole (200) whatever Range asks
    trickle: dict[str, float] = field(default_factory=dict)  # send 1 kB, then pause this long, and again
    port: int = 0

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"


def _handler(rel: Release) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            name = self.path.lstrip("/").split("?", 1)[0]
            rel.ranges.append((name, self.headers.get("Range", "")))
            body = rel.files.get(name)
            if body is None:
                self.send_error(404, "Not Found")
                return
            start = 0
            rng = "" if name in rel.ignore_range else self.headers.get("Range", "")
            if rng.startswith("bytes=") and rng.endswith("-"):
                start = int(rng[6:-1])
                if start >= len(body):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(body)}")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(body) - start))
            self.end_headers()
            rest = body[start:]
            cut = rel.cut_after.pop(name, None)
            if cut is not None:
                self.wfile.write(rest[:cut])
                self.wfile.flush()
                self.close_connection = True
                return
            pause = rel.trickle.get(name)
            if pause is not None:
                stop = threading.Event()
                for i in range(0, len(rest), 1024):
                    self.wfile.write(rest[i : i + 1024])
                    self.wfile.flush()
                    stop.wait(pause)  # the server's own pace: a trickle
                return
            gate = rel.hold.get(name)
            if gate is not None:
                self.wfile.write(rest[:CHUNK])
                self.wfile.flush()
                gate.wait(120)
                rest = rest[CHUNK:]
            for i in range(0, len(rest), CHUNK):
                self.wfile.write(rest[i : i + CHUNK])

    return Handler


@contextmanager
def release_server(rel: Release, tls: ssl.SSLContext | None = None) -> Iterator[Release]:
    """Serve `rel` on loopback; with `tls`, over TLS (a peer node that misbehaves, say)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(rel))
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    httpd.daemon_threads = True
    rel.port = httpd.server_address[1]
    # serve_forever looks for shutdown() every poll_interval (0.5 s by default): each test's teardown waited that long
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    t.start()
    try:
        yield rel
    finally:
        for gate in rel.hold.values():
            gate.set()
        httpd.shutdown()
        httpd.server_close()
