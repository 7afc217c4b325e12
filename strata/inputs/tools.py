"""A chat request's tools on the way in: into the prompt the template's way, and into a grammar.

tools_input() returns the messages and template variables to render (the
tools placed as strata.toolcall.formats says for this model's template) and,
for tool_choice "required" or a named function, the grammar that forces the
call. opens_thinking() tells whether the rendered prompt left a <think>
block open, so the answer starts as reasoning. Both feed chat_input and the
server's per-choice output parsers; "none" (or no tools) changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.grammar.spec import GrammarSpec
from strata.toolcall.formats import ToolFormat, forcing_grammar, prepare
from strata.toolcall.parser import THINK_CLOSE, THINK_OPEN


@dataclass
class ToolsInput:
    messages: list[dict]
    template_kwargs: dict
    grammar: GrammarSpec | None       # forces the call(s) for "required" / a named function
    tool_style: str | None            # the format calls are parsed in; None: no tools offered


def tools_input(model, messages: list[dict], template_kwargs: dict, tools: list[dict], tool_choice,
                parallel: bool = True) -> ToolsInput:
    if not tools or tool_choice == "none":
        return ToolsInput(messages, template_kwargs, None, None)
    fmt = ToolFormat.for_template(model.chat_template.source)
    rendered, extra = prepare(fmt, messages, tools)
    grammar = None
    if tool_choice != "auto":
        only = tool_choice["function"]["name"] if isinstance(tool_choice, dict) else None
        grammar = forcing_grammar(fmt, tools, only, parallel)
    return ToolsInput(rendered, {**template_kwargs, **extra}, grammar, fmt.style)


def opens_thinking(tokenizer, ids: list[int]) -> bool:
    """Whether the prompt ends inside an open <think> block (the answer starts as reasoning)."""
    tail = tokenizer.decode(ids[-8:]).rstrip()
    return tail.endswith(THINK_OPEN) and THINK_CLOSE not in tail[-len(THINK_OPEN) - len(THINK_CLOSE):]
