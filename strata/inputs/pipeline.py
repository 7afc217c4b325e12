"""A request's prompt to one EngineInput: the one path for the server, `LLM` and the CLI.

  chat messages --refuse images (text models)--> --template--> ids --images (vision models)--> EngineInput
  completion prompt (text or ids) --tokenizer--> ids --> EngineInput

Each check lives once, where its knowledge is: the template's in
chat_template, the images' in vision, the prompt's ids and length in the
engine (Engine.check_prompt, run here so a request is refused before any
work, and again by Engine.submit for whoever submits directly), a vision
record's in the check the vision model hands the engine (run by submit).
"""

from __future__ import annotations

from collections.abc import Sequence

from strata.vision.media import MediaLimits, collect_image_urls

from .engine_input import EngineInput
from .images import image_input
from .prompt import chat_ids, completion_ids, refuse_images


async def chat_input(engine, messages: list[dict], media: MediaLimits, *, template_kwargs: dict | None = None,
                     client=None, run_cpu=None) -> EngineInput:
    """The prompt (and images) of a chat request; raises ChatTemplateError, VisionError or InvalidRequest.

    run_cpu: `await run_cpu(fn, *args)` runs templating, tokenizing and image decoding off the event loop (the
    server passes its bounded worker pool); None runs the template inline and images in anyio's threads.
    """
    model = engine.model
    refuse_images(model, messages)
    urls = collect_image_urls(messages, media) if model.vision is not None else []
    if run_cpu is None:
        ids = chat_ids(model, engine.tokenizer, messages, template_kwargs)
    else:
        ids = await run_cpu(chat_ids, model, engine.tokenizer, messages, template_kwargs)
    if urls:
        return await image_input(engine, ids, urls, media, client, run_cpu)
    engine.check_prompt(ids)
    return EngineInput(ids)


def completion_input(engine, prompt: str | Sequence[int]) -> EngineInput:
    """The prompt of a completion request, text or token ids; raises InvalidRequest."""
    ids = completion_ids(engine.tokenizer, prompt)
    engine.check_prompt(ids)
    return EngineInput(ids)
