"""The body the router sends llama-server for a model with adapters: one adapter named at its scale (the engine sets
the rest to 0), or the first at 0 for the model itself; a client's own "lora" replaced; vLLM's bodies untouched."""

from __future__ import annotations

import json

from llmgw.config.adapters import served_adapters
from llmgw.config.server import ModelSpec
from llmgw.router.adapters import AdapterIndex, lora_unread, rewritten


def spec(engine: str = "llamacpp") -> ModelSpec:
    return ModelSpec.model_validate({"name": "m", "source": "/w/m.gguf", "engine": engine, "adapters": [
        {"name": "m-a", "source": "/w/a.gguf"}, {"name": "m-b", "source": "/w/b.gguf", "scale": 0.5}]})


def sent(payload: dict[str, object], adapter: str | None, engine: str = "llamacpp") -> dict[str, object]:
    s = spec(engine)
    body = json.dumps(payload).encode()
    served = served_adapters([s])[adapter] if adapter else None
    out = json.loads(rewritten(dict(payload), body, s, served))
    assert isinstance(out, dict)
    return out


def test_an_adapter_is_named_by_its_index_and_the_model_by_the_first_at_zero() -> None:
    asked: dict[str, object] = {"model": "m-b", "messages": [{"role": "user", "content": "hi"}]}
    assert sent(asked, "m-b") == {**asked, "lora": [{"id": 1, "scale": 0.5}]}
    assert sent({"model": "m"}, None) == {"model": "m", "lora": [{"id": 0, "scale": 0.0}]}


def test_a_clients_own_lora_is_replaced() -> None:
    assert sent({"model": "m", "lora": [{"id": 1, "scale": 9}]}, None)["lora"] == [{"id": 0, "scale": 0.0}]
    # a key written with escapes is the same key to the engine's parser: still replaced, not left beside ours
    body = b'{"model": "m", "\\u006cora": [{"id": 1, "scale": 9}]}'
    out = json.loads(rewritten(json.loads(body), body, spec(), None))
    assert out["lora"] == [{"id": 0, "scale": 0.0}] and body.count(b"lora") == 0


def test_vllm_bodies_are_sent_as_they_are() -> None:
    body = b'{"model": "m-a"}'
    assert rewritten({"model": "m-a"}, body, spec("vllm"), served_adapters([spec("vllm")])["m-a"]) is body


def test_the_index_follows_a_catalog_changed_in_place() -> None:
    models = {"m": spec()}
    index = AdapterIndex()
    assert index.find("m-a", models, 1) is not None and index.find("m-z", models, 1) is None
    models["m"] = spec().model_copy(update={"adapters": spec().adapters[1:]})  # m-a gone, same generation
    assert index.find("m-a", models, 1) is None
    found = index.find("m-b", models, 1)
    assert found is not None and found.index == 0


def test_a_path_where_llama_server_reads_no_lora_is_not_served_for_a_model_with_adapters() -> None:
    assert lora_unread(spec(), "/v1/messages") and not lora_unread(spec(), "/v1/chat/completions")
    assert not lora_unread(spec("vllm"), "/v1/messages"), "vLLM is told by the model's name on every path"
    assert not lora_unread(spec().model_copy(update={"adapters": []}), "/v1/messages")
