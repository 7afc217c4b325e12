"""The official `openai` package against `strata serve`: chat (streamed and not), completions with
token-id prompts, logprobs, models, and errors surfacing as the package's exception types."""

from __future__ import annotations

import openai
import pytest
from server_helpers import MODEL, wait_idle

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture
def client(server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


def test_chat_greedy_answers_and_counts_usage(client):
    r = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=16)
    choice = r.choices[0]
    assert r.object == "chat.completion" and r.model == MODEL and r.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant"
    assert "Paris" in choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 10 and 0 < r.usage.completion_tokens <= 16
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_matches_the_whole_answer(client):
    whole = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=12,
                                           extra_body={"return_token_ids": True})
    chunks = list(client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=12,
                                                 stream=True, stream_options={"include_usage": True},
                                                 extra_body={"return_token_ids": True}))
    assert len({c.id for c in chunks}) == 1 and all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0] is chunks[-2]
    assert finish[0].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    ids = [t for c in chunks if c.choices for t in c.choices[0].model_extra["token_ids"]]
    assert text == whole.choices[0].message.content
    assert ids == whole.choices[0].model_extra["token_ids"]
    assert len(ids) == whole.usage.completion_tokens


def test_completions_take_token_ids_text_and_a_batch_of_one(client, http):
    prompt = "The three primary colors are"
    ids = http.post("/tokenize", json={"prompt": prompt}).json()["tokens"]
    results = [client.completions.create(model=MODEL, prompt=p, max_tokens=6, temperature=0,
                                         extra_body={"return_token_ids": True})
               for p in (prompt, ids, [ids], [prompt])]
    assert results[0].object == "text_completion"
    assert len({r.choices[0].text for r in results}) == 1
    assert len({tuple(r.choices[0].model_extra["token_ids"]) for r in results}) == 1
    assert all(r.usage.prompt_tokens == len(ids) for r in results)


def test_completions_stream(client):
    chunks = list(client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5, seed=7,
                                            temperature=0.8, stream=True))
    whole = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5, seed=7, temperature=0.8)
    assert chunks[-1].choices[0].finish_reason == "length"
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=4,
                                       logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob
        assert entry.top_logprobs[0].token == entry.token          # greedy: the chosen token is the best
        assert bytes(entry.bytes).decode("utf-8", errors="replace") == entry.token


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL, prompt="1, 2, 3,", max_tokens=3, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 3
    assert "".join(lp.tokens) == r.choices[0].text
    assert all(len(top) == 2 for top in lp.top_logprobs)


def test_models(client):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4")


def test_errors_surface_as_openai_exceptions(client):
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=-1)
    assert bad.value.status_code == 400 and "temperature" in bad.value.message
    assert bad.value.body["param"] == "temperature" and bad.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=QUESTION, n=0)
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="no-such-model", messages=QUESTION)
    assert missing.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        list(client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=0, stream=True))


def test_authentication_error(key_server):
    with openai.OpenAI(base_url=f"{key_server.url}/v1", api_key="wrong", max_retries=0) as wrong:
        with pytest.raises(openai.AuthenticationError) as denied:
            wrong.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=1)
    assert denied.value.status_code == 401
    with openai.OpenAI(base_url=f"{key_server.url}/v1", api_key=key_server.api_key, max_retries=0) as right:
        assert right.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=1).choices


def test_queue_full_is_a_503(tiny_server):
    """One slot, no queue: while a stream holds the slot, the next request is refused with 503."""
    with openai.OpenAI(base_url=f"{tiny_server.url}/v1", api_key="x", max_retries=0) as client:
        stream = client.completions.create(model="tiny", prompt="Count: 1, 2,", max_tokens=400, stream=True,
                                           extra_body={"ignore_eos": True})
        first = next(iter(stream))           # the slot is taken once a token has come back
        assert first.choices[0].finish_reason is None
        try:
            with pytest.raises(openai.InternalServerError) as full:
                client.completions.create(model="tiny", prompt="Hi", max_tokens=1)
            assert full.value.status_code == 503
            assert full.value.response.headers["Retry-After"].isdigit()
            assert full.value.body["code"] == "overloaded"
        finally:
            stream.close()
        wait_idle(tiny_server)
        assert client.completions.create(model="tiny", prompt="Hi", max_tokens=1).choices


def test_stop_strings_end_the_answer_before_them(client):
    full = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=16)
    text = full.choices[0].message.content
    assert "Paris" in text
    cut = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=16,
                                         stop=["Paris", "never appears"])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == text[:text.index("Paris")]
    chunks = list(client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=16,
                                                 stop="Paris", stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == cut.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_max_completion_tokens_and_default_lengths(client):
    r = client.chat.completions.create(model=MODEL, messages=QUESTION, max_completion_tokens=3,
                                       extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length"
    r = client.completions.create(model=MODEL, prompt="Once upon a time", extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 16                 # OpenAI's default for completions


def test_content_parts_and_developer_role(client):
    as_text = client.chat.completions.create(
        model=MODEL, temperature=0, max_tokens=8,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a fruit.\nOne word."}])
    as_parts = client.chat.completions.create(
        model=MODEL, temperature=0, max_tokens=8,
        messages=[{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                  {"role": "user", "content": [{"type": "text", "text": "Name a fruit."},
                                               {"type": "text", "text": "One word."}]}])
    assert as_parts.choices[0].message.content == as_text.choices[0].message.content
    assert as_parts.usage.prompt_tokens == as_text.usage.prompt_tokens


def test_seeded_sampling_is_reproducible_and_seeds_differ(client):
    def sample(seed):
        return client.completions.create(model=MODEL, prompt="My favourite word is", max_tokens=8, temperature=1.0,
                                         seed=seed, extra_body={"return_token_ids": True, "min_p": 0.05}
                                         ).choices[0].model_extra["token_ids"]

    first = sample(1)
    assert sample(1) == first
    assert any(sample(s) != first for s in (2, 3, 4))
