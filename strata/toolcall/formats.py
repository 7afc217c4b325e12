"""How a model writes tool calls, how tools reach its prompt, and the grammar that forces a call.

Two wire formats cover the templates Strata serves:
  hermes   <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>, one block per call
           (Qwen2.5, Qwen3, Hermes, SmolLM3 templates: they contain "<tool_call>")
  llama3   {"name": ..., "parameters": {...}} as the whole answer (Llama 3.x templates)
A template that renders tools natively gets them as the `tools` variable and
the conversation's tool_calls / tool messages as they are. A template that
knows no tools (SmolLM2, Gemma 3, ChatML) gets the hermes format explained in
a system message, earlier calls written as hermes blocks and tool results as
user turns wrapped in <tool_response>, so any chat model can call tools.

tool_choice "required" or a named function is enforced with a grammar
(llguidance Lark with %json schemas): the output is one or more calls (one
for a named function) whose arguments validate against the function's
parameters. "auto" leaves the model free and parses what it wrote; "none"
renders no tools.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..grammar.spec import GrammarSpec

HERMES, LLAMA3 = "hermes", "llama3"
JSON_ONE_LINE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

FALLBACK_SYSTEM = (
    "You may call functions to help answer. The functions are described in JSON schema inside "
    "<tools></tools>:\n<tools>\n{tools}\n</tools>\n"
    "To call a function, answer with one JSON object per call, each inside <tool_call></tool_call> tags:\n"
    "<tool_call>\n{{\"name\": <function-name>, \"arguments\": <arguments-object>}}\n</tool_call>"
)


@dataclass(frozen=True)
class ToolFormat:
    style: str            # HERMES or LLAMA3
    native: bool          # the template renders `tools` itself

    @classmethod
    def for_template(cls, source: str) -> "ToolFormat":
        if "<tool_call>" in source:
            return cls(HERMES, True)
        if "tools" in source and ("<|python_tag|>" in source or '"parameters"' in source):
            return cls(LLAMA3, True)
        return cls(HERMES, False)


def prepare(fmt: ToolFormat, messages: list[dict], tools: list[dict]) -> tuple[list[dict], dict]:
    """(messages, extra template variables) with the tools and earlier calls in the format's place."""
    if fmt.native:
        return [_native_message(m) for m in messages], ({"tools": tools} if tools else {})
    out = [_fallback_message(m) for m in messages]
    if tools:
        text = FALLBACK_SYSTEM.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools))
        if out and out[0]["role"] == "system" and isinstance(out[0].get("content"), str):
            out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + text}
        else:
            out.insert(0, {"role": "system", "content": text})
    return out, {}


def call_text(fmt: ToolFormat, name: str, arguments: dict | str) -> str:
    args = _arguments_object(arguments)
    if fmt.style == LLAMA3:
        return json.dumps({"name": name, "parameters": args}, ensure_ascii=False)
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


def forcing_grammar(fmt: ToolFormat, tools: list[dict], only: str | None, parallel: bool = True) -> GrammarSpec:
    """A grammar whose every sentence is one call to `only` (named choice), or one call to any of
    `tools` ("required"; up to one call per tool with `parallel`, so a small model can't repeat
    calls until max_tokens), with arguments valid for the function's parameters. A
    parameters object schema that does not say otherwise gets additionalProperties: false (as
    OpenAI's strict mode), so the arguments are the declared ones; JSON is written on one line."""
    functions = [t["function"] for t in tools if only is None or t["function"]["name"] == only]
    key = "parameters" if fmt.style == LLAMA3 else "arguments"
    alternatives = []
    for fn in functions:
        params = dict(fn.get("parameters") or {"type": "object"})
        if params.get("type") == "object" and "properties" in params:
            params.setdefault("additionalProperties", False)     # only the declared arguments
        schema = {"type": "object", "properties": {"name": {"const": fn["name"]}, key: params},
                  "required": ["name", key], "additionalProperties": False, "x-guidance": JSON_ONE_LINE}
        alternatives.append("%json " + json.dumps(schema, ensure_ascii=False))
    call = " | ".join(alternatives)
    if fmt.style == LLAMA3:
        return GrammarSpec("lark", f"start: call\ncall: {call}\n")
    more = ""
    for _ in range(len(functions) - 1 if only is None and parallel else 0):
        more = f' ("\\n" call{more})?'
    return GrammarSpec("lark", f'start: call{more}\ncall: "<tool_call>\\n" ({call}) "\\n</tool_call>"\n')


def _native_message(message: dict) -> dict:
    calls = message.get("tool_calls")
    if not calls:
        return message
    # HF templates read function.arguments as an object (Qwen's also accepts a string).
    fixed = [{**c, "function": {**c["function"], "arguments": _arguments_object(c["function"]["arguments"])}}
             for c in calls]
    return {**message, "tool_calls": fixed}


def _fallback_message(message: dict) -> dict:
    if message["role"] == "tool":
        return {"role": "user", "content": f"<tool_response>\n{_text(message.get('content'))}\n</tool_response>"}
    calls = message.get("tool_calls")
    if not calls:
        return message
    fmt = ToolFormat(HERMES, False)
    text = "\n".join(call_text(fmt, c["function"]["name"], c["function"]["arguments"]) for c in calls)
    content = _text(message.get("content"))
    return {"role": message["role"], "content": (content + "\n" if content else "") + text}


def _arguments_object(arguments) -> dict:
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return {"_raw": arguments}
        return value if isinstance(value, dict) else {"_value": value}
    return arguments


def _text(content) -> str:
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""
