"""The management API as the ctl commands call it, and how they print what it answers safely on a terminal."""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

AdminOpt = Annotated[str, typer.Option("--admin", envvar="LLMGW_ADMIN", help="management API address")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
DEFAULT_ADMIN = "http://127.0.0.1:9090"
DEFAULT_TOKEN_FILE = "/var/lib/llmgw/admin.token"  # beside the store of deploy/examples/server.yaml

console = Console(width=int(os.environ.get("COLUMNS", "160")))
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")


def safe(text: object) -> str:
    """Text from a node or an engine, made harmless for a terminal: no control or escape characters (newlines
    included: a node may not add lines of its own), no bidi overrides, and no Rich markup."""
    return escape(_CONTROL.sub("?", str(text)))


def json_out(data: object, as_json: bool) -> bool:
    """Print JSON when asked; True means the caller is done."""
    if as_json:
        print(json.dumps(data, indent=2))  # JSON escapes control characters itself
    return as_json


def _token() -> str:
    if token := os.environ.get("LLMGW_ADMIN_TOKEN"):
        return token.strip()
    path = os.environ.get("LLMGW_ADMIN_TOKEN_FILE", DEFAULT_TOKEN_FILE)
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as e:
        console.print(
            f"[red]error:[/red] cannot read the operator token {safe(path)}: {safe(e.strerror or e)} "
            "(set LLMGW_ADMIN_TOKEN_FILE to the server's admin_token_file)"
        )
        raise typer.Exit(1) from None


class ApiRefused(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code} {detail}")
        self.code = code
        self.detail = detail


def request(admin: str, method: str, path: str, body: object | None = None, raw: bool = False) -> Any:
    """One call of the management API. Raises ApiRefused for an answer other than 2xx and URLError when it cannot
    be reached."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {_token()}"}
    req = urllib.request.Request(admin.rstrip("/") + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            data = r.read()
            return data.decode() if raw else json.loads(data)
    except urllib.error.HTTPError as e:
        raise ApiRefused(e.code, e.read().decode(errors="replace")[:2000]) from None


def call(admin: str, method: str, path: str, body: object | None = None, raw: bool = False) -> Any:
    """request(), with a refusal or an unreachable API said on the terminal and ended with exit status 1."""
    try:
        return request(admin, method, path, body, raw)
    except ApiRefused as e:
        console.print(f"[red]error:[/red] {safe(method)} {safe(path)}: {e.code} {safe(e.detail)}")
        raise typer.Exit(1) from None
    except urllib.error.URLError as e:
        console.print(f"[red]error:[/red] cannot reach the management API at {safe(admin)}: {safe(e.reason)}")
        raise typer.Exit(1) from None
