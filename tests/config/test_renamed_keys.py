"""Every renamed configuration key still loads, as its new key, with a warning that names the file, the old key and
the new one; the new key loads without one; giving both is refused in words. The renamings are listed here, not read
from config/loader.py's RENAMED, so that a mapping dropped from there fails here."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from llmgw.config.loader import RENAMED, Renamed, load
from llmgw.config.server import ServerConfig
from llmgw.core.errors import ConfigError

BASE = "tls: {ca: ca.crt, cert: c.crt, key: c.key}\n"
# per renaming: server.yaml giving the key a value under `key`, and the value read back from where the new key is
CASES: dict[Renamed, tuple[Callable[[str], str], Callable[[ServerConfig], object], object]] = {
    Renamed("", "limits", "connections"): (
        lambda key: f"{key}: {{api_connections: 7}}\n", lambda c: c.connections.api_connections, 7),
    Renamed("router", "idle_timeout", "between_chunks_timeout"): (
        lambda key: f"router: {{{key}: 7s}}\n", lambda c: c.router.between_chunks_timeout, 7.0),
    Renamed("models[].scaling", "idle_timeout", "stop_unused_after"): (
        lambda key: f"models:\n  - {{name: a, source: x, engine: sim, scaling: {{min: 0, max: 1, {key}: 7s}}}}\n",
        lambda c: c.models[0].scaling.stop_unused_after, 7.0),
}


def test_every_renamed_key_has_a_case() -> None:
    assert set(CASES) == set(RENAMED)


@pytest.mark.parametrize("r", CASES, ids=lambda r: r.path(r.old))
def test_the_old_key_loads_as_the_new_with_a_warning(r: Renamed, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    text, read, value = CASES[r]
    new = tmp_path / "new.yaml"
    new.write_text(BASE + text(r.new))
    with caplog.at_level(logging.WARNING, logger="llmgw.config.loader"):
        assert read(load(ServerConfig, new)) == value
    assert caplog.records == []  # the new key: no word
    old = tmp_path / "old.yaml"
    old.write_text(BASE + text(r.old))
    with caplog.at_level(logging.WARNING, logger="llmgw.config.loader"):
        assert read(load(ServerConfig, old)) == value
    said = [m.getMessage() for m in caplog.records]
    assert said == [f"{old}: the key {r.path(r.old)} is deprecated: read as {r.path(r.new)}, its new name; "
                    "rename it there"]


@pytest.mark.parametrize("r", CASES, ids=lambda r: r.path(r.old))
def test_both_names_given_is_refused(r: Renamed, tmp_path: Path) -> None:
    text, _, _ = CASES[r]
    both = text(r.old)
    if r.section == "":
        both += text(r.new)
    else:  # the section's keys side by side
        both = both.replace(f"{r.old}:", f"{r.new}: 8s, {r.old}:")
    p = tmp_path / "both.yaml"
    p.write_text(BASE + both)
    with pytest.raises(ConfigError) as e:
        load(ServerConfig, p)
    assert f"{r.path(r.old)} and {r.path(r.new)} are one key" in str(e.value)
