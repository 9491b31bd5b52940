"""The management API described as OpenAPI 3.1, from the same pydantic models the handlers answer with: the schema
cannot drift from what is sent. Served at /api/openapi.json; docs/management-api.openapi.json is a copy, kept equal
by a test."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from llmgw import __version__
from llmgw.control.summary import Summary
from llmgw.control.views import NodeRow
from llmgw.wire.router import Activity, ModelExplanation, RouterView

REF = "#/components/schemas/{model}"
SCHEMAS: dict[str, type[BaseModel]] = {
    "ModelExplanation": ModelExplanation,
    "Summary": Summary,
    "NodeRow": NodeRow,
    "RouterView": RouterView,
    "Activity": Activity,
}


def _json(schema: dict[str, Any], what: str) -> dict[str, Any]:
    return {"description": what, "content": {"application/json": {"schema": schema}}}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


ERROR = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}


def openapi() -> dict[str, Any]:
    components: dict[str, Any] = {"Error": ERROR}
    for name, model in SCHEMAS.items():
        schema = model.model_json_schema(ref_template=REF)
        components.update(schema.pop("$defs", {}))
        components[name] = schema
    refused = {"401": _json(_ref("Error"), "no or a wrong operator token"),
               "403": _json(_ref("Error"), "a request from a web page (Host or Origin not allowed)")}
    model_param = {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
    paths = {
        "/api/explain/{model}": {"get": {
            "summary": "Why a model is or is not served: its replicas' phases and conditions, the last placement "
                       "decision of each (nodes filtered per reason with each node's words, per-fabric "
                       "shortfalls, the chosen nodes and their scores)",
            "parameters": [model_param],
            "responses": {"200": _json(_ref("ModelExplanation"), "the explanation, as data"), **refused},
        }},
        "/api/status": {"get": {
            "summary": "Capacity, fabrics, every node's conditions, every replica's phase and reason, usage",
            "responses": {"200": _json(_ref("Summary"), "the cluster now"), **refused},
        }},
        "/api/nodes": {"get": {
            "summary": "One row per node: hardware, engines, conditions, warnings in the node's words",
            "responses": {"200": _json({"type": "array", "items": _ref("NodeRow")}, "every node"), **refused},
        }},
        "/api/router/view": {"get": {
            "summary": "The routing table for router workers",
            "responses": {"200": _json(_ref("RouterView"), "ready replicas per model"), **refused},
        }},
        "/api/router/activity": {"post": {
            "summary": "A router worker's demand, use, requests in flight and usage",
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("Activity")}}},
            "responses": {"200": {"description": "recorded"},
                          "503": _json(_ref("Error"), "usage not recorded: send it again"), **refused},
        }},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "llmgw management API", "version": __version__},
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}}},
        "security": [{"token": []}],
    }
