"""The OpenAI routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models.

A generation request goes body -> typed request (schemas) -> one validated
EngineInput (strata.inputs) -> engine.submit, which refuses bad input or a
full queue before anything starts; the exceptions on the way propagate to
the one mapping in errors, so errors are plain JSON with their status. Then
either the whole answer as one JSON body or server-sent events (sse). Parsing
a large body, templating and tokenizing run in the bounded worker pool, never
on the event loop. Either way, a client that goes away cancels its request,
from whatever point it leaves (client_gone).
"""

from __future__ import annotations

import logging

import anyio
from quart import Blueprint, Response, request

from strata.inputs import EngineInput, chat_input, completion_input
from strata.inputs.tools import opens_thinking

from . import chat_setup, json_body, memory, schemas, sse
from .choices import ChoiceSet
from .client_gone import client_of
from .errors import APIError, shutting_down, unavailable
from .request_workers import workers_or_503
from .responses import formatter_for, json_response
from .schemas import Options
from .state import ServerState, current_state

log = logging.getLogger("strata.server")

bp = Blueprint("openai", __name__)


@bp.post("/v1/chat/completions")
async def chat_completions():
    state = current_state()
    body = await json_body.read_json(request, state, text_param="messages")
    parsed = schemas.parse_chat(body, state.settings.model_name)
    _check_serving(state)
    if state.engine.model.vision is not None:
        request.scope[memory.SCOPE_KEY] = True          # decoded images, refused or not, are freed: trim after
    plan = chat_setup.plan_chat(state.engine, parsed)
    with workers_or_503(state):
        inputs = await chat_input(state.engine, plan.messages, state.settings.media_limits,
                                  template_kwargs=plan.template_kwargs, run_cpu=state.workers.run)
    in_reasoning = opens_thinking(state.engine.tokenizer, inputs.prompt_ids)
    parsers = chat_setup.parsers_for(plan, state.settings.reasoning_format, in_reasoning, parsed.options.n)
    return await _generate(state, "chat", inputs, parsed.options, parsers)


@bp.post("/v1/completions")
async def completions():
    state = current_state()
    body = await json_body.read_json(request, state, text_param="prompt")
    parsed = schemas.parse_completion(body, state.settings.model_name)
    _check_serving(state)
    with workers_or_503(state):
        inputs = await state.workers.run(completion_input, state.engine, parsed.prompt)
    return await _generate(state, "completion", inputs, parsed.options)


@bp.get("/v1/models")
async def list_models():
    return json_response({"object": "list", "data": [_model_card(current_state())]})


@bp.get("/v1/models/<path:model>")
async def get_model(model: str):
    state = current_state()
    if model != state.settings.model_name:
        raise APIError(404, f"the model {model!r} does not exist here; this server serves "
                            f"{state.settings.model_name!r}", param="model", code="model_not_found")
    return json_response(_model_card(state))


def _model_card(state: ServerState) -> dict:
    return {"id": state.settings.model_name, "object": "model", "created": state.started_at, "owned_by": "strata",
            "max_model_len": state.engine.config.ctx}


def _check_serving(state: ServerState) -> None:
    if state.draining:
        raise shutting_down()
    if not state.engine_running:
        raise unavailable("the engine is not running; see the server log", "engine_stopped")


async def _generate(state: ServerState, kind: str, inputs: EngineInput, options: Options, parsers=None) -> Response:
    """parsers: one ChatOutputParser per choice (chat)."""
    engine = state.engine
    ids = inputs.prompt_ids
    params = schemas.params_for(options, len(ids), engine.config.ctx, kind)
    if params.grammar is not None:     # compiled off the event loop (the first one builds the tokenizer map)
        await anyio.to_thread.run_sync(engine.compile_grammar, params.grammar)
    client = client_of(request.scope)
    client.accounted = True          # from here the outcome is counted: below, or by the engine
    if client.gone:                  # left while its prompt was prepared: nothing to run for it
        state.count_outcome("cancelled")
        raise APIError(499, "the client closed the connection", code="client_closed_request")
    stream = ChoiceSet(engine, ids, params, options.n, inputs.submit_kwargs())
    client.on_gone(stream.cancel)    # FIN, half-close or RST at any point from here frees the slots within a step
    log.debug("%s: %d prompt tokens, max_tokens %d, stream %s", stream.request_id, len(ids), params.max_tokens,
              options.stream)
    fmt = formatter_for(kind, options, engine.tokenizer, parsers)
    if options.stream:
        body = sse.EventStreamBody(stream, fmt, state.settings.sse_ping_interval)
        response = Response(body, content_type=sse.CONTENT_TYPE, headers=sse.HEADERS)
        response.timeout = None
        return response
    try:
        dones = await stream.collect()
    finally:
        await stream.aclose()
    for done in dones:
        if done.finish_reason not in sse.FINISH_REASONS:
            if done.finish_reason == "cancelled":
                raise shutting_down()
            raise APIError(500, done.error or "the request failed inside the engine", code="internal_error")
    return json_response(fmt.response(dones))
