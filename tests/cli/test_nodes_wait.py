"""`llmgw ctl nodes wait` against a management API that drops a connection without answering."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from typer.testing import CliRunner

from llmgw.cli.main import app


def test_nodes_wait_rides_out_a_connection_dropped_by_a_restarting_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ctl nodes wait` retries a connection the API closes without an answer (a restarting server) until --timeout."""
    row = {"node": "n1", "state": "live", "cert_serial": "", "address": "10.0.0.1", "gpus": "none", "ram": "-",
           "engines": "none", "fabrics": "-", "warnings": [], "conditions": []}
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]

    def serve() -> None:
        n = 0
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            n += 1
            c.recv(65536)
            if n > 1:
                body = json.dumps([row]).encode()
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(body) + body)
            c.close()  # the first: closed with no answer

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    monkeypatch.setenv("LLMGW_ADMIN_TOKEN", "t")
    try:
        out = CliRunner().invoke(app, ["ctl", "nodes", "wait", "n1", "--timeout", "10", "--json",
                                       "--admin", f"http://127.0.0.1:{port}"])
    finally:
        srv.close()
    assert out.exit_code == 0 and out.exception is None, repr(out.exception)
    assert json.loads(out.stdout)["state"] == "live"

