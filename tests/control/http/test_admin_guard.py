"""The management API's guard piece by piece: the operator token's file, the hosts it answers to, and the
middleware's refusals in their envelope. test_admin_auth holds the whole over a running control plane; these
hold the rules a mutation-testing run found unguarded there."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from llmgw.control.http.admin_auth import allowed_hosts, guard, load_or_create_token, read_token
from llmgw.core.errors import ConfigError

TOKEN = "t" * 32


def test_the_token_is_made_private_in_a_new_directory_and_read_back_as_it_was(tmp_path: Path) -> None:
    f = tmp_path / "new" / "state" / "admin.token"
    made = load_or_create_token(f)
    assert len(made) == 43 and stat.S_IMODE(f.stat().st_mode) == 0o600  # 32 random bytes
    assert load_or_create_token(f) == made == read_token(f)


def test_the_token_is_made_in_a_directory_that_exists_and_the_log_says_where(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    f = tmp_path / "admin.token"
    caplog.set_level(logging.INFO, logger="llmgw.control.http.admin_auth")
    assert len(load_or_create_token(f)) == 43
    assert [r.getMessage() for r in caplog.records] == [
        f"created the operator token in {f} (ctl reads it; keep it readable by operators only)"]


def test_a_token_of_16_characters_is_taken_and_one_of_15_is_refused_naming_the_file(tmp_path: Path) -> None:
    f = tmp_path / "admin.token"
    fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"a" * 16 + b"\n")
    os.close(fd)
    assert load_or_create_token(f) == "a" * 16
    f.write_text("a" * 15)
    with pytest.raises(ConfigError) as e:
        load_or_create_token(f)
    assert (e.value.file, e.value.problems) == (str(f), ["the operator token is shorter than 16 characters"])
    os.chmod(f, 0o640)
    with pytest.raises(ConfigError) as e:
        load_or_create_token(f)
    assert e.value.file == str(f) and "readable by others (mode 640)" in e.value.problems[0], e.value


def test_a_missing_token_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    f = tmp_path / "none.token"
    with pytest.raises(ConfigError) as e:
        read_token(f)
    assert e.value.file == str(f) and e.value.problems == ["cannot read the operator token: No such file or directory"]


def test_the_hosts_answered_are_loopback_names_the_configured_ones_and_a_specific_listen_address() -> None:
    loopback = {"127.0.0.1", "localhost", "::1"}
    assert allowed_hosts("", []) == allowed_hosts("0.0.0.0", []) == allowed_hosts("::", []) == loopback
    assert allowed_hosts("[FD00::1]", ["Admin.Example"]) == loopback | {"fd00::1", "admin.example"}
    assert allowed_hosts("10.0.0.5", []) == loopback | {"10.0.0.5"}


async def guarded(any_ip: bool, hosts: frozenset[str]) -> AsyncIterator[str]:
    async def ok(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application(middlewares=[guard(TOKEN, hosts, any_ip)])
    app.router.add_route("*", "/{tail:.*}", ok)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url(""))
    finally:
        await server.close()


async def ask(url: str, host: str, method: str = "GET", **kw: object) -> tuple[int, object]:
    headers = {"Host": host, "Authorization": f"Bearer {TOKEN}", **kw.pop("headers", {})}  # type: ignore[dict-item]
    async with aiohttp.ClientSession() as s, s.request(method, url + "/api/x", headers=headers, **kw) as r:  # type: ignore[arg-type]
        return r.status, await r.json()


async def test_an_ip_literal_is_a_host_only_on_a_listener_on_every_interface() -> None:
    hosts = allowed_hosts("", [])
    async for url in guarded(any_ip=False, hosts=hosts):
        status, body = await ask(url, "10.1.2.3:8081")
        assert status == 403 and body == {"error": "Host '10.1.2.3' is not this management API's (see admin_hosts)"}
        assert (await ask(url, "LOCALHOST:8081"))[0] == 200  # names are compared without case
        status, body = await ask(url, "")
        assert status == 403 and body == {"error": "Host '(none)' is not this management API's (see admin_hosts)"}
    async for url in guarded(any_ip=True, hosts=hosts):
        assert (await ask(url, "10.1.2.3:8081"))[0] == 200
        status, body = await ask(url, "evil.example")
        assert status == 403 and "evil.example" in str(body)


async def test_refusals_are_in_the_management_apis_envelope() -> None:
    async for url in guarded(any_ip=False, hosts=allowed_hosts("", [])):
        status, body = await ask(url, "127.0.0.1", headers={"Origin": "http://evil.example"})
        assert (status, body) == (403, {"error": "cross-origin requests are refused"})
        status, body = await ask(url, "127.0.0.1", headers={"Authorization": "Bearer " + "u" * 32})
        assert status == 401 and isinstance(body, dict) and list(body) == ["error"]
        status, body = await ask(url, "127.0.0.1", "POST", data=b"{}", headers={"Content-Type": "text/plain"})
        assert (status, body) == (415, {"error": "a request body must be application/json"})
