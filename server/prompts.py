"""Prompt token ids for a request: chat messages through the model's template, or a completion prompt.

Chat messages are rendered by the model's own chat template (sandboxed) and
tokenized without adding BOS/EOS again; a completion prompt is tokenized as
text, or taken as token ids (the engine checks their range). Image content
parts need a vision model; a text-only model refuses them here, naming the
part, before anything reaches the engine. For a vision model,
strata.vision.chat_inputs loads, encodes and validates the images (VisionError
-> 400) and returns the prompt with its positions and image rows.
"""

from __future__ import annotations

from strata.chat_template import IMAGE_PART_TYPES, ChatTemplateError
from strata.vision.chat_inputs import chat_inputs as vision_chat_inputs
from strata.vision.engine_inputs import EngineInput
from strata.vision.media import MediaLimits

from .errors import bad_request


def chat_prompt_ids(engine, messages: list[dict], template_kwargs: dict | None = None) -> list[int]:
    _refuse_images(engine, messages)
    model = engine.model
    try:
        text = model.chat_template.render(messages, add_generation_prompt=True, **(template_kwargs or {}))
    except ChatTemplateError as exc:
        raise bad_request(str(exc), "messages", code="chat_template_error") from None
    return engine.tokenizer.encode(text, add_special=False)


async def chat_inputs(engine, messages: list[dict], template_kwargs: dict | None, limits: MediaLimits,
                      run_cpu=None) -> EngineInput:
    """The prompt of a chat request; with images (vision models only) their positions and rows too.
    run_cpu: `await run_cpu(fn, *args)` runs templating and tokenizing off the event loop (None: inline)."""
    if engine.model.vision is None:
        if run_cpu is None:
            return EngineInput(chat_prompt_ids(engine, messages, template_kwargs))
        return EngineInput(await run_cpu(chat_prompt_ids, engine, messages, template_kwargs))
    try:
        return await vision_chat_inputs(engine, messages, limits, template_kwargs=template_kwargs, run_cpu=run_cpu)
    except ChatTemplateError as exc:
        raise bad_request(str(exc), "messages", code="chat_template_error") from None


def completion_prompt_ids(engine, prompt: str | list[int]) -> list[int]:
    if isinstance(prompt, str):
        return engine.tokenizer.encode(prompt)
    return list(prompt)


def _refuse_images(engine, messages: list[dict]) -> None:
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if part.get("type") in IMAGE_PART_TYPES:
                where = f"messages[{i}].content[{j}]"
                if engine.model.vision is None:
                    raise bad_request(f"{where} is an image, but the model {engine.model.name!r} reads text only; "
                                      "send text content, or serve a vision model (e.g. Qwen2.5-VL)",
                                      where, code="images_not_supported")
