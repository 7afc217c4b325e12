"""The Strata SDK (strata.client) against `strata serve`: sync and async clients, typed results,
streaming, token ids, errors carrying the server's message, and retries on 503."""

from __future__ import annotations

import contextlib
import threading
import time

import anyio
import pytest
from server_helpers import MODEL, metric, metrics, wait_idle

from strata.client import APIConnectionError, APIError, AsyncClient, Client, Completion, CompletionChunk

QUESTION = "What is the capital of France?"


@pytest.fixture
def client(server):
    with Client(server.url, timeout=120) as c:
        yield c


def test_chat_returns_a_typed_completion(client):
    r = client.chat(QUESTION, temperature=0, max_tokens=16)
    assert isinstance(r, Completion) and r.model == MODEL
    assert "Paris" in r.text and r.finish_reason in ("stop", "length")
    assert len(r.token_ids) == r.usage.completion_tokens > 0
    assert client.detokenize(r.token_ids).startswith(r.text)


def test_sync_stream_equals_the_whole_answer(client):
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": QUESTION}]
    whole = client.chat(messages, temperature=0.7, seed=11, max_tokens=10)
    chunks = list(client.chat_stream(messages, temperature=0.7, seed=11, max_tokens=10))
    assert all(isinstance(c, CompletionChunk) for c in chunks)
    assert "".join(c.text for c in chunks) == whole.text
    assert [t for c in chunks for t in c.token_ids] == whole.token_ids
    assert [c.finish_reason for c in chunks if c.finish_reason] == [whole.finish_reason]
    assert chunks[-1].usage == whole.usage


def test_complete_with_text_and_ids(client):
    ids = client.tokenize("def fibonacci(n):")
    by_text = client.complete("def fibonacci(n):", max_tokens=8, temperature=0)
    by_ids = client.complete(ids, max_tokens=8, temperature=0)
    assert by_text.token_ids == by_ids.token_ids and by_text.text == by_ids.text
    streamed = list(client.complete_stream(ids, max_tokens=8, temperature=0))
    assert [t for c in streamed for t in c.token_ids] == by_ids.token_ids


def test_logprobs_are_typed(client):
    r = client.complete("Hello", max_tokens=2, temperature=0, logprobs=3)
    assert len(r.logprobs) == 2 and all(len(lp.top) == 3 for lp in r.logprobs)
    chat = client.chat(QUESTION, max_tokens=2, temperature=0, logprobs=True, top_logprobs=2)
    assert [lp.token for lp in chat.logprobs] == [client.detokenize([t]) for t in chat.token_ids]


def test_models_health_tokenize(client):
    assert [m.id for m in client.models()] == [MODEL]
    assert client.health()["status"] == "ok"
    text = "Strata keeps every stream exact. ¿Qué tal? 東京 🙂"
    assert client.detokenize(client.tokenize(text)) == text
    chat_ids = client.tokenize(messages=[{"role": "user", "content": QUESTION}])
    assert client.chat(QUESTION, max_tokens=1).usage.prompt_tokens == len(chat_ids)


def test_errors_carry_the_server_message(client):
    with pytest.raises(APIError) as bad:
        client.chat(QUESTION, top_p=0)
    assert bad.value.status_code == 400 and bad.value.param == "top_p" and "top_p" in bad.value.message
    with Client(client.base_url, model="nope") as other, pytest.raises(APIError) as unknown:
        other.chat(QUESTION)
    assert unknown.value.status_code == 404 and unknown.value.code == "model_not_found"
    with pytest.raises(APIError) as streamed:
        list(client.chat_stream(QUESTION, temperature="hot"))
    assert streamed.value.status_code == 400


def test_connection_errors_are_typed():
    with Client("http://127.0.0.1:9", timeout=2) as c:
        with pytest.raises(APIConnectionError):
            c.models()


def test_base_url_may_end_in_v1(server):
    with Client(server.url + "/v1/") as c:
        assert c.models()[0].id == MODEL


def test_async_client(server):
    async def main():
        async with AsyncClient(server.url, timeout=120) as c:
            whole = await c.chat(QUESTION, temperature=0, max_tokens=8)
            chunks = [chunk async for chunk in c.chat_stream(QUESTION, temperature=0, max_tokens=8)]
            completion = await c.complete([1, 2, 3], max_tokens=2, temperature=0)
            ids = await c.tokenize("hello there")
            return whole, chunks, completion, ids, await c.detokenize(ids), await c.models(), await c.health()

    whole, chunks, completion, ids, text, models, health = anyio.run(main)
    assert "".join(c.text for c in chunks) == whole.text
    assert [t for c in chunks for t in c.token_ids] == whole.token_ids
    assert len(completion.token_ids) == 2 and text == "hello there"
    assert models[0].id == MODEL and health["status"] == "ok"


def test_async_errors(server):
    async def main():
        async with AsyncClient(server.url) as c:
            with pytest.raises(APIError) as bad:
                async for _ in c.complete_stream("x", max_tokens=-1):
                    pass
            return bad.value

    error = anyio.run(main)
    assert error.status_code == 400 and error.param == "max_tokens"


def test_retries_a_full_queue_until_the_slot_frees(tiny_server):
    """One slot, no queue: a request sent while a stream holds the slot gets 503 with Retry-After;
    the SDK waits and retries, and succeeds once the stream is done."""
    before = metric(metrics(tiny_server), "strata_requests_total", outcome="rejected")
    with Client(tiny_server.url, max_retries=6) as holder, Client(tiny_server.url, max_retries=6) as waiter:
        stream = holder.complete_stream("Count: 1, 2,", max_tokens=12, ignore_eos=True)
        next(stream)                          # the slot is held from here
        done = threading.Event()
        threading.Thread(target=lambda: (list(stream), done.set()), daemon=True).start()
        start = time.monotonic()
        result = waiter.complete("Hi", max_tokens=1)
        assert result.usage.completion_tokens == 1 and done.wait(10)
        assert time.monotonic() - start >= 0.9                  # it waited Retry-After (1 s) at least once
    assert metric(metrics(tiny_server), "strata_requests_total", outcome="rejected") > before
    wait_idle(tiny_server)


def test_retries_are_bounded(tiny_server):
    with Client(tiny_server.url) as holder, Client(tiny_server.url, max_retries=0) as impatient:
        stream = holder.complete_stream("Count: 1, 2,", max_tokens=400, ignore_eos=True)
        with contextlib.closing(stream):
            next(stream)
            with pytest.raises(APIError) as full:
                impatient.complete("Hi", max_tokens=1)
    assert full.value.status_code == 503 and full.value.code == "overloaded"
    wait_idle(tiny_server)
