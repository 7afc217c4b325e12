"""ChatOutputParser on its own: reasoning split, hermes and llama3 tool calls, text
held back only while a tag is possible, every character kept, and the same
result whether the text arrives whole or one character at a time."""

import json

import pytest

from strata.toolcall.formats import HERMES, LLAMA3
from strata.toolcall.parser import ChatOutputParser


def run(text, pieces, **kw):
    parser = ChatOutputParser(**kw)
    reasoning = content = ""
    calls = []
    for piece in pieces(text):
        for d in (parser.push(piece),):
            reasoning, content, calls = reasoning + d.reasoning, content + d.content, calls + d.calls
    d = parser.finish()
    reasoning, content, calls = reasoning + d.reasoning, content + d.content, calls + d.calls
    return reasoning, content, [(c.name, json.loads(c.arguments)) for c in calls], parser


WHOLE = staticmethod(lambda t: [t])
CHARS = staticmethod(lambda t: list(t))
SPLITS = [lambda t: [t], lambda t: list(t), lambda t: [t[i: i + 3] for i in range(0, len(t), 3)]]

CASES = [
    # (text, parser kwargs, reasoning, content, calls)
    ("<think>plan it</think>The answer is 4.", dict(reasoning=True), "plan it", "The answer is 4.", []),
    ("<think>plan it</think>The answer is 4.", dict(reasoning=False), "", "<think>plan it</think>The answer is 4.",
     []),
    ("still thinking</think>\n\nDone", dict(reasoning=True, in_reasoning=True), "still thinking", "Done", []),
    ("a < b and <thinking> is not a tag", dict(reasoning=True, tool_style=HERMES), "",
     "a < b and <thinking> is not a tag", []),
    ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     dict(tool_style=HERMES), "", "Let me check.\n", [("get_weather", {"city": "Paris"})]),
    ('<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": {"x": 1}}'
     '\n</tool_call>', dict(tool_style=HERMES), "", "", [("a", {}), ("b", {"x": 1})]),
    ("<tool_call>\nnot json\n</tool_call> after", dict(tool_style=HERMES), "",
     "<tool_call>\nnot json\n</tool_call> after", []),
    ('<tool_call>{"name": "a", "arguments": {"q": 1}}', dict(tool_style=HERMES), "", "", [("a", {"q": 1})]),
    ('<think>hmm</think><tool_call>{"name": "a", "arguments": {}}</tool_call>',
     dict(tool_style=HERMES, reasoning=True), "hmm", "", [("a", {})]),
    ('{"name": "lookup", "parameters": {"id": 3}}', dict(tool_style=LLAMA3), "", "", [("lookup", {"id": 3})]),
    ('<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"k": "v"}}',
     dict(tool_style=LLAMA3), "", "", [("a", {}), ("b", {"k": "v"})]),
    ("{not a call}", dict(tool_style=LLAMA3), "", "{not a call}", []),
    ("Plain text with <tool_call", dict(tool_style=HERMES), "", "Plain text with <tool_call", []),
]


@pytest.mark.parametrize("split", range(len(SPLITS)))
@pytest.mark.parametrize("case", range(len(CASES)))
def test_cases(case, split):
    text, kw, reasoning, content, calls = CASES[case]
    got_reasoning, got_content, got_calls, parser = run(text, SPLITS[split], **kw)
    assert (got_reasoning, got_content, got_calls) == (reasoning, content, calls)
    assert parser.content_or_none == (None if calls and not content.strip() else content)


def test_nothing_is_sent_early():
    parser = ChatOutputParser(tool_style=HERMES)
    assert parser.push("Hello <tool").content == "Hello "
    assert parser.push("_ca").content == ""
    assert parser.push("t is a cat").content == "<tool_cat is a cat"


def test_call_ids_unique_and_indexed():
    _, _, _, parser = run('<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "a", '
                          '"arguments": {}}</tool_call>', SPLITS[0], tool_style=HERMES)
    ids = [c.id for c in parser.calls]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)
    assert parser.calls[1].as_dict(1)["index"] == 1
