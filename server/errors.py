"""Errors in the OpenAI shape: {"error": {"message", "type", "param", "code"}}.

Every failure a client can cause becomes an APIError with the right status
(400 bad input, 401 key, 404 model or route, 413 body too large, 503 queue
full or shutting down) and a message that says what was wrong and what is
allowed. Anything else is our bug: logged with its traceback, answered 500.
`from_exception` is the one place where what the input pipeline and the
engine raise about a request becomes its HTTP error; routes just let those
exceptions propagate to the handlers registered here.
"""

from __future__ import annotations

import json
import logging

from quart import Quart, Response, current_app, has_request_context, request
from werkzeug.exceptions import HTTPException

from strata.chat_template import ChatTemplateError
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


# The field an engine error about "the prompt" names, per generation route.
PROMPT_PARAMS = {"/v1/chat/completions": "messages", "/v1/completions": "prompt"}
RESTART_RETRY_AFTER_S = 5      # Retry-After while the server drains or its engine is down


def unavailable(message: str, code: str) -> APIError:
    return APIError(503, message, code=code, headers={"Retry-After": str(RESTART_RETRY_AFTER_S)})


def shutting_down() -> APIError:
    return unavailable("the server is shutting down; retry against another instance or after it restarts",
                       "shutting_down")


def from_exception(exc: Exception) -> APIError | None:
    """The APIError for what the input pipeline or the engine raises about a request, else None."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, InvalidRequest):
        param = exc.param
        if param == "prompt" and has_request_context():
            param = PROMPT_PARAMS.get(request.path, param)
        return bad_request(str(exc), param, code=exc.code)
    if isinstance(exc, QueueFull):
        retry_after = current_app.extensions["strata"].settings.retry_after_s
        return APIError(503, str(exc), code="overloaded", headers={"Retry-After": str(retry_after)})
    if isinstance(exc, VisionError):
        return APIError(exc.status, exc.message, param=exc.param, code=exc.code)
    if isinstance(exc, ChatTemplateError):
        return bad_request(str(exc), "messages", code="chat_template_error")
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
                             "/health, /metrics, /slots, /tokenize, /detokenize and /openapi.json; the chat page is at /",
                        code="not_found")
    if status == 405:
        allowed = ", ".join(sorted(getattr(error, "valid_methods", None) or [])) or "another method"
        return APIError(405, f"this route does not take that method; use {allowed}", code="method_not_allowed")
    if status == 413:
        return APIError(413, "the request body is too large", code="body_too_large")
    return APIError(status, error.description or error.name, code=error.name.lower().replace(" ", "_"))
