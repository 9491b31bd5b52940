"""LoRA adapters in the catalog: one namespace with the models, engines that serve them, sources fetched like
weights, and clear words for each mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.config.adapters import catalog_names, served_adapters
from llmgw.config.engines import MAX_ADAPTERS
from llmgw.config.loader import load
from llmgw.config.server import ServerConfig
from llmgw.core.errors import ConfigError

BASE = "tls: {ca: ca.crt, cert: c.crt, key: c.key}\nmodels:\n"
SHA = "a" * 64


def _load(tmp: Path, models: str) -> ServerConfig:
    p = tmp / "server.yaml"
    p.write_text(BASE + models)
    return load(ServerConfig, p)


def _error(tmp: Path, models: str) -> str:
    with pytest.raises(ConfigError) as e:
        _load(tmp, models)
    return str(e.value)


def test_adapters_of_a_model_are_named_and_indexed(tmp_path: Path) -> None:
    cfg = _load(tmp_path, f"""  - name: smollm2
    source: /w/base.gguf
    engine: llamacpp
    adapters:
      - {{name: smollm2-pirate, source: /w/pirate.gguf, scale: 0.5}}
      - {{name: smollm2-legal, source: "https://example.com/legal.gguf", sha256: {SHA}, size: 2MiB}}
  - {{name: other, source: x, engine: sim}}
""")
    served = served_adapters(cfg.models)
    assert sorted(served) == ["smollm2-legal", "smollm2-pirate"]
    assert served["smollm2-legal"].index == 1 and served["smollm2-legal"].base.name == "smollm2"
    assert served["smollm2-legal"].adapter.size == 2 * 2**20 and served["smollm2-pirate"].adapter.scale == 0.5
    assert catalog_names(cfg.models) == {"smollm2", "smollm2-pirate", "smollm2-legal", "other"}


def test_an_adapter_named_like_a_model_is_refused(tmp_path: Path) -> None:
    err = _error(tmp_path, """  - {name: other, source: x, engine: sim}
  - {name: base, source: /w/b.gguf, engine: llamacpp, adapters: [{name: other, source: /w/a.gguf}]}
""")
    assert "the name 'other' is given twice (model, and adapter of base)" in err


def test_two_adapters_of_two_models_with_one_name_are_refused(tmp_path: Path) -> None:
    err = _error(tmp_path, """  - {name: a, source: /w/a.gguf, engine: llamacpp,
     adapters: [{name: ft, source: /w/1.gguf}]}
  - {name: b, source: /w/b.gguf, engine: vllm, adapters: [{name: ft, source: /w/2}]}
""")
    assert "the name 'ft' is given twice (adapter of a, and adapter of b)" in err


def test_an_engine_without_adapters_is_named(tmp_path: Path) -> None:
    err = _error(tmp_path, "  - {name: a, source: x, engine: sim, adapters: [{name: ft, source: /w/1.gguf}]}\n")
    assert "engine sim does not serve LoRA adapters (those that do: llamacpp, vllm)" in err


def test_more_adapters_than_a_replica_loads_are_refused(tmp_path: Path) -> None:
    many = ", ".join(f"{{name: ft{i}, source: /w/{i}.gguf}}" for i in range(MAX_ADAPTERS + 1))
    err = _error(tmp_path, f"  - {{name: a, source: /w/a.gguf, engine: llamacpp, adapters: [{many}]}}\n")
    assert f"{MAX_ADAPTERS + 1} adapters; each replica loads every adapter of its model at start, at most" in err


@pytest.mark.parametrize("adapter, words", [
    ("{name: ft, source: 'http://example.com/a.gguf'}", "a plain http:// source needs sha256"),
    ("{name: ft, source: 'hf://org/adapter'}", "hub sources (hf://) are not taken for adapters yet"),
    ("{name: ft, source: /w/a.gguf, scale: 0}", "greater than 0"),
    ("{name: 'bad name', source: /w/a.gguf}", "should match pattern"),
    ("{name: ft, source: /w/a.gguf, sha256: nothex}", "should match pattern"),
])
def test_an_adapter_badly_given_says_why(tmp_path: Path, adapter: str, words: str) -> None:
    err = _error(tmp_path, f"  - {{name: a, source: /w/a.gguf, engine: llamacpp, adapters: [{adapter}]}}\n")
    assert words in err
