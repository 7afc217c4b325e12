"""Qwen3's thinking switch: `enable_thinking`, sent as chat_template_kwargs (as vLLM and
llama-server take it), renders through Qwen3's own chat template exactly as transformers'
apply_chat_template renders it, both ways and when absent; and the kwargs reach the
template from an HTTP request's chat_template_kwargs (schemas -> inputs.prompt).

The template is the one Qwen3 checkpoints ship (Qwen/Qwen3-0.6B's tokenizer_config.json
chat_template; GGUF conversions carry it as tokenizer.chat_template): with
add_generation_prompt and enable_thinking false it opens the answer with an empty
<think></think> block, which is how Qwen3 is told not to think.
"""

from __future__ import annotations

import pytest

from strata.chat_template import ChatTemplate
from strata.inputs.prompt import chat_ids

transformers = pytest.importorskip("transformers")

QWEN3_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""

EMPTY_THINK = "<|im_start|>assistant\n<think>\n\n</think>\n\n"

CONVERSATIONS = {
    "one user turn": [{"role": "user", "content": "Why is the sky blue?"}],
    "with system": [{"role": "system", "content": "Answer in one line."}, {"role": "user", "content": "2+2?"}],
    # An earlier answer with its reasoning inline: the template strips old <think> blocks.
    "multi-turn with reasoning": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nGreet back.\n</think>\n\nHello! How can I help?"},
        {"role": "user", "content": "Name a prime."},
    ],
    "tool round trip": [
        {"role": "user", "content": "Add 2 and 3."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
        {"role": "tool", "content": "5"},
    ],
}
TOOLS = [{"type": "function", "function": {"name": "add", "description": "a + b",
                                          "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                                                          "b": {"type": "number"}}}}}]
SWITCH = {"thinking on": {"enable_thinking": True}, "thinking off": {"enable_thinking": False}, "absent": {}}


@pytest.fixture(scope="module")
def hf_tokenizer():
    """A transformers tokenizer used only for apply_chat_template (the vocabulary does not matter)."""
    from tokenizers import Tokenizer, models

    vocab = {"<unk>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
                                                unk_token="<unk>", eos_token="<|im_end|>")
    fast.chat_template = QWEN3_TEMPLATE
    return fast


@pytest.mark.parametrize("switch", SWITCH)
@pytest.mark.parametrize("name", CONVERSATIONS)
def test_qwen3_thinking_switch_renders_like_transformers(hf_tokenizer, name, switch):
    messages, kwargs = CONVERSATIONS[name], SWITCH[switch]
    tools = TOOLS if name == "tool round trip" else None
    expected = hf_tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True,
                                                **kwargs)
    ours = ChatTemplate(QWEN3_TEMPLATE, eos_token="<|im_end|>").render(messages, tools=tools, **kwargs)
    assert ours == expected
    # The switch is visible: only "off" opens the answer with an empty think block.
    assert ours.endswith(EMPTY_THINK) == (switch == "thinking off")


def test_without_a_generation_prompt_the_switch_changes_nothing(hf_tokenizer):
    messages = CONVERSATIONS["multi-turn with reasoning"]
    template = ChatTemplate(QWEN3_TEMPLATE)
    on, off = (template.render(messages, add_generation_prompt=False, enable_thinking=v) for v in (True, False))
    assert on == off == hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False,
                                                         enable_thinking=False)
    assert "Greet back." not in on    # the earlier turn's reasoning is dropped, as transformers renders it


def test_chat_template_kwargs_reach_the_template_from_a_request():
    from server.schemas import parse_chat

    class Model:
        chat_template = ChatTemplate(QWEN3_TEMPLATE)

    class Text:    # stands in for the tokenizer: the ids are the text's characters
        @staticmethod
        def encode(text, add_special=False):
            return [ord(c) for c in text]

    def prompt(body):
        request = parse_chat(body, "qwen3")
        return "".join(map(chr, chat_ids(Model, Text, request.messages, request.template_kwargs)))

    messages = CONVERSATIONS["one user turn"]
    off = prompt({"messages": messages, "chat_template_kwargs": {"enable_thinking": False}})
    on = prompt({"messages": messages, "chat_template_kwargs": {"enable_thinking": True}})
    assert off.endswith(EMPTY_THINK) and not on.endswith(EMPTY_THINK)
    assert on == prompt({"messages": messages}) == off.removesuffix("<think>\n\n</think>\n\n")
