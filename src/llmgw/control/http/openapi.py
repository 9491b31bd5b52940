"""The management API described as OpenAPI 3.1, from the same pydantic models the handlers answer with: the schema
cannot drift from what is sent. Served at /api/openapi.json; docs/management-api.openapi.json is a copy, kept equal
by a test, and tests/reliability/test_schemas.py runs Schemathesis against it: every route is described, with every
status it can answer (the listener's own refusals included: net/guards.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from llmgw import __version__
from llmgw.api.router import ActivityReport, Admission, AdmitRequest, ModelExplanation, RouterView
from llmgw.api.views import NodeRow
from llmgw.control.views.summary import Summary

REF = "#/components/schemas/{model}"
SCHEMAS: dict[str, type[BaseModel]] = {
    "ModelExplanation": ModelExplanation,
    "Summary": Summary,
    "NodeRow": NodeRow,
    "RouterView": RouterView,
    "ActivityReport": ActivityReport,
    "AdmitRequest": AdmitRequest,
    "Admission": Admission,
}


def _json(schema: dict[str, Any], what: str) -> dict[str, Any]:
    return {"description": what, "content": {"application/json": {"schema": schema}}}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


ERROR = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}


OBJECT = {"type": "object"}
ROWS = {"type": "array", "items": OBJECT}
# a model's row: its weights (a hub source's commit or why not, each node's part), null for a source not fetched
MODEL_ROWS = {"type": "array", "items": {"type": "object", "properties": {
    "weights": {"anyOf": [{"$ref": REF.format(model="ModelWeights")}, {"type": "null"}]}}}}
NAME = {"type": "string", "minLength": 1, "maxLength": 128}
MODELS = {"type": "array", "items": {"type": "string"}}
KEY_LIMITS = {"anyOf": [{"type": "object"}, {"type": "null"}]}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _op(summary: str, ok: dict[str, Any], *, params: list[dict[str, Any]] | None = None,
        body: dict[str, Any] | None = None, more: dict[str, str] | None = None, open_: bool = False,
        status: str = "200") -> dict[str, Any]:
    """One operation: its answer, and every refusal it can give in the plain envelope."""
    refusals = {"400": "the request is malformed (a parameter, the body, its JSON)",
                "403": "a request from a web page (Host or Origin not allowed)",
                "408": "the request body did not arrive in time",
                "503": "the store cannot be reached now (its words say why)", **(more or {})}
    if not open_:
        refusals["401"] = "no or a wrong operator token"
    if body is not None:
        refusals |= {"413": "the request body is over the limit", "415": "a request body must be application/json"}
    op: dict[str, Any] = {"summary": summary, "responses": {status: ok, **{
        code: _json(_ref("Error"), words) for code, words in sorted(refusals.items())}}}
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = _body(body)
    if open_:
        op["security"] = []
    return op


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}


def _query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


def _text(what: str, media: str) -> dict[str, Any]:
    return {"description": what, "content": {media: {"schema": {"type": "string"}}}}


NO_SUCH = {"404": "no such thing"}


def openapi() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "llmgw management API", "version": __version__},
        "paths": {**_cluster_paths(), **_key_paths(), **_router_paths()},
        "components": {"schemas": _components(),
                       "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}}},
        "security": [{"token": []}],
    }


def _components() -> dict[str, Any]:
    """The schemas of SCHEMAS, with the models they refer to, and the error envelope."""
    components: dict[str, Any] = {"Error": ERROR}
    for name, model in SCHEMAS.items():
        schema = model.model_json_schema(ref_template=REF)
        components.update(schema.pop("$defs", {}))
        components[name] = schema
    return components


def _cluster_paths() -> dict[str, Any]:
    """What the cluster holds: health, metrics, nodes, models, replicas, events, this schema."""
    return {
        "/health": {"get": _op("Whether this control plane answers", _json(OBJECT, "it does"), open_=True)},
        "/metrics": {"get": _op("Prometheus metrics", _text("the exposition", "text/plain"),
                                more={"503": "not ready yet (the first pass), or the store cannot be reached"})},
        "/api/explain/{model}": {"get": _op(
            "Why a model is or is not served: its replicas' phases and conditions, the last placement decision of "
            "each (nodes filtered per reason with each node's words, per-fabric shortfalls, the chosen nodes and "
            "their scores)", _json(_ref("ModelExplanation"), "the explanation, as data"),
            params=[_path_param("model")])},
        "/api/status": {"get": _op("Capacity, fabrics, the nodes a page at a time (nodes_from, nodes_not_shown in "
                                   "the answer), every replica's phase and reason, usage",
                                   _json(_ref("Summary"), "the cluster now"),
                                   params=[_query("nodes_from", {"type": "integer", "minimum": 0}),
                                           _query("nodes_limit", {"type": "integer", "minimum": 1,
                                                                  "maximum": 100_000})])},
        "/api/nodes": {"get": _op("One row per node: hardware, engines, conditions, warnings in the node's words",
                                  _json({"type": "array", "items": _ref("NodeRow")}, "every node"))},
        "/api/nodes/{id}": {"get": _op("What a node reported, and the control plane's bookkeeping of it",
                                       _json(OBJECT, "the node"), params=[_path_param("id")], more=NO_SUCH)},
        "/api/nodes/{id}/revoke": {"post": _op(
            "Revoke a node (or one certificate of it, by its serial): refused from its next request on",
            _json(OBJECT, "revoked"), params=[_path_param("id")], more=NO_SUCH,
            body={"type": "object", "properties": {"serial": {"type": "string", "pattern": "^[0-9A-Fa-f:]{0,128}$"},
                                                   "reason": {"type": "string"}}})},
        "/api/models": {"get": _op("The catalog, each model with its replicas and, where nodes fetch its weights, "
                                   "where they stand", _json(MODEL_ROWS, "every model"))},
        "/api/replicas": {"get": _op("Every replica: phase, conditions, shards", _json(ROWS, "every replica"))},
        "/api/events": {"get": _op("The latest events, newest first", _json(ROWS, "events"),
                                   params=[_query("limit", {"type": "integer", "minimum": 1})])},
        "/api/openapi.json": {"get": _op("This schema", _json(OBJECT, "OpenAPI 3.1"))},
    }


def _key_paths() -> dict[str, Any]:
    """API keys and their usage."""
    since = _query("since", {"type": "integer", "minimum": 0})
    return {
        "/api/keys": {
            "get": _op("Every API key (its public prefix, never the key), with use against its limits",
                       _json(ROWS, "every key")),
            "post": _op("Make an API key; the only time the key itself is shown", _json(OBJECT, "the new key"),
                        status="201",
                        body={"type": "object", "properties": {"name": NAME, "models": MODELS, "limits": KEY_LIMITS},
                              "required": ["name"]}),
        },
        "/api/keys/{id}": {
            "patch": _op("Change a key's limits or models", _json(OBJECT, "the key now"),
                         params=[_path_param("id")], body={"type": "object", "minProperties": 1, "properties": {
                             "models": MODELS, "limits": KEY_LIMITS}},
                         more={**NO_SUCH, "409": "the key is revoked"}),
            "delete": _op("Revoke a key", _json(OBJECT, "revoked"), params=[_path_param("id")], more=NO_SUCH),
        },
        "/api/keys/revoke": {"post": _op("Revoke a key by its name", _json(OBJECT, "revoked"), more=NO_SUCH,
                                         body={"type": "object", "properties": {"name": NAME},
                                               "required": ["name"]})},
        "/api/usage": {"get": _op("Usage by key or by model since a time: tokens, GPU-seconds and their cost "
                                  "(the operator's share under key \"\")", _json(OBJECT, "totals"),
                                  params=[_query("by", {"type": "string", "enum": ["key", "model"]}), since])},
        "/api/usage.csv": {"get": _op("Usage per hour, key and model with GPU-seconds and cost, for chargeback",
                                      _text("RFC 4180 CSV", "text/csv"), params=[since])},
        "/api/usage/requests.csv": {"get": _op(
            "Each request since a time with the GPU-seconds chargeback charged it (header Llmgw-Truncated: more rows "
            "than `limit`)", _text("RFC 4180 CSV", "text/csv"),
            params=[since, _query("limit", {"type": "integer", "minimum": 1, "maximum": 1_000_000})])},
    }


def _router_paths() -> dict[str, Any]:
    """What the router workers ask of the control plane."""
    return {
        "/api/router/view": {"get": _op("The routing table for router workers",
                                        _json(_ref("RouterView"), "ready replicas per model"))},
        "/api/router/admit": {"post": _op("A router worker asks to admit one request against its key's limits",
                                          _json(_ref("Admission"), "admitted, or refused and why"),
                                          body=_ref("AdmitRequest"))},
        "/api/router/activity": {"post": _op("A router worker's demand, use, requests in flight and usage",
                                             _json(OBJECT, "recorded"), body=_ref("ActivityReport"),
                                             more={"503": "usage not recorded (the store cannot be reached): "
                                                          "send it again"})},
    }
