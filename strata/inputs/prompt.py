"""Prompt token ids: chat messages through the model's template, or a completion prompt.

Chat messages are rendered by the model's own chat template (sandboxed) and
tokenized without adding BOS/EOS again; a completion prompt is tokenized as
text, or taken as token ids (the engine checks their range). A model without
a vision tower refuses image content parts here, naming the part, before the
template runs. Nothing here knows about HTTP: errors are ChatTemplateError
and VisionError, which the server maps to 400 in one place.
"""

from __future__ import annotations

from collections.abc import Sequence

from strata.chat_template import IMAGE_PART_TYPES
from strata.vision.errors import VisionError


def chat_ids(model, tokenizer, messages: list[dict], template_kwargs: dict | None = None, *,
             add_generation_prompt: bool = True) -> list[int]:
    """The template's text for `messages`, tokenized as it stands (the template wrote the special tokens)."""
    text = model.chat_template.render(messages, add_generation_prompt=add_generation_prompt,
                                      **(template_kwargs or {}))
    return tokenizer.encode(text, add_special=False)


def completion_ids(tokenizer, prompt: str | Sequence[int]) -> list[int]:
    return tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)


def refuse_images(model, messages: list[dict]) -> None:
    """Raises VisionError at the first image part when `model` has no vision tower."""
    if getattr(model, "vision", None) is not None:
        return
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in IMAGE_PART_TYPES:
                where = f"messages[{i}].content[{j}]"
                raise VisionError(f"{where} is an image, but the model {model.name!r} reads text only; send text "
                                  "content, or serve a vision model (e.g. Qwen2.5-VL)", "images_not_supported",
                                  param=where)
