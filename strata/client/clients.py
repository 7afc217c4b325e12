"""The Strata SDK: sync and async HTTP clients for a `strata serve` server, on httpx.

    from strata.client import Client
    with Client("http://127.0.0.1:8080") as client:
        print(client.chat("What is the capital of France?", temperature=0).text)
        for chunk in client.chat_stream("Tell me a story", max_tokens=64):
            print(chunk.text, end="", flush=True)

AsyncClient has the same methods as coroutines and async iterators (to stop
reading a stream early and hang up at once, wrap it in contextlib.closing or
contextlib.aclosing; the server then cancels the request). Results
are dataclasses (strata.client.types) and carry the generated token ids.
A 503 (queue full) or 429 is retried after the server's Retry-After (or an
exponential backoff), at most `max_retries` times; any other error raises
APIError with the server's message, status and code at once.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx

from .types import (APIConnectionError, APIError, APITimeoutError, Completion, CompletionChunk, Model,
                           StrataClientError, TokenLogprob, Usage, error_from_body, parse_chunk, parse_completion,
                           parse_models)

__all__ = ["Client", "AsyncClient", "Completion", "CompletionChunk", "Usage", "TokenLogprob", "Model",
           "StrataClientError", "APIError", "APIConnectionError", "APITimeoutError"]

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
RETRY_STATUSES = (429, 503)
MAX_RETRY_WAIT_S = 30.0


class _Base:
    def __init__(self, base_url: str = DEFAULT_BASE_URL, api_key: str | None = None, *, timeout: float = 120.0,
                 max_retries: int = 3, model: str | None = None):
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        base = base_url.rstrip("/")
        self.base_url = base[:-3] if base.endswith("/v1") else base       # accept OpenAI-style .../v1 too
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.model = model

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _chat_body(self, messages, stream: bool, options: dict) -> dict:
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        return self._body({"messages": messages}, stream, options)

    def _body(self, body: dict, stream: bool, options: dict) -> dict:
        body = {**body, "model": self.model, "return_token_ids": True,
                **{k: v for k, v in options.items() if v is not None}}
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return {k: v for k, v in body.items() if v is not None}

    def _retry_delay(self, response: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying this response, or None to give up."""
        if response.status_code not in RETRY_STATUSES or attempt >= self.max_retries:
            return None
        try:
            delay = float(response.headers.get("Retry-After", ""))
        except ValueError:
            delay = 0.5 * 2 ** attempt
        return min(max(delay, 0.0), MAX_RETRY_WAIT_S) * random.uniform(1.0, 1.25)


def _check(response: httpx.Response) -> None:
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = response.text
        raise error_from_body(response.status_code, body)


def _sse_chunk(data: str) -> CompletionChunk | None:
    """The chunk of one `data:` payload; None for [DONE]; an error event raises APIError."""
    if data.strip() == "[DONE]":
        return None
    try:
        body = json.loads(data)
    except ValueError:
        raise APIError(f"the server sent a stream event that is not JSON: {data[:200]!r}") from None
    if isinstance(body, dict) and "error" in body:
        raise error_from_body(None, body)
    return parse_chunk(body)


def _sse_data(lines: Iterator[str]) -> Iterator[str]:
    """The data payload of each event (its `data:` lines joined); other fields are ignored."""
    data: list[str] = []
    for line in lines:
        event = _sse_line(line, data)
        if event is not None:
            yield event
    if data:
        yield "\n".join(data)


async def _sse_data_async(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    data: list[str] = []
    async for line in lines:
        event = _sse_line(line, data)
        if event is not None:
            yield event
    if data:
        yield "\n".join(data)


def _sse_line(line: str, data: list[str]) -> str | None:
    """Adds a `data:` line to the event being read; a blank line ends the event and returns it."""
    if line.startswith("data:"):
        data.append(line[5:].removeprefix(" "))
    elif not line and data:
        event = "\n".join(data)
        data.clear()
        return event
    return None


@contextlib.contextmanager
def _transport_errors():
    try:
        yield
    except httpx.TimeoutException as exc:
        raise APITimeoutError(f"the server did not answer in time: {exc}") from exc
    except httpx.TransportError as exc:
        raise APIConnectionError(f"could not talk to the server: {type(exc).__name__}: {exc}") from exc


class Client(_Base):
    """A synchronous client; use it as a context manager, or call close()."""

    def __init__(self, base_url: str = DEFAULT_BASE_URL, api_key: str | None = None, **settings):
        super().__init__(base_url, api_key, **settings)
        self._http = httpx.Client(base_url=self.base_url, timeout=self.timeout)

    def chat(self, messages, **options) -> Completion:
        """messages: a list of {"role", "content"} or one user message as a string. options:
        max_tokens, temperature, top_p, top_k, min_p, seed, stop, logprobs, top_logprobs, ignore_eos, ..."""
        body = self._chat_body(messages, False, options)
        return parse_completion(self._request("POST", "/v1/chat/completions", body))

    def chat_stream(self, messages, **options) -> Iterator[CompletionChunk]:
        yield from self._stream("/v1/chat/completions", self._chat_body(messages, True, options))

    def complete(self, prompt: str | list[int], **options) -> Completion:
        """prompt: text or token ids; options as chat(), but logprobs is a count of alternatives."""
        body = self._body({"prompt": prompt}, False, options)
        return parse_completion(self._request("POST", "/v1/completions", body))

    def complete_stream(self, prompt: str | list[int], **options) -> Iterator[CompletionChunk]:
        yield from self._stream("/v1/completions", self._body({"prompt": prompt}, True, options))

    def models(self) -> list[Model]:
        return parse_models(self._request("GET", "/v1/models"))

    def health(self) -> dict:
        """{"status": "ok", ...} when serving; {"status": "shutting_down"} etc. otherwise (no retries)."""
        with _transport_errors():
            return self._http.get("/health").json()

    def tokenize(self, text: str | None = None, *, messages: list | None = None,
                 add_special_tokens: bool = True) -> list[int]:
        body = {"messages": messages} if messages is not None else {"prompt": text,
                                                                     "add_special_tokens": add_special_tokens}
        return self._request("POST", "/tokenize", body)["tokens"]

    def detokenize(self, token_ids: list[int]) -> str:
        return self._request("POST", "/detokenize", {"tokens": list(token_ids)})["prompt"]

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _send(self, method: str, path: str, body: dict | None, stream: bool) -> httpx.Response:
        for attempt in range(self.max_retries + 1):
            with _transport_errors():
                request = self._http.build_request(method, path, json=body, headers=self._headers())
                response = self._http.send(request, stream=stream)
            delay = self._retry_delay(response, attempt)
            if delay is None:
                return response
            response.close()
            time.sleep(delay)
        raise AssertionError("unreachable")

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        response = self._send(method, path, body, stream=False)
        _check(response)
        return response.json()

    def _stream(self, path: str, body: dict) -> Iterator[CompletionChunk]:
        response = self._send("POST", path, body, stream=True)
        try:
            if response.status_code >= 400:
                with _transport_errors():
                    response.read()
                _check(response)
            with _transport_errors():
                for data in _sse_data(response.iter_lines()):
                    chunk = _sse_chunk(data)
                    if chunk is None:
                        return
                    yield chunk
        finally:
            response.close()


class AsyncClient(_Base):
    """The asynchronous client (asyncio or trio via anyio); `async with`, or await aclose()."""

    def __init__(self, base_url: str = DEFAULT_BASE_URL, api_key: str | None = None, **settings):
        super().__init__(base_url, api_key, **settings)
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=self.timeout,
                                       limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))

    async def chat(self, messages, **options) -> Completion:
        body = self._chat_body(messages, False, options)
        return parse_completion(await self._request("POST", "/v1/chat/completions", body))

    def chat_stream(self, messages, **options) -> AsyncIterator[CompletionChunk]:
        return self._stream("/v1/chat/completions", self._chat_body(messages, True, options))

    async def complete(self, prompt: str | list[int], **options) -> Completion:
        body = self._body({"prompt": prompt}, False, options)
        return parse_completion(await self._request("POST", "/v1/completions", body))

    def complete_stream(self, prompt: str | list[int], **options) -> AsyncIterator[CompletionChunk]:
        return self._stream("/v1/completions", self._body({"prompt": prompt}, True, options))

    async def models(self) -> list[Model]:
        return parse_models(await self._request("GET", "/v1/models"))

    async def health(self) -> dict:
        with _transport_errors():
            return (await self._http.get("/health")).json()

    async def tokenize(self, text: str | None = None, *, messages: list | None = None,
                       add_special_tokens: bool = True) -> list[int]:
        body = {"messages": messages} if messages is not None else {"prompt": text,
                                                                     "add_special_tokens": add_special_tokens}
        return (await self._request("POST", "/tokenize", body))["tokens"]

    async def detokenize(self, token_ids: list[int]) -> str:
        return (await self._request("POST", "/detokenize", {"tokens": list(token_ids)}))["prompt"]

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def _send(self, method: str, path: str, body: dict | None, stream: bool) -> httpx.Response:
        for attempt in range(self.max_retries + 1):
            with _transport_errors():
                request = self._http.build_request(method, path, json=body, headers=self._headers())
                response = await self._http.send(request, stream=stream)
            delay = self._retry_delay(response, attempt)
            if delay is None:
                return response
            await response.aclose()
            await anyio.sleep(delay)
        raise AssertionError("unreachable")

    async def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        response = await self._send(method, path, body, stream=False)
        _check(response)
        return response.json()

    async def _stream(self, path: str, body: dict) -> AsyncIterator[CompletionChunk]:
        response = await self._send("POST", path, body, stream=True)
        try:
            if response.status_code >= 400:
                with _transport_errors():
                    await response.aread()
                _check(response)
            with _transport_errors():
                async for data in _sse_data_async(response.aiter_lines()):
                    chunk = _sse_chunk(data)
                    if chunk is None:
                        return
                    yield chunk
        finally:
            await response.aclose()
