"""create_app(engine, settings): the Quart application of `strata serve`.

It wires the routes, the OpenAI-shaped error handlers and the API key check,
and runs the engine loop as a background task from before the first request
until shutdown. Requests refused before reaching the engine are counted
here for /metrics, and every response by status. The ASGI app is wrapped so
that a client's disconnect is seen whatever the handler is doing
(client_gone), a body left unread does not cost the client its keep-alive
connection (body_drain), and memory goes back to the system after large
requests.
"""

from __future__ import annotations

import hmac

from quart import Quart, request

from strata.engine.engine import Engine

from . import cors, errors, memory, openapi, routes_admin, routes_openai, routes_ui
from .body_drain import DrainBody
from .client_gone import DisconnectWatch
from .drain import InFlight
from .errors import APIError
from .input_bounds import InputBounds
from .settings import ServerSettings
from .state import ServerState, current_state

OPEN_PATHS = frozenset({"/health"})
GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
CLIENT_CLOSED = 499


def create_app(engine: Engine, settings: ServerSettings) -> Quart:
    app = Quart("strata")
    state = ServerState(engine, settings)
    state.bounds = InputBounds.of(engine)
    app.config.update(RESPONSE_TIMEOUT=None, BODY_TIMEOUT=60, MAX_CONTENT_LENGTH=state.bounds.max_body_bytes)
    app.extensions["strata"] = state
    errors.register(app)
    app.register_blueprint(routes_openai.bp)
    app.register_blueprint(routes_admin.bp)
    app.register_blueprint(openapi.bp)
    app.register_blueprint(routes_ui.bp)
    state.in_flight = InFlight(app.asgi_app, GENERATION_PATHS)
    watch = DisconnectWatch(state.in_flight, GENERATION_PATHS, on_unaccounted=lambda: state.count_outcome("cancelled"))
    app.asgi_app = memory.ReturnMemory(DrainBody(watch))
    app.before_request(_check_api_key)
    app.after_request(_count_refusals)
    cors.install(app, settings.cors_origins)

    @app.before_serving
    async def _start_engine():
        state.start_engine()

    @app.after_serving
    async def _stop_engine():
        await state.begin_shutdown()

    return app


async def _check_api_key() -> None:
    key = current_state().settings.api_key
    if key is None or request.path in OPEN_PATHS or routes_ui.is_public(request.path):
        return
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if not header:
        raise _unauthorized("missing API key: send the header 'Authorization: Bearer <key>'")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), key.encode()):
        raise _unauthorized("invalid API key: send 'Authorization: Bearer <key>' with the key the server was "
                            "started with (--api-key or STRATA_API_KEY)")


def _unauthorized(message: str) -> APIError:
    return APIError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


async def _count_refusals(response):
    current_state().count_response(response.status_code)
    if request.path in GENERATION_PATHS:
        status = response.status_code
        if status == 401:
            current_state().count_outcome("unauthorized")
        elif 400 <= status < 500 and status != CLIENT_CLOSED:     # 499: counted as cancelled by the route
            current_state().count_outcome("invalid")
    return response
