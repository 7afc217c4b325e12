"""ChatOutputParser: generated text → reasoning_content, content and tool_calls, as it streams.

Each piece of text the engine emits is pushed in; what comes back is safe to
send now: text that might still turn out to be the start of a tag
(`<think>`, `</think>`, `<tool_call>`) is held back until it is clear, the
way stop strings are (strata.engine.output). A call is sent once its block
is complete and its JSON parses, as one delta.tool_calls entry with the
whole arguments string (the OpenAI stream shape; clients concatenate the
argument pieces of an index, and one piece is a valid split). Text that
looked like a call but does not parse is given back as content: nothing
the model wrote is lost.

Reasoning: with `reasoning` on, output that starts with <think> (or a prompt
that already opened it, `in_reasoning`) is reasoning_content up to </think>.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field

from .formats import HERMES, LLAMA3

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"


@dataclass
class ToolCall:
    name: str
    arguments: str                      # a JSON object's text, as OpenAI sends it
    id: str = field(default_factory=lambda: "call_" + secrets.token_hex(12))

    def as_dict(self, index: int | None = None) -> dict:
        out = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        if index is not None:
            out = {"index": index, **out}
        return out


@dataclass
class Delta:
    reasoning: str = ""
    content: str = ""
    calls: list[ToolCall] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.calls)


class ChatOutputParser:
    def __init__(self, tool_style: str | None = None, reasoning: bool = False, in_reasoning: bool = False):
        self.tool_style = tool_style
        self.reasoning = reasoning
        self.calls: list[ToolCall] = []
        self.content = ""                 # all content sent so far
        self.reasoning_text = ""
        self._buf = ""
        self._mode = "reasoning" if reasoning and in_reasoning else "start"

    # ------------------------------------------------------------ streaming

    def push(self, text: str) -> Delta:
        self._buf += text
        out = Delta()
        while self._step(out, final=False):
            pass
        return self._record(out)

    def finish(self) -> Delta:
        out = Delta()
        while self._step(out, final=True):
            pass
        return self._record(out)

    @property
    def content_or_none(self) -> str | None:
        return None if self.calls and not self.content.strip() else self.content

    # ------------------------------------------------------------ the state machine

    def _step(self, out: Delta, final: bool) -> bool:
        """Consumes what it can of the buffer; True if the mode changed and it should run again."""
        buf, mode = self._buf, self._mode
        if mode == "start":
            head = buf.lstrip()
            if self.reasoning and head.startswith(THINK_OPEN):
                self._buf, self._mode = head[len(THINK_OPEN):], "reasoning"
                return True
            if self.tool_style == LLAMA3 and (head.startswith("{") or head.startswith(PYTHON_TAG)):
                self._mode = "json"
                return True
            if not final and (not head or _partial(head, THINK_OPEN if self.reasoning else "")
                              or (self.tool_style == LLAMA3 and _partial(head, PYTHON_TAG))):
                return False                              # too early to tell
            self._mode = "content"
            return True
        if mode == "reasoning":
            at = buf.find(THINK_CLOSE)
            if at >= 0:
                out.reasoning += buf[:at]
                self._buf, self._mode = buf[at + len(THINK_CLOSE):].lstrip(), "after_think"
                return True
            keep = 0 if final else _held(buf, THINK_CLOSE)
            out.reasoning += buf[: len(buf) - keep]
            self._buf = buf[len(buf) - keep:]
            return False
        if mode == "after_think":
            buf = self._buf = buf.lstrip()
            if self.tool_style == LLAMA3 and (buf.startswith("{") or buf.startswith(PYTHON_TAG)):
                self._mode = "json"
                return True
            if not buf and not final:
                return False
            self._mode = "content"
            return True
        if mode == "content":
            if self.tool_style == HERMES:
                at = buf.find(CALL_OPEN)
                if at >= 0:
                    self._content(out, buf[:at])
                    self._buf, self._mode = buf[at + len(CALL_OPEN):], "call"
                    return True
            keep = _held(buf, CALL_OPEN) if self.tool_style == HERMES and not final else 0
            self._content(out, buf[: len(buf) - keep])
            self._buf = buf[len(buf) - keep:]
            return False
        if mode == "call":
            at = buf.find(CALL_CLOSE)
            if at < 0 and not final:
                return False
            body = buf if at < 0 else buf[:at]
            call = _parse_call(body, "arguments")
            if call is None:
                self._content(out, CALL_OPEN + body + ("" if at < 0 else CALL_CLOSE))
            else:
                out.calls.append(call)
            self._buf, self._mode = ("" if at < 0 else buf[at + len(CALL_CLOSE):]), "content"
            return at >= 0
        if mode == "json":
            if not final:
                return False
            calls = _parse_llama_calls(buf)
            if calls is None:
                self._content(out, buf)
            else:
                out.calls += calls
            self._buf = ""
            return False
        raise AssertionError(mode)

    def _content(self, out: Delta, text: str) -> None:
        if self.calls or out.calls:
            if not text.strip():
                return                      # whitespace between calls is not content
        out.content += text

    def _record(self, out: Delta) -> Delta:
        self.calls += out.calls
        self.content += out.content
        self.reasoning_text += out.reasoning
        return out


def _partial(text: str, tag: str) -> bool:
    """Whether text is a proper prefix of tag (it may still become the tag)."""
    return bool(tag) and len(text) < len(tag) and tag.startswith(text)


def _held(text: str, tag: str) -> int:
    """How many trailing characters of text could be the start of tag."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


def _parse_call(body: str, key: str) -> ToolCall | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    args = value.get(key, value.get("arguments", value.get("parameters", {})))
    if not isinstance(args, dict):
        return None
    return ToolCall(value["name"], json.dumps(args, ensure_ascii=False))


def _parse_llama_calls(text: str) -> list[ToolCall] | None:
    text = text.strip()
    if text.startswith(PYTHON_TAG):
        text = text[len(PYTHON_TAG):].strip()
    decoder, calls, at = json.JSONDecoder(), [], 0
    while at < len(text):
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            return None
        call = _parse_call(json.dumps(value), "parameters")
        if call is None:
            return None
        calls.append(call)
        at = end
        while at < len(text) and text[at] in " \n\t;":
            at += 1
    return calls or None
