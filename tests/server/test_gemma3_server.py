"""`strata serve --model gemma3-270m` answers chats over HTTP (the official openai client):
whole and streamed answers agree token for token, the built-in Gemma template is used
(9 tokens around the question), and a bad request still gets an OpenAI-shaped 400."""

from __future__ import annotations

import pytest

import server_helpers
from server_helpers import start_server

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def gemma_server(tmp_path_factory, monkeypatch_module):
    from strata.model_store import ModelStoreError, resolve_model

    try:
        resolve_model("gemma3-270m")
    except ModelStoreError as exc:
        pytest.skip(f"Gemma 3 270M is not in the cache ({exc}); run `strata models fetch gemma3-270m`")
    monkeypatch_module.setattr(server_helpers, "STARTUP_TIMEOUT_S", 900)   # a 262k-token vocabulary to build
    server = start_server(tmp_path_factory.mktemp("gemma-serve"), "--model", "gemma3-270m", "--batch", "2")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_chat_whole_and_streamed_agree(gemma_server):
    client = openai.OpenAI(base_url=gemma_server.url + "/v1", api_key="unused", timeout=300)
    messages = [{"role": "user", "content": "Name the capital of France."}]
    whole = client.chat.completions.create(model="gemma3-270m", messages=messages, max_tokens=16, temperature=0)
    assert whole.model == "gemma3-270m" and whole.choices[0].message.content
    # <bos><start_of_turn>user\n ... <end_of_turn>\n<start_of_turn>model\n: 9 template tokens around the question.
    assert whole.usage.prompt_tokens > 9
    pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="gemma3-270m", messages=messages, max_tokens=16, temperature=0, stream=True) if c.choices]
    assert "".join(pieces) == whole.choices[0].message.content


def test_bad_request_is_a_400(gemma_server):
    client = openai.OpenAI(base_url=gemma_server.url + "/v1", api_key="unused", timeout=300)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="gemma3-270m", messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=-3)
