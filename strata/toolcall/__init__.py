"""Tool calling and reasoning for chat requests: tools rendered through the model's
template, grammars that force a call, and the parser that turns generated text
back into content, reasoning_content and tool_calls (docs/tool_calling.md)."""
