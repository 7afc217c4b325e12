"""The operator routes: GET /health, /metrics, /slots; POST /slots/{id} (save or restore a slot's cached
prefix, strata/engine/slot_files.py); POST /tokenize, /detokenize.

/health needs no API key (load balancers probe it) and answers 503 while
the engine is not serving; the others follow the key like the /v1 routes.
"""

from __future__ import annotations

from quart import Blueprint, Response, request

from strata.inputs import chat_ids, refuse_images
from strata.tokenizer import TokenizerError

from . import json_body, prometheus, schemas
from .request_workers import workers_or_503
from .errors import APIError, bad_request
from .responses import json_response
from .state import current_state

bp = Blueprint("admin", __name__)


@bp.get("/health")
async def health():
    state = current_state()
    if state.draining:
        return json_response({"status": "shutting_down"}, 503)
    if not state.engine_running:
        return json_response({"status": "engine_stopped"}, 503)
    return json_response({"status": "ok", "model": state.settings.model_name})


@bp.get("/metrics")
async def metrics():
    return Response(prometheus.render(current_state()), content_type=prometheus.CONTENT_TYPE)


@bp.get("/slots")
async def slots():
    engine = current_state().engine
    return json_response({"num_slots": engine.config.batch, "slot_ctx": engine.config.ctx,
                          "busy_slots": engine.scheduler.busy_slots,
                          "queue_len": engine.scheduler.queue_len, "slots": engine.slot_states()})


@bp.post("/slots/<int:slot_id>")
async def slot_action(slot_id: int):
    """?action=save|restore&filename=NAME: a slot's cached prefix to or from a file under --slot-save-path."""
    from strata.engine import slot_files

    state = current_state()
    action = request.args.get("action")
    if action not in ("save", "restore"):
        raise bad_request(f"action must be save or restore, got {action!r}", "action")
    try:
        path = slot_files.resolve(state.settings.slot_save_path, request.args.get("filename", ""))
        run = slot_files.save if action == "save" else slot_files.restore
        result = await run(state.engine, slot_id, path)
    except slot_files.SlotFileError as exc:
        raise APIError(exc.status, str(exc), param=exc.param) from None
    return json_response({"id_slot": slot_id, "filename": path.name, **result})


@bp.post("/tokenize")
async def tokenize():
    """{"prompt": text, "add_special_tokens": bool} or {"messages": [...]} -> {"tokens", "count", "max_model_len"}."""
    state = current_state()
    body = await json_body.read_json(request, state, lambda b: "messages" if "messages" in b else "prompt")
    f = schemas.Fields(body)
    schemas.check_model(f, state.settings.model_name)
    messages = f.optional("messages", list, "an array of messages")
    with workers_or_503(state):
        if messages is not None:
            messages = schemas.parse_messages(messages)
            refuse_images(state.engine.model, messages)        # images count as their single placeholder here
            ids = await state.workers.run(chat_ids, state.engine.model, state.engine.tokenizer, messages)
        else:
            prompt = f.required("prompt", str, "a string (or send messages)")
            add_special = f.optional("add_special_tokens", bool, "a boolean")
            ids = await state.workers.run(state.engine.tokenizer.encode, prompt,
                                          add_special=True if add_special is None else add_special)
    return json_response({"tokens": ids, "count": len(ids), "max_model_len": state.engine.config.ctx})


@bp.post("/detokenize")
async def detokenize():
    """{"tokens": [ids]} -> {"prompt": text}."""
    state = current_state()
    f = schemas.Fields(await json_body.read_json(request, state))
    schemas.check_model(f, state.settings.model_name)
    tokens = f.required("tokens", list, "an array of token ids")
    ids = schemas.int_list(tokens, "tokens")
    try:
        with workers_or_503(state):
            text = await state.workers.run(state.engine.tokenizer.decode, ids)
    except TokenizerError as exc:
        raise bad_request(str(exc), "tokens") from None
    return json_response({"prompt": text})
