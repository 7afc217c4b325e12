"""The OpenAI routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models.

A generation request goes body -> typed request (schemas) -> prompt ids
(prompts) -> engine.submit, which refuses bad input or a full queue before
anything starts, so errors are plain JSON with their status; then either the
whole answer as one JSON body or server-sent events (sse). Either way, a
client that goes away cancels its request.
"""

from __future__ import annotations

import logging

import anyio
from quart import Blueprint, Response, request

from strata.engine.sampling import InvalidRequest
from strata.engine.scheduler import QueueFull

from . import chat_setup, prompts, schemas, sse
from .choices import ChoiceSet
from .errors import APIError, bad_request, overloaded, shutting_down
from .responses import formatter_for, json_response
from .schemas import Options
from .state import ServerState, current_state

log = logging.getLogger("strata.server")

bp = Blueprint("openai", __name__)


@bp.post("/v1/chat/completions")
async def chat_completions():
    state = current_state()
    parsed = schemas.parse_chat(schemas.parse_json(await request.get_data()), state.settings.model_name)
    _check_serving(state)
    plan = chat_setup.plan_chat(state.engine, parsed)
    inputs = await prompts.chat_inputs(state.engine, plan.messages, plan.template_kwargs,
                                       state.settings.media_limits)
    in_reasoning = chat_setup.opens_thinking(state.engine.tokenizer, inputs.prompt_ids)
    parsers = chat_setup.parsers_for(plan, state.settings.reasoning_format, in_reasoning, parsed.options.n)
    return await _generate(state, "chat", inputs.prompt_ids, parsed.options, inputs.submit_kwargs(), parsers)


@bp.post("/v1/completions")
async def completions():
    state = current_state()
    parsed = schemas.parse_completion(schemas.parse_json(await request.get_data()), state.settings.model_name)
    _check_serving(state)
    ids = prompts.completion_prompt_ids(state.engine, parsed.prompt)
    return await _generate(state, "completion", ids, parsed.options)


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
        raise APIError(503, "the engine is not running; see the server log", code="engine_stopped",
                       headers={"Retry-After": "5"})


async def _generate(state: ServerState, kind: str, ids: list[int], options: Options, vision: dict | None = None,
                    parsers=None) -> Response:
    """vision: submit's positions, rope_delta and image rows for a prompt with images;
    parsers: one ChatOutputParser per choice (chat)."""
    engine = state.engine
    params = schemas.params_for(options, len(ids), engine.config.ctx, kind)
    try:
        if params.grammar is not None:     # compiled off the event loop (the first one builds the tokenizer map)
            await anyio.to_thread.run_sync(engine.compile_grammar, params.grammar)
        stream = ChoiceSet(engine, ids, params, options.n, vision)
    except InvalidRequest as exc:
        param = schemas.PROMPT_PARAM[kind] if exc.param == "prompt" else exc.param
        raise bad_request(str(exc), param) from None
    except QueueFull as exc:
        raise overloaded(str(exc), state.settings.retry_after_s) from None
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
