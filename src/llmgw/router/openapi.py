"""The OpenAI-compatible API as llmgw serves it, described as OpenAPI 3.1: what a request must carry for llmgw to
route it (a JSON object naming a model of the catalog), and every status it can answer, each in OpenAI's error
envelope (Anthropic's on its Messages API). A key is sent as a bearer token or, as Anthropic's clients do, in
`x-api-key`. Request bodies beyond `model` are the engines' business and are passed on as they are. Kept as
docs/api.openapi.json (equal by a test); tests/reliability/test_schemas.py runs Schemathesis against it."""

from __future__ import annotations

from typing import Any

from llmgw import __version__
from llmgw.router.app import PATHS
from llmgw.router.errors import MESSAGES

ERROR = {
    "type": "object",
    "properties": {"error": {"type": "object", "properties": {
        "message": {"type": "string"}, "type": {"type": "string"}, "param": {"type": ["string", "null"]},
        "code": {"type": ["string", "null"]}}, "required": ["message", "type", "code"]}},
    "required": ["error"],
}
ANTHROPIC_ERROR = {
    "type": "object",
    "properties": {"type": {"const": "error"}, "error": {"type": "object", "properties": {
        "type": {"type": "string"}, "message": {"type": "string"}, "code": {"type": "string"}},
        "required": ["type", "message"]}},
    "required": ["type", "error"],
}
MODEL = {"type": "object", "properties": {"id": {"type": "string"}, "object": {"const": "model"},
                                          "created": {"type": "integer"}, "owned_by": {"type": "string"},
                                          "parent": {"type": "string"}, "max_model_len": {"type": "integer"},
                                          "context_length": {"type": "integer"}},
         "required": ["id", "object"]}
MESSAGE = {"type": "object", "properties": {"role": {"type": "string", "enum": ["system", "user", "assistant"]},
                                            "content": {"type": "string"}}, "required": ["role", "content"]}
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"messages": {"type": "array", "items": MESSAGE, "minItems": 1}},
    "/v1/completions": {"prompt": {"type": "string"}},
    "/v1/embeddings": {"input": {"type": "string"}},
    "/v1/responses": {"input": {"type": "string"}},
    "/v1/messages": {"messages": {"type": "array", "items": MESSAGE, "minItems": 1}},
    "/v1/messages/count_tokens": {"messages": {"type": "array", "items": MESSAGE, "minItems": 1}},
}
REFUSALS = {
    "400": "the body is not a JSON object naming a model, or the engine refused it",
    "401": "no, an unknown or a revoked API key",
    "403": "the key may not use this model",
    "404": "no such model, or no such path on the engine",
    "408": "the request body did not arrive in time",
    "413": "the request body is over the limit",
    "429": "a limit of the key (rate, tokens, concurrency, budget)",
    "502": "the engine failed while answering",
    "503": "no replica can answer now (loading, or none can be placed): Retry-After says when to ask again",
    "504": "the engine did not answer in time",
}


def _error(words: str, schema: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{schema}"}
    return {"description": words, "content": {"application/json": {"schema": ref}}}


def _answers(ok: dict[str, Any], codes: tuple[str, ...], schema: str = "Error") -> dict[str, Any]:
    return {"200": ok, **{c: _error(REFUSALS[c], schema) for c in codes}}


def openapi() -> dict[str, Any]:
    listing = {"type": "object", "properties": {"object": {"const": "list"},
                                                "data": {"type": "array", "items": MODEL}}}
    paths: dict[str, Any] = {
        "/v1/models": {"get": {"summary": "The catalog's models this key may use", "responses": _answers(
            {"description": "the models", "content": {"application/json": {"schema": listing}}}, ("401", "408"))}},
        "/v1/models/{id}": {"get": {
            "summary": "One model", "parameters": [{"name": "id", "in": "path", "required": True,
                                                    "schema": {"type": "string", "minLength": 1}}],
            "responses": _answers({"description": "the model",
                                   "content": {"application/json": {"schema": MODEL}}}, ("401", "404", "408"))}},
        "/health": {"get": {
            "summary": "Whether this router can route (what load tools probe first); no key needed", "security": [],
            "responses": {"200": {"description": "it can", "content": {"application/json": {"schema": {
                "type": "object", "properties": {"status": {"const": "ok"}}}}}},
                "503": {"description": "its routing table has gone unconfirmed too long", "content": {
                    "application/json": {"schema": {"type": "object"}}}}}}},
        "/v1/usage": {"get": {
            "summary": "This key's own requests, tokens, GPU-seconds and cost, in time buckets (the shape of OpenAI's "
                       "usage API)",
            "parameters": [
                {"name": "start_time", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                {"name": "end_time", "in": "query", "schema": {"type": "integer", "minimum": 1}},
                {"name": "bucket_width", "in": "query", "schema": {"enum": ["1d", "1h"]}},
                {"name": "group_by", "in": "query", "schema": {"enum": ["model"]}}],
            "responses": _answers({"description": "a page of buckets", "content": {"application/json": {
                "schema": {"type": "object", "properties": {"object": {"const": "page"}, "data": {"type": "array"}}}}}},
                ("400", "401", "408", "503"))}},
    }
    for path in PATHS:
        body = {"type": "object", "properties": {"model": {"type": "string", "minLength": 1},
                                                 "stream": {"type": "boolean"},
                                                 "max_tokens": {"type": "integer", "minimum": 1, "maximum": 64},
                                                 **BODIES[path]},
                "required": ["model", *BODIES[path]]}
        paths[path] = {"post": {
            "summary": f"Routed to a ready replica of the model named (loaded first if none is): {path}",
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": _answers({"description": "the engine's answer, or its stream of server-sent events",
                                   "content": {"application/json": {"schema": {"type": "object"}},
                                               "text/event-stream": {"schema": {"type": "string"}}}},
                                  tuple(REFUSALS), "AnthropicError" if path.startswith(MESSAGES) else "Error"),
        }}
    return {
        "openapi": "3.1.0",
        "info": {"title": "llmgw API (OpenAI-compatible)", "version": __version__},
        "paths": paths,
        "components": {"schemas": {"Error": ERROR, "AnthropicError": ANTHROPIC_ERROR}, "securitySchemes": {
            "key": {"type": "http", "scheme": "bearer"},
            "anthropicKey": {"type": "apiKey", "in": "header", "name": "x-api-key"}}},
        "security": [{"key": []}, {"anthropicKey": []}],  # either
    }
