"""GET /openapi.json: an OpenAPI 3.1 document of the API, built from server/openapi_spec.py.

Built on first request (the served model's id goes into the description
and the /v1/models/{model} example). Every operation lists its errors with the OpenAI error schema,
the statuses the server can answer below 500 with, and the bearer key where
one is needed.
"""

from __future__ import annotations

import importlib.metadata

from quart import Blueprint

from . import openapi_spec as spec
from .responses import json_response
from .state import current_state

ERROR_STATUSES = {"400": "bad input: the error's param names the field", "401": "missing or wrong API key",
                  "404": "unknown model or route", "405": "wrong method", "413": "body too large",
                  "415": "body not sent as JSON", "503": "queue full or shutting down (Retry-After)"}


def document(model_name: str, version: str, needs_key: bool) -> dict:
    paths: dict[str, dict] = {}
    for method, path, summary, fields, required, ok_schema, keyed in spec.OPERATIONS:
        operation: dict = {"summary": summary, "responses": _responses(ok_schema, path)}
        if fields is not None:
            schema = {"type": "object", "properties": fields, "required": required}
            operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
        if path == "/slots/{id_slot}":
            operation["parameters"] = [
                {"name": "id_slot", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 0}},
                {"name": "action", "in": "query", "required": True, "schema": {"enum": ["save", "restore"]}},
                {"name": "filename", "in": "query", "required": True,
                 "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"}}]
        if path == "/v1/models/{model}":
            operation["parameters"] = [{"name": "model", "in": "path", "required": True,
                                        "schema": {"type": "string"}, "example": model_name}]
        if keyed and needs_key:
            operation["security"] = [{"bearer": []}]
        paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "Strata", "version": version,
                 "description": f"OpenAI-compatible inference server, serving {model_name!r}. Errors are "
                                "{\"error\": {message, type, param, code}}."},
        "paths": paths,
        "components": {"schemas": {"Error": spec.ERROR},
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


def _responses(ok_schema: dict, path: str) -> dict:
    ok_type = "text/plain" if path == "/metrics" else "application/json"
    responses = {"200": {"description": "OK", "content": {ok_type: {"schema": ok_schema}}}}
    if path.startswith("/v1/") and path.endswith("completions"):
        responses["200"]["content"]["text/event-stream"] = {"schema": {"type": "string"}}
    for status, text in ERROR_STATUSES.items():
        responses[status] = {"description": text,
                             "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    return responses


bp = Blueprint("openapi", __name__)


@bp.get("/openapi.json")
async def openapi_json():
    state = current_state()
    if state.openapi is None:
        state.openapi = document(state.settings.model_name, _version(), state.settings.api_key is not None)
    return json_response(state.openapi)


def _version() -> str:
    try:
        return importlib.metadata.version("strata")
    except importlib.metadata.PackageNotFoundError:
        return "0"
