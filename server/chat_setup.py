"""What a chat request's tools and reasoning change before and after generation.

Before: the tools go into the prompt the way the model's template expects
(strata.toolcall.formats), and tool_choice "required" or a named function
becomes the request's grammar. After: each choice's text is split by a
ChatOutputParser into content, reasoning_content (--reasoning-format split)
and tool_calls (when tools were offered). A prompt that already opened a
<think> block (templates that start the assistant turn thinking) starts the
parser inside the reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from strata.toolcall.formats import ToolFormat, forcing_grammar, prepare
from strata.toolcall.parser import THINK_CLOSE, THINK_OPEN, ChatOutputParser

from .schemas import ChatRequest


@dataclass
class ChatPlan:
    messages: list[dict]
    template_kwargs: dict
    tool_style: str | None            # the format tool calls are parsed in; None: no tools offered


def plan_chat(engine, parsed: ChatRequest) -> ChatPlan:
    """The messages and template variables to render, with the grammar a forced tool choice needs
    put into parsed.options.params."""
    if not parsed.tools or parsed.tool_choice == "none":
        return ChatPlan(parsed.messages, parsed.template_kwargs, None)
    fmt = ToolFormat.for_template(engine.model.chat_template.source)
    messages, extra = prepare(fmt, parsed.messages, parsed.tools)
    choice = parsed.tool_choice
    if choice != "auto":
        only = choice["function"]["name"] if isinstance(choice, dict) else None
        grammar = forcing_grammar(fmt, parsed.tools, only, parsed.parallel_tool_calls)
        parsed.options.params = replace(parsed.options.params, grammar=replace(grammar, param="tools"))
    return ChatPlan(messages, {**parsed.template_kwargs, **extra}, fmt.style)


def opens_thinking(tokenizer, ids: list[int]) -> bool:
    """Whether the prompt ends inside an open <think> block (the answer starts as reasoning)."""
    tail = tokenizer.decode(ids[-8:]).rstrip()
    return tail.endswith(THINK_OPEN) and THINK_CLOSE not in tail[-len(THINK_OPEN) - len(THINK_CLOSE):]


def parsers_for(plan: ChatPlan, reasoning_format: str, in_reasoning: bool, n: int) -> list[ChatOutputParser]:
    split = reasoning_format == "split"
    return [ChatOutputParser(plan.tool_style, split, in_reasoning and split) for _ in range(n)]
