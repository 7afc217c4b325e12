"""The official `openai` package against structured output, tool calls, n > 1 and reasoning:
`chat.completions.parse` with a pydantic model, tool calls streamed as delta.tool_calls and fed back
as role=tool turns, a named tool_choice, n=3 whose i-th choice equals a solo request for it, and
<think> text split into reasoning_content (forced with the grammar extension on the default model)."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel, Field
from server_helpers import MODEL, wait_idle

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 12}},
                                       "required": ["zone"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]
THINK = 'start: "<think>" /[a-z ]{3,30}/ "</think>" /[A-Za-z ]{3,30}/'


class City(BaseModel):           # bounded, as a 135M model may otherwise ramble inside a string
    name: str = Field(max_length=24)
    country: str = Field(max_length=24)
    population: int = Field(ge=0, le=100_000_000)


@pytest.fixture
def client(api_server):
    with openai.OpenAI(base_url=f"{api_server.url}/v1", api_key="unused", max_retries=0, timeout=300) as c:
        yield c


def test_parse_returns_the_pydantic_object(client):
    r = client.chat.completions.parse(model=MODEL, messages=[{"role": "user", "content": "Describe Paris."}],
                                      response_format=City, temperature=0, max_tokens=80)
    message = r.choices[0].message
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(message.parsed, City), message.content
    assert City.model_validate_json(message.content) == message.parsed


def test_json_object_parses(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Give me a JSON user."}],
                                       response_format={"type": "json_object"}, temperature=0.7, seed=3,
                                       max_tokens=120)
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:
        assert r.choices[0].message.content.startswith("{")


def _stream_tool_calls(client, **kw):
    calls: dict[int, dict] = {}
    finish, content = None, ""
    for chunk in client.chat.completions.create(model=MODEL, stream=True, **kw):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                entry["id"] = tc.id or entry["id"]
                entry["name"] += (tc.function.name or "") if tc.function else ""
                entry["arguments"] += (tc.function.arguments or "") if tc.function else ""
            finish = choice.finish_reason or finish
    return [calls[i] for i in sorted(calls)], finish, content


def test_required_tool_call_streams_and_round_trips(client):
    kw = dict(messages=ASK, tools=[WEATHER, TIME], tool_choice="required", temperature=0, max_tokens=120)
    streamed, finish, content = _stream_tool_calls(client, **kw)
    assert finish == "tool_calls" and content == ""
    assert streamed and all(c["id"].startswith("call_") for c in streamed)
    whole = client.chat.completions.create(model=MODEL, **kw)
    message = whole.choices[0].message
    assert whole.choices[0].finish_reason == "tool_calls" and message.content is None
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == \
        [(c["name"], json.loads(c["arguments"])) for c in streamed]
    for call in message.tool_calls:
        args = json.loads(call.function.arguments)
        if call.function.name == "get_weather":
            assert set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit")
    # the call and its result feed the next turn
    follow = ASK + [{"role": "assistant", "content": None,
                     "tool_calls": [c.model_dump(exclude_none=True) for c in message.tool_calls]}]
    follow += [{"role": "tool", "tool_call_id": c.id, "content": "18 degrees and sunny"} for c in message.tool_calls]
    answer = client.chat.completions.create(model=MODEL, messages=follow, tools=[WEATHER, TIME], temperature=0,
                                            max_tokens=24)
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert answer.usage.prompt_tokens > whole.usage.prompt_tokens


def test_named_tool_choice_calls_that_function(client):
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER, TIME], temperature=0.8, seed=9,
                                       tool_choice={"type": "function", "function": {"name": "get_time"}},
                                       max_tokens=80)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in calls] == ["get_time"]
    assert set(json.loads(calls[0].function.arguments)) == {"zone"}


def test_n3_choices_equal_their_solo_requests(client, api_server):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Name a colour."}], temperature=1.0, seed=77,
              max_tokens=10)
    r = client.chat.completions.create(n=3, extra_body={"return_token_ids": True}, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    ids = [c.model_extra["token_ids"] for c in r.choices]
    assert len({tuple(i) for i in ids}) > 1, "three seeded choices came out identical"
    plain = client.chat.completions.create(extra_body={"return_token_ids": True}, **kw)
    assert plain.choices[0].model_extra["token_ids"] == ids[0]
    for i in (1, 2):
        solo = client.chat.completions.create(extra_body={"return_token_ids": True, "choice_index": i}, **kw)
        assert solo.choices[0].model_extra["token_ids"] == ids[i]
    assert r.usage.completion_tokens == sum(len(i) for i in ids)
    streamed = {0: "", 1: "", 2: ""}
    for chunk in client.chat.completions.create(n=3, stream=True, **kw):
        for choice in chunk.choices:
            streamed[choice.index] += choice.delta.content or ""
    assert [streamed[i] for i in range(3)] == [c.message.content for c in r.choices]
    wait_idle(api_server)


def test_reasoning_split_whole_and_streamed(client):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Think, then answer: what is blue?"}],
              temperature=0.8, seed=5, max_tokens=60, extra_body={"grammar": THINK})
    r = client.chat.completions.create(**kw)
    message = r.choices[0].message
    reasoning = message.model_extra["reasoning_content"]
    assert r.choices[0].finish_reason == "stop"
    assert reasoning and "<think>" not in message.content and "</think>" not in message.content
    streamed_reasoning = streamed_content = ""
    for chunk in client.chat.completions.create(stream=True, **kw):
        for choice in chunk.choices:
            streamed_reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
            streamed_content += choice.delta.content or ""
    assert (streamed_reasoning, streamed_content) == (reasoning, message.content)


def test_enable_thinking_kwarg_is_accepted(client):
    r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, temperature=0,
                                       extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert r.choices[0].finish_reason in ("stop", "length")
