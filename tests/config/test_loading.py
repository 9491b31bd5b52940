from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.config.agent import AgentConfig
from llmgw.config.loader import load
from llmgw.config.server import ServerConfig
from llmgw.core.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


def test_shipped_examples_load() -> None:
    s = load(ServerConfig, EXAMPLES / "server.yaml")
    assert [m.name for m in s.models] == ["llama-3.1-405b", "qwen2.5-7b", "smollm2", "qwen2.5-7b-q4",
                                           "archived-model"]
    assert s.models[1].on_demand and not s.models[0].on_demand
    assert s.models[4].scaling.max == 0  # no stanza: off
    assert s.models[3].sha256 and s.models[3].size == 4683073952  # a fetched file: what it must be
    assert s.router.first_byte_timeout == 600.0
    a = load(AgentConfig, EXAMPLES / "agent.yaml")
    assert a.fabrics[0].name == "ib-a" and a.fabrics[0].adapters == ["mlx5_0", "mlx5_1"]
    assert a.weights_budget == 800 * 2**30 and a.peer_port == 7480


def _write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


BASE = "tls: {ca: ca.crt, cert: c.crt, key: c.key}\n"


def test_scaling_max_below_min_names_key_and_file(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "server.yaml",
        BASE
        + """models:
  - {name: a, source: x, engine: sim}
  - {name: b, source: x, engine: sim}
  - {name: c, source: x, engine: sim, scaling: {min: 2, max: 1}}
""",
    )
    with pytest.raises(ConfigError) as e:
        load(ServerConfig, p)
    assert str(e.value) == f"{p}: models[2].scaling.max: must be >= min (2)"


def test_unknown_key_is_an_error(tmp_path: Path) -> None:
    p = _write(tmp_path, "server.yaml", BASE + "models:\n  - {name: a, source: x, engine: sim, scalling: {}}\n")
    with pytest.raises(ConfigError) as e:
        load(ServerConfig, p)
    assert "models[0].scalling: unknown key" in str(e.value)


def test_missing_fabric_name_in_agent_yaml(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "agent.yaml",
        """control_planes: [https://cp:7443]
tls: {ca: a, cert: b, key: c}
fabrics:
  - adapters: [mlx5_0]
""",
    )
    with pytest.raises(ConfigError) as e:
        load(AgentConfig, p)
    assert str(e.value) == f"{p}: fabrics[0].name: field required"


def test_bad_duration_and_engine(tmp_path: Path) -> None:
    p = _write(
        tmp_path, "server.yaml", BASE + "node_lost_after: soon\nmodels:\n  - {name: a, source: x, engine: tgi}\n"
    )
    with pytest.raises(ConfigError) as e:
        load(ServerConfig, p)
    text = str(e.value)
    assert "node_lost_after: 'soon' is not a duration" in text
    assert "models[0].engine:" in text


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    p = _write(tmp_path, "server.yaml", BASE + "models: [\n  {name: a\n")
    with pytest.raises(ConfigError) as e:
        load(ServerConfig, p)
    assert str(e.value).startswith(f"{p}: line ")


def test_relative_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    p = _write(tmp_path, "server.yaml", BASE)
    s = load(ServerConfig, p)
    assert s.tls.ca == str(tmp_path / "ca.crt")


def test_duplicate_model_names(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "server.yaml",
        BASE + "models:\n  - {name: a, source: x, engine: sim}\n  - {name: a, source: y, engine: sim}\n",
    )
    with pytest.raises(ConfigError) as e:
        load(ServerConfig, p)
    assert "duplicate model name 'a'" in str(e.value)


def test_agent_control_planes_must_be_https(tmp_path: Path) -> None:
    p = _write(tmp_path, "agent.yaml", "control_planes: [http://cp:7443]\ntls: {ca: a, cert: b, key: c}\n")
    with pytest.raises(ConfigError) as e:
        load(AgentConfig, p)
    assert "control_planes: Value error" not in str(e.value)
    assert "must be an https:// address" in str(e.value)


def test_model_names_are_bounded_and_safe() -> None:
    import pydantic

    from llmgw.config.server import ModelSpec

    for good in ("smollm2", "meta-llama/Llama-3.1-8B-Instruct", "qwen2.5:7b"):
        ModelSpec(name=good, source="x", engine="sim")
    for bad in ("x" * 129, "../etc", "a b", "a\nb", "/abs", "a//b", "a/", ".hidden"):
        with pytest.raises(pydantic.ValidationError):
            ModelSpec(name=bad, source="x", engine="sim")


@pytest.mark.parametrize(("store", "words"), [
    ({"kind": "postgres"}, "store.kind postgres needs store.dsn"),
    ({"kind": "postgres", "dsn": "host=db user=llmgw password=hunter2"}, "must not hold the password"),
    ({"kind": "postgres", "dsn": "host=db", "password_env": "1BAD"}, "password_env"),
])
def test_a_postgres_store_needs_a_dsn_and_keeps_the_password_out_of_it(tmp_path: Path, store: dict[str, str],
                                                                        words: str) -> None:
    import yaml

    f = tmp_path / "server.yaml"
    f.write_text(yaml.safe_dump({"tls": {"ca": "ca", "cert": "c", "key": "k"}, "store": store}))
    with pytest.raises(ConfigError) as e:
        load(ServerConfig, f)
    assert words in str(e.value)
    assert "hunter2" not in str(e.value)
