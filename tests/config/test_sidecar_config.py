"""A model's sidecars in the catalog: what is accepted, what is refused and with which words."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.config.loader import load
from llmgw.config.server import ServerConfig
from llmgw.core.errors import ConfigError
from llmgw.wire.serving import SidecarSpec

BASE = "tls: {ca: ca.crt, cert: c.crt, key: c.key}\nmodels:\n  - name: m\n    source: x\n    engine: sim\n"


def _load(tmp: Path, sidecars: str) -> ServerConfig:
    p = tmp / "server.yaml"
    p.write_text(BASE + "    sidecars:\n" + sidecars)
    return load(ServerConfig, p)


def test_a_sidecar_with_a_port_and_an_http_check_reaches_the_shard_as_given(tmp_path: Path) -> None:
    cfg = _load(tmp_path, """      - name: tok
        command: [python, tok.py, --port, "{port}"]
        env: {TOKENIZER: fast}
        port: true
        ready: {http: /health, timeout: 30s}
        secret: true
      - name: exporter
        command: [exporter]
""")
    tok, exporter = (c.spec() for c in cfg.models[0].sidecars)
    assert tok == SidecarSpec(name="tok", argv=["python", "tok.py", "--port", "{port}"], env={"TOKENIZER": "fast"},
                              port=True, ready="http", ready_path="/health", ready_timeout=30.0, secret=True)
    assert (exporter.ready, exporter.port, exporter.ready_timeout) == ("", False, 0.0)


@pytest.mark.parametrize(("sidecars", "words"), [
    ("      - {name: a, command: [x]}\n      - {name: a, command: [y]}\n", "duplicate sidecar name 'a'"),
    ("      - {name: a-b, command: [x]}\n      - {name: a_b, command: [y]}\n",
     "'a-b' and 'a_b' give one variable, LLMGW_SIDECAR_A_B_PORT"),
    ("      - {name: a, command: [x], port: true, ready: {}}\n", "give one of http (a path, e.g. /health) or tcp"),
    ("      - {name: a, command: [x], port: true, ready: {http: /h, tcp: true}}\n", "give one of http"),
    ("      - {name: a, command: [x], port: true, ready: {http: health}}\n", "ready.http"),
    ("      - {name: a, command: [x], port: true, ready: {tcp: true, timeout: 0s}}\n", "must be at least 0.1s"),
    ("      - {name: a, command: [x], ready: {tcp: true}}\n", "a readiness check probes the sidecar's port"),
    ("      - {name: a, command: [x, '{port}']}\n", "the command names {port}: set port: true"),
    ("      - {name: a, command: [x], env: {LLMGW_ENGINE_KEY: k}}\n",
     "'LLMGW_ENGINE_KEY': names starting LLMGW_ are the agent's to set"),
    ("      - {name: a, command: [x], env: {'A B': k}}\n", "'A B' is not an environment variable name"),
    ("      - {name: a, command: []}\n", "command"),
    ("      - {name: ../a, command: [x]}\n", "name"),
    ('      - {name: a, command: [x, "a\\0b"]}\n', "a NUL character"),  # "\\0" in YAML: a NUL
    ('      - {name: a, command: [x], env: {A: "a\\0b"}}\n', "a NUL character"),
])
def test_a_bad_sidecar_is_refused_with_words_naming_it(tmp_path: Path, sidecars: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, sidecars)
    assert "models[0].sidecars" in str(e.value) and words in str(e.value)


def test_an_engine_argument_naming_a_sidecars_port_must_name_one_that_has_a_port(tmp_path: Path) -> None:
    p = tmp_path / "server.yaml"
    model = ("tls: {ca: ca.crt, cert: c.crt, key: c.key}\nmodels:\n  - name: m\n    source: x\n    engine: sim\n"
             "    profile: {args: [--tok, 'http://127.0.0.1:{sidecars.%s.port}']}\n"
             "    sidecars: [{name: tok, command: [x], port: %s}]\n")
    p.write_text(model % ("tok", "true"))
    assert load(ServerConfig, p).models[0].profile.args[1] == "http://127.0.0.1:{sidecars.tok.port}"
    for name, port in (("tik", "true"), ("tok", "false")):
        p.write_text(model % (name, port))
        with pytest.raises(ConfigError) as e:
            load(ServerConfig, p)
        assert f"models[0]: profile.args names {{sidecars.{name}.port}}: the model has no sidecar {name!r}" in str(
            e.value), str(e.value)
