"""What a chat request's tools and reasoning change before and after generation, for the route.

Before: strata.inputs.tools places the tools in the prompt and, for
tool_choice "required" or a named function, gives the grammar that becomes
the request's. After: each choice's text is split by a ChatOutputParser into
content, reasoning_content (--reasoning-format split) and tool_calls (when
tools were offered); a prompt that left <think> open starts it in reasoning.
"""

from __future__ import annotations

from dataclasses import replace

from strata.inputs.tools import ToolsInput, tools_input
from strata.toolcall.parser import ChatOutputParser

from .schemas import ChatRequest


def plan_chat(engine, parsed: ChatRequest) -> ToolsInput:
    """The messages and template variables to render; a forcing grammar goes into parsed.options.params."""
    plan = tools_input(engine.model, parsed.messages, parsed.template_kwargs, parsed.tools, parsed.tool_choice,
                       parsed.parallel_tool_calls)
    if plan.grammar is not None:
        parsed.options.params = replace(parsed.options.params, grammar=replace(plan.grammar, param="tools"))
    return plan


def parsers_for(plan: ToolsInput, reasoning_format: str, in_reasoning: bool, n: int) -> list[ChatOutputParser]:
    split = reasoning_format == "split"
    return [ChatOutputParser(plan.tool_style, split, in_reasoning and split) for _ in range(n)]
