"""The request fields of structured output, tool calling and the extra sampling knobs,
type-checked into SamplingParams fields (ranges are the engine's rule, SamplingParams.validated).

  n                   1..128 choices; choice i is drawn with key (seed, i) (docs/api.md)
  choice_index        extension: the first choice's index, so a solo request reproduces choice i of n
  presence_penalty, frequency_penalty, repetition_penalty, logit_bias, min_tokens
  response_format     text | json_object | json_schema {name, schema, strict}
  grammar             extension: a GBNF or Lark grammar the output must match
  tools, tool_choice  OpenAI function tools; auto | none | required | {"type": "function", "function": {"name"}}
"""

from __future__ import annotations

import json

from strata.grammar.spec import GrammarSpec

from .errors import bad_request

MAX_N = 128
MAX_TOOLS = 128


def sampling_fields(f) -> dict:
    """SamplingParams keyword arguments of the penalties, bias, min_tokens, choice index and grammar."""
    out = {}
    for name in ("presence_penalty", "frequency_penalty", "repetition_penalty"):
        value = f.optional(name, (int, float), "a number")
        if value is not None:
            out[name] = value
    bias = f.optional("logit_bias", dict, "an object mapping token ids (as strings) to numbers")
    if bias:
        out["logit_bias"] = tuple(_bias_entry(k, v) for k, v in bias.items())
    for name in ("min_tokens", "choice_index"):
        value = f.optional(name, int, "an integer")
        if value is not None:
            out[name] = value
    grammar = grammar_spec(f)
    if grammar is not None:
        out["grammar"] = grammar
    return out


def num_choices(f) -> int:
    n = f.optional("n", int, "an integer")
    if n is None:
        return 1
    if not 1 <= n <= MAX_N:
        raise bad_request(f"n must be between 1 and {MAX_N}, got {n}", "n")
    return n


def grammar_spec(f) -> GrammarSpec | None:
    fmt = f.optional("response_format", dict, "an object")
    grammar = f.optional("grammar", str, "a string (a GBNF or Lark grammar)")
    spec = None
    if fmt is not None:
        kind = fmt.get("type", "text")
        if kind == "json_object":
            spec = GrammarSpec.json_object()
        elif kind == "json_schema":
            js = fmt.get("json_schema")
            if not isinstance(js, dict):
                raise bad_request("response_format.json_schema must be an object with a 'schema' (and a 'name')",
                                  "response_format.json_schema")
            schema = js.get("schema", {"type": "object"} if "schema" not in js else None)
            if not isinstance(schema, (dict, bool)):
                raise bad_request("response_format.json_schema.schema must be a JSON schema object",
                                  "response_format.json_schema.schema")
            spec = GrammarSpec.json_schema(schema)
        elif kind != "text":
            raise bad_request(f"response_format.type must be 'text', 'json_object' or 'json_schema', got "
                              f"{json.dumps(kind)}", "response_format.type")
    if grammar is not None:
        if spec is not None:
            raise bad_request("send either response_format or grammar, not both", "grammar")
        if not grammar.strip():
            raise bad_request("grammar must not be empty", "grammar")
        spec = GrammarSpec("gbnf", grammar, param="grammar")      # llguidance reads GBNF and Lark
    return spec


def tools_fields(f) -> tuple[list[dict], str | dict]:
    """(tools, tool_choice) checked: each tool a function with a name and a parameters schema."""
    tools = f.optional("tools", list, "an array of tools") or []
    if len(tools) > MAX_TOOLS:
        raise bad_request(f"tools may hold at most {MAX_TOOLS} tools, got {len(tools)}", "tools")
    out, names = [], set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise bad_request(f"{where} must be an object with type 'function'", where)
        fn = tool.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad_request(f"{where}.function must be an object with a non-empty 'name'", f"{where}.function")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise bad_request(f"{where}.function.parameters must be a JSON schema object",
                              f"{where}.function.parameters")
        if fn["name"] in names:
            raise bad_request(f"{where}.function.name {fn['name']!r} is used by an earlier tool", where)
        names.add(fn["name"])
        clean = {"name": fn["name"], "parameters": params}
        if isinstance(fn.get("description"), str):
            clean["description"] = fn["description"]
        out.append({"type": "function", "function": clean})
    choice = f.body.get("tool_choice")
    if choice is None:
        choice = "auto" if out else "none"
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise bad_request(f"tool_choice must be 'auto', 'none', 'required' or a named function, got "
                              f"{json.dumps(choice)}", "tool_choice")
        if choice == "required" and not out:
            raise bad_request("tool_choice 'required' needs at least one tool in tools", "tool_choice")
        return out, choice
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or choice.get("type", "function") != "function" or not isinstance(name, str):
        raise bad_request("tool_choice must be 'auto', 'none', 'required' or "
                          "{\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice")
    if name not in names:
        raise bad_request(f"tool_choice names the function {name!r}, which is not among tools "
                          f"({', '.join(sorted(names)) or 'none given'})", "tool_choice")
    return out, {"type": "function", "function": {"name": name}}


def _bias_entry(key, value) -> tuple[int, float]:
    if not (isinstance(key, str) and key.strip().isdigit()):
        raise bad_request(f"logit_bias keys must be token ids written as non-negative integers, got "
                          f"{json.dumps(key)}", "logit_bias")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad_request(f"logit_bias[{json.dumps(key)}] must be a number between -100 and 100, got "
                          f"{json.dumps(value)}", "logit_bias")
    return int(key), value
