"""strata.chat_template renders what transformers' apply_chat_template renders."""

from __future__ import annotations

import pytest

from strata.chat_template import CHATML_TEMPLATE, ChatTemplate, ChatTemplateError

transformers = pytest.importorskip("transformers")

# Qwen2-VL / Qwen2.5-VL-Instruct's chat template (from its tokenizer_config.json / chat_template.json).
QWEN2_VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Exercises tojson, tools, loop controls, strftime_now, namespace and whitespace control the way Hub templates do.
FEATURE_TEMPLATE = """
{%- set ns = namespace(count=0) %}
{%- if tools %}
Tools: {{ tools | tojson }}
{%- endif %}
{% for message in messages %}
    {% if message.role == 'tool' %}{% continue %}{% endif %}
    {% set ns.count = ns.count + 1 %}
[{{ ns.count }}] {{ message.role }}: {{ message.content }}
    {% if loop.index >= 3 %}{% break %}{% endif %}
{% endfor %}
{{ bos_token }}|{{ eos_token }}|{{ strftime_now('%Y') | length }}
{%- if add_generation_prompt %}
>{% endif %}
"""

CONVERSATIONS = {
    "one user turn": [{"role": "user", "content": "Hi"}],
    "with system": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
    "multi-turn": [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi! How can I help?"},
        {"role": "user", "content": "Tell me a joke about <tags> & \"quotes\"."},
        {"role": "assistant", "content": "Why did the GPU cross the bus?\n\nTo get to the other slot."},
        {"role": "user", "content": "  日本語 😀 \t tabs  "},
    ],
    "system only": [{"role": "system", "content": "You are terse."}],
    "empty content": [{"role": "user", "content": ""}],
}


@pytest.fixture(scope="module")
def template(default_tokenizer):
    return ChatTemplate.for_tokenizer(default_tokenizer)


def hf_render(hf_gguf_tokenizer, messages, chat_template=None, **kwargs):
    return hf_gguf_tokenizer.apply_chat_template(messages, tokenize=False, chat_template=chat_template, **kwargs)


@pytest.mark.parametrize("name", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_default_model_template_matches_transformers(template, hf_gguf_tokenizer, name, add_generation_prompt):
    messages = CONVERSATIONS[name]
    expected = hf_render(hf_gguf_tokenizer, messages, add_generation_prompt=add_generation_prompt)
    assert template.render(messages, add_generation_prompt=add_generation_prompt) == expected
    assert not template.is_fallback


@pytest.mark.parametrize("name", CONVERSATIONS)
def test_feature_template_matches_transformers(hf_gguf_tokenizer, name):
    tools = [{"type": "function", "function": {"name": "add", "description": "a < b & c", "parameters": {"type": "object"}}}]
    ours = ChatTemplate(FEATURE_TEMPLATE, bos_token=hf_gguf_tokenizer.bos_token, eos_token=hf_gguf_tokenizer.eos_token)
    messages = CONVERSATIONS[name] + [{"role": "tool", "content": "skipped"}]
    expected = hf_render(hf_gguf_tokenizer, messages, chat_template=FEATURE_TEMPLATE, tools=tools, add_generation_prompt=True)
    assert ours.render(messages, tools=tools) == expected
    assert '"a < b & c"' in expected  # tojson does not HTML-escape


def test_default_model_prompt_tokenizes_like_transformers(template, hf_gguf_tokenizer, default_tokenizer):
    messages = CONVERSATIONS["multi-turn"]
    expected = hf_gguf_tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert default_tokenizer.encode(template.render(messages)) == expected


def test_raise_exception_becomes_chat_template_error():
    strict = ChatTemplate("{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations must start with a user message') }}{% endif %}ok")
    assert strict.render([{"role": "user", "content": "hi"}]) == "ok"
    with pytest.raises(ChatTemplateError, match="must start with a user message"):
        strict.render([{"role": "assistant", "content": "hi"}])


def test_syntax_error_is_reported():
    with pytest.raises(ChatTemplateError, match="does not parse"):
        ChatTemplate("{% for message in messages %}")


def test_sandbox_blocks_python_internals():
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{{ ''.__class__.__mro__[1].__subclasses__() }}").render([])
    with pytest.raises(ChatTemplateError, match="underscore"):
        ChatTemplate("{% set ns = namespace() %}{% set ns._x = 1 %}").render([])


def test_text_parts_join_into_a_string(template):
    parts = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    assert template.render([{"role": "user", "content": parts}]) == template.render([{"role": "user", "content": "first\nsecond"}])


@pytest.mark.parametrize(
    "image_part",
    [{"type": "image"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}],
)
def test_image_parts_reach_a_vision_template(hf_gguf_tokenizer, image_part):
    messages = [{"role": "user", "content": [image_part, {"type": "text", "text": "What is in this picture?"}]}]
    rendered = ChatTemplate(QWEN2_VL_TEMPLATE).render(messages)
    hf_messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in this picture?"}]}]
    assert rendered == hf_render(hf_gguf_tokenizer, hf_messages, chat_template=QWEN2_VL_TEMPLATE, add_generation_prompt=True)
    assert "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is in this picture?<|im_end|>\n" in rendered


def test_vision_template_counts_images():
    content = [{"type": "image"}, {"type": "text", "text": "and"}, {"type": "image"}]
    rendered = ChatTemplate(QWEN2_VL_TEMPLATE).render([{"role": "user", "content": content}], add_vision_id=True)
    assert "Picture 1: <|vision_start|><|image_pad|><|vision_end|>andPicture 2: <|vision_start|>" in rendered


def test_text_only_template_rejects_images(template):
    with pytest.raises(ChatTemplateError, match="does not accept image content"):
        template.render([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}])


@pytest.mark.parametrize(
    "messages, problem",
    [
        ([{"content": "no role"}], "role"),
        ([{"role": "user", "content": [{"type": "audio", "audio": "x"}]}], "unsupported content part 'audio'"),
        ([{"role": "user", "content": 42}], "string or a list"),
    ],
)
def test_malformed_messages(template, messages, problem):
    with pytest.raises(ChatTemplateError, match=problem):
        template.render(messages)


def test_none_valued_keys_are_dropped():
    template = ChatTemplate("{% for m in messages %}{{ m.role }}:{{ 'tool_calls' in m }}{% endfor %}")
    assert template.render([{"role": "assistant", "content": "x", "tool_calls": None}]) == "assistant:False"


def test_fallback_is_chatml(hf_gguf_tokenizer):
    fallback = ChatTemplate(None)
    assert fallback.is_fallback and fallback.source == CHATML_TEMPLATE
    messages = CONVERSATIONS["multi-turn"]
    assert fallback.render(messages) == hf_render(hf_gguf_tokenizer, messages, chat_template=CHATML_TEMPLATE, add_generation_prompt=True)
    assert fallback.render([{"role": "user", "content": "hi"}]) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_generation_tag_renders_its_body():
    template = ChatTemplate("{% for m in messages %}{% generation %}<{{ m.content }}>{% endgeneration %}{% endfor %}")
    assert template.render([{"role": "assistant", "content": "a"}]) == "<a>"
