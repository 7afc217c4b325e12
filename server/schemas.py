"""Request bodies of the OpenAI endpoints, parsed and type-checked into typed requests.

Every field a client sends is checked for its JSON type here, with the
field's name as the error's `param`; ranges of the sampling values are the
engine's rule (SamplingParams.validated), so the CLI, the Python API and the
server refuse the same values with the same words. `null` means "not sent".
Structured output, tools and the extra sampling knobs are read by
server.api_fields. Fields we can't honour with their non-default value (echo,
suffix, best_of, legacy functions) are refused, never silently ignored;
unknown fields are ignored, as clients send vendor extras.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from strata.engine.sampling import MAX_TOP_LOGPROBS, SamplingParams

from . import api_fields
from .errors import APIError, bad_request

ROLES = ("system", "developer", "user", "assistant", "tool")
DEFAULT_COMPLETION_MAX_TOKENS = 16      # as OpenAI's legacy completions
RESERVED_TEMPLATE_NAMES = frozenset({"messages", "add_generation_prompt", "tools", "documents"})


@dataclass
class Options:
    """What both endpoints share: the model, sampling, streaming and the extensions."""

    model: str
    params: SamplingParams
    max_tokens: int | None            # None: the endpoint's default
    stream: bool = False
    include_usage: bool = False
    return_token_ids: bool = False
    n: int = 1                        # choices; choice i samples with key (seed, choice_index + i)


@dataclass
class ChatRequest:
    messages: list[dict]
    options: Options
    template_kwargs: dict = field(default_factory=dict)
    tools: list[dict] = field(default_factory=list)
    tool_choice: str | dict = "none"
    parallel_tool_calls: bool = True


@dataclass
class CompletionRequest:
    prompt: str | list[int]
    options: Options


def parse_json(data: bytes) -> dict:
    """The body as a JSON object, or a 400 that says why it isn't one."""
    try:
        body = json.loads(data, parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:       # the parser recurses per level: far too deep (json_limits bounds the rest)
        raise bad_request("the request body nests arrays or objects too deeply to parse", code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, got {_type_name(body)}", code="invalid_json")
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except RecursionError:
        raise bad_request("the request body nests arrays or objects too deeply", code="invalid_json") from None
    except UnicodeEncodeError:
        raise bad_request("the request body holds an unpaired UTF-16 surrogate escape (such as \\ud800), which is "
                          "not text; write characters outside the BMP as surrogate pairs",
                          code="invalid_json") from None
    return body


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON value")


def parse_chat(body: dict, model_name: str) -> ChatRequest:
    f = Fields(body)
    messages = parse_messages(f.required("messages", list, "an array of messages"))
    if f.optional("functions", list, "an array"):
        raise bad_request("functions (the legacy form) is not supported; send tools", "functions")
    tools, tool_choice = api_fields.tools_fields(f)
    parallel = f.optional("parallel_tool_calls", bool, "a boolean")
    logprobs = f.optional("logprobs", bool, "a boolean") or False
    top_logprobs = f.optional("top_logprobs", int, "an integer") or 0
    max_tokens = f.optional("max_completion_tokens", int, "an integer")
    if max_tokens is None:
        max_tokens = f.optional("max_tokens", int, "an integer")
    kwargs = f.optional("chat_template_kwargs", dict, "an object") or {}
    reserved = sorted(set(kwargs) & RESERVED_TEMPLATE_NAMES)
    if reserved:
        raise bad_request(f"chat_template_kwargs may not set {', '.join(reserved)}", "chat_template_kwargs")
    options = _options(f, model_name, max_tokens, logprobs, top_logprobs)
    if tool_choice not in ("auto", "none") and options.params.grammar is not None:
        raise bad_request("tool_choice 'required' or a named function already constrains the output; send it "
                          "without response_format or grammar", "tool_choice")
    return ChatRequest(messages, options, kwargs, tools, tool_choice, parallel is not False)


def parse_completion(body: dict, model_name: str) -> CompletionRequest:
    f = Fields(body)
    prompt = _prompt(f.required("prompt", (str, list), "a string or an array of token ids"))
    if f.optional("echo", bool, "a boolean"):
        raise bad_request("echo is not supported; the response holds the completion only", "echo")
    if f.optional("suffix", str, "a string"):
        raise bad_request("suffix (insertion) is not supported", "suffix")
    best_of = f.optional("best_of", int, "an integer")
    if best_of not in (None, 1):
        raise bad_request(f"best_of must be 1, got {best_of}", "best_of")
    logprobs = f.optional("logprobs", int, "an integer")
    if logprobs is not None and not 0 <= logprobs <= MAX_TOP_LOGPROBS:
        raise bad_request(f"logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {logprobs}", "logprobs")
    max_tokens = f.optional("max_tokens", int, "an integer")
    return CompletionRequest(prompt, _options(f, model_name, max_tokens, logprobs is not None, logprobs or 0))


def parse_messages(messages: list) -> list[dict]:
    if not messages:
        raise bad_request("messages must hold at least one message", "messages")
    return [_message(m, i) for i, m in enumerate(messages)]


def params_for(options: Options, num_prompt: int, ctx: int, kind: str) -> SamplingParams:
    """The sampling parameters with max_tokens resolved against the room the prompt leaves in a slot
    (at least one token: the input pipeline refused longer prompts)."""
    room = ctx - num_prompt
    max_tokens = options.max_tokens
    if max_tokens is None:
        max_tokens = room if kind == "chat" else min(DEFAULT_COMPLETION_MAX_TOKENS, room)
    elif max_tokens > room:
        raise bad_request(f"max_tokens is {max_tokens} but only {room} tokens fit after the {num_prompt}-token "
                          f"prompt in the {ctx}-token context; lower max_tokens or shorten the prompt",
                          "max_tokens", code="context_length_exceeded")
    return replace(options.params, max_tokens=max_tokens)


def check_model(f: "Fields", model_name: str) -> str:
    model = f.optional("model", str, "a string")
    if model is not None and model != model_name:
        raise APIError(404, f"the model {model!r} does not exist here; this server serves {model_name!r}",
                       param="model", code="model_not_found")
    return model_name


# ---------------------------------------------------------------- pieces


def _options(f: "Fields", model_name: str, max_tokens, logprobs: bool, top_logprobs: int) -> Options:
    model = check_model(f, model_name)
    n = api_fields.num_choices(f)
    f.optional("user", str, "a string")
    stream = f.optional("stream", bool, "a boolean") or False
    stream_options = f.optional("stream_options", dict, "an object")
    if stream_options is not None and not stream:
        raise bad_request("stream_options is only allowed when stream is true", "stream_options")
    include_usage = Fields(stream_options or {}, "stream_options.").optional("include_usage", bool, "a boolean")
    params = SamplingParams(
        temperature=_or(f.optional("temperature", (int, float), "a number"), 1.0),
        top_p=_or(f.optional("top_p", (int, float), "a number"), 1.0),
        top_k=_or(f.optional("top_k", int, "an integer"), 0),
        min_p=_or(f.optional("min_p", (int, float), "a number"), 0.0),
        seed=f.optional("seed", int, "an integer"),
        stop=_stop(f.optional("stop", (str, list), "a string or an array of strings")),
        stop_token_ids=tuple(int_list(f.optional("stop_token_ids", list, "an array of token ids") or [],
                                       "stop_token_ids")),
        ignore_eos=f.optional("ignore_eos", bool, "a boolean") or False,
        logprobs=logprobs, top_logprobs=top_logprobs,
        speculative=_or(f.optional("speculative", bool, "a boolean"), True),
        cache_prompt=_or(f.optional("cache_prompt", bool, "a boolean"), True), **api_fields.sampling_fields(f))
    return Options(model, params, max_tokens, stream, bool(include_usage),
                   f.optional("return_token_ids", bool, "a boolean") or False, n)


def _message(message, index: int) -> dict:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise bad_request(f"{where} must be an object with a role and content, got {_type_name(message)}", where)
    f = Fields(message, where + ".")
    role = f.required("role", str, "a string")
    if role not in ROLES:
        raise bad_request(f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}", where + ".role")
    content = f.optional("content", (str, list), "a string or an array of content parts")
    if content is None and role != "assistant":
        raise bad_request(f"{where}.content is required for a {role} message", where + ".content")
    if isinstance(content, list):
        content = [_part(part, f"{where}.content[{i}]") for i, part in enumerate(content)]
    out = {"role": "system" if role == "developer" else role, "content": content if content is not None else ""}
    name = f.optional("name", str, "a string")
    if name is not None:
        out["name"] = name
    if role == "tool":
        out["tool_call_id"] = f.optional("tool_call_id", str, "a string") or ""
    calls = f.optional("tool_calls", list, "an array of tool calls") if role == "assistant" else None
    if calls:
        out["tool_calls"] = [_tool_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(calls)]
    return out


def _tool_call(call, where: str) -> dict:
    if not isinstance(call, dict):
        raise bad_request(f"{where} must be a tool call object", where)
    f = Fields(call, where + ".")
    fn = Fields(f.required("function", dict, "an object with name and arguments"), where + ".function.")
    arguments = fn.optional("arguments", (str, dict), "a JSON string")
    if isinstance(arguments, dict):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": f.optional("id", str, "a string") or "", "type": "function",
            "function": {"name": fn.required("name", str, "a string"), "arguments": arguments or "{}"}}


def _part(part, where: str) -> dict:
    if not isinstance(part, dict):
        raise bad_request(f"{where} must be a content part object, got {_type_name(part)}", where)
    f = Fields(part, where + ".")
    kind = f.required("type", str, "a string")
    if kind in ("text", "input_text"):
        return {"type": "text", "text": f.required("text", str, "a string")}
    if kind in ("image_url", "input_image", "image"):
        return dict(part)              # checked by the prompt builder, which knows the model
    raise bad_request(f"{where}.type must be 'text' or 'image_url', got {kind!r}", where + ".type")


def _prompt(prompt):
    if isinstance(prompt, list):
        if len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]                 # a batch of one prompt
        elif prompt and all(isinstance(p, (str, list)) for p in prompt):
            raise bad_request(f"prompt holds {len(prompt)} prompts; send one prompt per request", "prompt")
    if isinstance(prompt, str):
        if not prompt:
            raise bad_request("prompt must not be empty", "prompt")
        return prompt
    if not prompt:
        raise bad_request("prompt must not be empty: send text or at least one token id", "prompt")
    return int_list(prompt, "prompt")


def int_list(values: list, param: str) -> list[int]:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise bad_request(f"{param} must be an array of integer token ids, found {json.dumps(v)}", param)
    return values


def _stop(stop) -> tuple[str, ...]:
    if stop is None:
        return ()
    stop = [stop] if isinstance(stop, str) else stop
    if any(not isinstance(s, str) for s in stop):
        raise bad_request("stop must be a string or an array of strings", "stop")
    return tuple(stop)


def _or(value, default):
    return default if value is None else value


class Fields:
    """Typed access to a JSON object's fields; a wrong type is a 400 naming the field."""

    def __init__(self, body: dict, prefix: str = ""):
        self.body, self.prefix = body, prefix

    def optional(self, name: str, types, expected: str):
        value = self.body.get(name)
        if value is None:
            return None
        types = types if isinstance(types, tuple) else (types,)
        wrong_bool = isinstance(value, bool) and bool not in types
        if wrong_bool or not isinstance(value, types):
            raise bad_request(f"{self.prefix}{name} must be {expected}, got {_type_name(value)}", self.prefix + name)
        return value

    def required(self, name: str, types, expected: str):
        value = self.optional(name, types, expected)
        if value is None:
            raise bad_request(f"{self.prefix}{name} is required ({expected})", self.prefix + name)
        return value


def _type_name(value) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)
