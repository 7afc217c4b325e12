"""Chat messages → prompt text, by the model's own Jinja chat template.

Templates come with the model (GGUF `tokenizer.chat_template`, or a Hugging
Face tokenizer_config.json / chat_template.jinja) and are untrusted code, so
they run in Jinja's immutable sandbox. The environment matches what Hugging
Face's `apply_chat_template` gives a template — trim_blocks, lstrip_blocks,
loop controls, the `{% generation %}` tag, `tojson` without HTML escaping,
`raise_exception`, `strftime_now`, and `messages`, `tools`, `documents`,
`add_generation_prompt`, `bos_token`, `eos_token` — so the same template
renders the same text. A model without a template gets ChatML.

Message content may be a string or a list of OpenAI content parts. Text-only
lists are joined with newlines into a string (every template handles that);
a list with images is passed as parts — {"type": "text", "text": ...} and
{"type": "image"} — for templates that place image tokens themselves
(Qwen2.5-VL writes <|vision_start|><|image_pad|><|vision_end|>).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Iterable, Mapping

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

TEXT_PART_TYPES = ("text", "input_text")
IMAGE_PART_TYPES = ("image", "image_url", "input_image")


class ChatTemplateError(ValueError):
    """The conversation can't be rendered: the template refused it, or it is malformed."""


class ChatTemplate:
    """A compiled chat template; `render` turns a conversation into prompt text."""

    def __init__(self, source: str | None = None, *, bos_token: str | None = None, eos_token: str | None = None, **special_tokens: str | None):
        self.source = source or CHATML_TEMPLATE
        self.is_fallback = source is None or not source.strip()
        self._tokens = {"bos_token": bos_token or "", "eos_token": eos_token or "", **{k: v or "" for k, v in special_tokens.items()}}
        try:
            self._template = _environment().from_string(self.source)
        except jinja2.TemplateSyntaxError as error:
            raise ChatTemplateError(f"the model's chat template does not parse (line {error.lineno}): {error.message}") from None

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, arch: str | None = None) -> ChatTemplate:
        """The template a strata.tokenizer.Tokenizer carries, else the architecture's built-in one
        (strata.chat_template_defaults), else ChatML; with its special tokens' text."""
        from strata.chat_template_defaults import default_template

        pad, unk = (None if i is None else tokenizer.id_to_token(i) for i in (tokenizer.pad_id, tokenizer.unk_id))
        source = tokenizer.chat_template if (tokenizer.chat_template or "").strip() else default_template(arch)
        return cls(source, bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token, pad_token=pad, unk_token=unk)

    def render(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
        documents: list[dict] | None = None,
        **extra: Any,
    ) -> str:
        """The prompt text for messages. extra reaches the template as variables (e.g. enable_thinking)."""
        conversation = normalize_messages(messages)
        context = {**self._tokens, **extra}
        context.update(messages=conversation, tools=tools, documents=documents, add_generation_prompt=add_generation_prompt)
        try:
            return self._template.render(**context)
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as error:
            raise ChatTemplateError(f"the model's chat template failed: {error}") from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as error:
            if any(isinstance(m.get("content"), list) for m in conversation):
                raise ChatTemplateError("this model's chat template does not accept image content; send text only") from None
            raise ChatTemplateError(f"the model's chat template can't render this conversation: {type(error).__name__}: {error}") from None


# -- messages --------------------------------------------------------------------------------------


def normalize_messages(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Plain dict copies with None-valued keys dropped and content parts normalized."""
    normalized = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or "role" not in message:
            raise ChatTemplateError(f"message {index} must be an object with a 'role' (and usually 'content')")
        plain = {key: value for key, value in message.items() if value is not None}
        if "content" in plain:
            plain["content"] = _normalize_content(plain["content"], index)
        normalized.append(plain)
    return normalized


def _normalize_content(content: Any, index: int) -> str | list[dict[str, str]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ChatTemplateError(f"message {index}: content must be a string or a list of content parts")
    parts = [_normalize_part(part, index) for part in content]
    if all(part["type"] == "text" for part in parts):
        return "\n".join(part["text"] for part in parts)
    return parts


def _normalize_part(part: Any, index: int) -> dict[str, str]:
    kind = part.get("type") if isinstance(part, Mapping) else None
    if kind in TEXT_PART_TYPES and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind in IMAGE_PART_TYPES:
        return {"type": "image"}
    allowed = ", ".join(TEXT_PART_TYPES + IMAGE_PART_TYPES)
    raise ChatTemplateError(f"message {index}: unsupported content part {kind!r}; allowed types: {allowed}")


# -- the Jinja environment -------------------------------------------------------------------------


def raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the model's chat template rejected the conversation: {message}")


def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML; prompts want the JSON as written.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _Namespace(jinja2.utils.Namespace):
    """`namespace()` that refuses underscore names, so templates can't reach Python internals through it."""

    def __init__(*args: Any, **kwargs: Any):
        self, attrs = args[0], dict(*args[1:], **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise ChatTemplateError(f"chat templates may not set underscore attributes on a namespace ({name!r})")


class _GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for training masks; here it just renders."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller: Any) -> str:
        return caller()


def _environment() -> ImmutableSandboxedEnvironment:
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols])
    environment.filters["tojson"] = tojson
    environment.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, namespace=_Namespace)
    return environment
