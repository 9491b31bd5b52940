"""Admit, first half: a request's body read as a JSON object naming a model this key may use and that is on.
Answers in the OpenAI envelope; the caller goes on to the key's limits (admission.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from llmgw.config.adapters import ServedAdapter
from llmgw.config.server import ModelSpec
from llmgw.router.errors import openai_error
from llmgw.router.stats import OTHER, Measure
from llmgw.store.base import ApiKeyRecord


def payload_of(body: bytes) -> dict[str, Any] | web.Response:
    """The body as a JSON object, or the 400 that says why it is not one."""
    try:
        payload = json.loads(body)
    except ValueError as e:
        return openai_error(400, f"request body is not valid JSON: {e}", "invalid_request_error", "invalid_json")
    except RecursionError:
        return openai_error(400, "request body is nested too deeply", "invalid_request_error", "invalid_json")
    if not isinstance(payload, dict):
        return openai_error(400, "request body must be a JSON object", "invalid_request_error", "invalid_json")
    return payload


def spec_of(payload: dict[str, Any], models: dict[str, ModelSpec], key: ApiKeyRecord, m: Measure,
            adapter: Callable[[str], ServedAdapter | None] | None = None) -> ModelSpec | web.Response:
    """The model the request names, as the catalog has it (and counted under it from here on), or the answer
    refusing it: missing, unknown, not this key's, switched off. A LoRA adapter's name gives its model's spec; the
    key must be allowed the adapter itself."""
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        return openai_error(400, "'model' is required", "invalid_request_error", "missing_model", "model")
    spec = models.get(model)
    if spec is None and adapter is not None:
        served = adapter(model)
        spec = served.base if served is not None else None
    if spec is None:
        m.model = OTHER
        return openai_error(
            404, f"the model '{model}' does not exist", "invalid_request_error", "model_not_found", "model"
        )
    m.model = model
    if key.models and model not in key.models:
        return openai_error(
            403, f"this API key may not use '{model}'", "invalid_request_error", "model_not_allowed", "model"
        )
    if spec.scaling.max == 0:
        return openai_error(
            503,
            f"the model '{model}' is configured but switched off (scaling max 0)",
            "service_unavailable",
            "model_off",
        )
    return spec
