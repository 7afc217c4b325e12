"""Errors in the OpenAI shape: {"error": {"message", "type", "param", "code"}}.

Every failure a client can cause becomes an APIError with the right status
(400 bad input, 401 key, 404 model or route, 413 body too large, 503 queue
full or shutting down) and a message that says what was wrong and what is
allowed. Anything else is our bug: logged with its traceback, answered 500.
"""

from __future__ import annotations

import json
import logging

from quart import Quart, Response
from werkzeug.exceptions import HTTPException

from strata.engine.sampling import InvalidRequest
from strata.engine.scheduler import QueueFull
from strata.vision.errors import VisionError

log = logging.getLogger("strata.server")

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    431: "invalid_request_error",
    499: "invalid_request_error",
    500: "server_error",
    503: "server_error",
}


class APIError(Exception):
    """A request the server answers with an error status; the message is shown to the client."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        return error_body(self.status, self.message, param=self.param, code=self.code)


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "server_error"),
                      "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def overloaded(message: str, retry_after: int) -> APIError:
    return APIError(503, message, code="overloaded", headers={"Retry-After": str(retry_after)})


def shutting_down() -> APIError:
    return APIError(503, "the server is shutting down; retry against another instance or after it restarts",
                    code="shutting_down", headers={"Retry-After": "5"})


def from_exception(exc: Exception, retry_after: int = 1) -> APIError | None:
    """The APIError for an exception the engine or the vision code raises about a request, else None."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, InvalidRequest):
        return bad_request(str(exc), exc.param)
    if isinstance(exc, QueueFull):
        return overloaded(str(exc), retry_after)
    if isinstance(exc, VisionError):
        return APIError(exc.status, exc.message, param="messages", code=exc.code)
    return None


def json_error(error: APIError) -> Response:
    body = json.dumps(error.body(), ensure_ascii=False)
    response = Response(body, status=error.status, content_type="application/json")
    for name, value in error.headers.items():
        response.headers[name] = value
    return response


def register(app: Quart) -> None:
    """Routes every error, expected or not, to an OpenAI-shaped JSON response."""

    @app.errorhandler(APIError)
    async def _api_error(error: APIError):
        return json_error(error)

    @app.errorhandler(HTTPException)
    async def _http_error(error: HTTPException):
        return json_error(_from_http(error))

    @app.errorhandler(Exception)
    async def _unexpected(error: Exception):
        mapped = from_exception(error)
        if mapped is not None:
            return json_error(mapped)
        log.exception("unhandled error in a request")
        return json_error(APIError(500, f"internal server error: {type(error).__name__}: {error}",
                                   code="internal_error"))


def _from_http(error: HTTPException) -> APIError:
    status = error.code or 500
    if status == 404:
        return APIError(404, "no such route; the API serves /v1/chat/completions, /v1/completions, /v1/models, "
                             "/health, /metrics, /slots, /tokenize, /detokenize and /openapi.json", code="not_found")
    if status == 405:
        allowed = ", ".join(sorted(getattr(error, "valid_methods", None) or [])) or "another method"
        return APIError(405, f"this route does not take that method; use {allowed}", code="method_not_allowed")
    if status == 413:
        return APIError(413, "the request body is too large", code="body_too_large")
    return APIError(status, error.description or error.name, code=error.name.lower().replace(" ", "_"))
