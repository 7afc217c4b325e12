"""One streamed chat request against an OpenAI-compatible server, timed chunk by chunk.

The result keeps what the comparison and the statistics need: the text, the
generated token ids when the server returns them (Strata's
`return_token_ids`), the number of generated tokens, the time to the first
token, the gaps between chunks that carried tokens, and the prompt tokens
the server reports and how many of them came from its prompt cache (OpenAI's
`usage.prompt_tokens_details.cached_tokens`, or llama-server's
`timings.cache_n`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx


@dataclass
class StreamResult:
    index: int
    turn: int = 0                           # the turn of a conversation (0: the first request)
    start: float = 0.0                      # perf_counter at send
    end: float = 0.0                        # perf_counter at [DONE] or error
    text: str = ""
    token_ids: list[int] | None = None      # None: the server sent no ids
    num_tokens: int = 0                     # usage.completion_tokens when sent, else counted
    ttft: float | None = None               # seconds from send to the first token
    gaps: list[float] = field(default_factory=list)   # seconds between token-bearing chunks
    finish_reason: str | None = None
    error: str | None = None
    prompt_tokens: int | None = None        # usage.prompt_tokens when sent
    cached_tokens: int | None = None        # prompt tokens served from the server's cache, when reported

    @property
    def ok(self) -> bool:
        return self.error is None

    def same_output(self, other: "StreamResult") -> bool:
        """Equal token ids when both runs have them, equal text otherwise."""
        if self.token_ids is not None and other.token_ids is not None:
            return self.token_ids == other.token_ids
        return self.text == other.text


async def stream_chat(http: httpx.AsyncClient, url: str, body: dict, index: int, turn: int = 0) -> StreamResult:
    """POSTs `body` to `url` and reads the SSE stream to its end; errors are recorded, never raised."""
    result = StreamResult(index=index, turn=turn, start=time.perf_counter())
    counted = 0
    usage_tokens = None
    last = None
    done = False
    try:
        async with http.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                await response.aread()
                result.error = f"HTTP {response.status_code}: {_error_message(response)}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    result.error = f"stream error: {chunk['error'].get('message', chunk['error'])}"
                    break
                if chunk.get("usage"):
                    usage_tokens = chunk["usage"].get("completion_tokens", usage_tokens)
                    _read_prompt_usage(chunk["usage"], result)
                if isinstance(chunk.get("timings"), dict) and result.cached_tokens is None:
                    cache_n = chunk["timings"].get("cache_n")          # llama-server
                    result.cached_tokens = cache_n if isinstance(cache_n, int) else None
                new_tokens = _read_choice(chunk, result)
                if new_tokens:
                    now = time.perf_counter()
                    if last is None:
                        result.ttft = now - result.start
                    else:
                        result.gaps.append(now - last)
                    last = now
                    counted += new_tokens
        if not done and result.error is None:
            result.error = "the stream ended before [DONE]"
    except (httpx.HTTPError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        result.end = time.perf_counter()
    result.num_tokens = usage_tokens if usage_tokens is not None else counted
    return result


def _read_choice(chunk: dict, result: StreamResult) -> int:
    """Appends one chunk's text and ids; returns how many tokens it carried."""
    choices = chunk.get("choices") or []
    if not choices:
        return 0
    choice = choices[0]
    text = (choice.get("delta") or {}).get("content") or ""
    result.text += text
    if choice.get("finish_reason"):
        result.finish_reason = choice["finish_reason"]
    ids = choice.get("token_ids")
    if ids is not None:
        result.token_ids = (result.token_ids or []) + list(ids)
        return len(ids)
    # Servers without ids send one token per chunk (llama-server, vLLM); an empty delta carries none.
    return 1 if text else 0


def _read_prompt_usage(usage: dict, result: StreamResult) -> None:
    prompt = usage.get("prompt_tokens")
    if isinstance(prompt, int):
        result.prompt_tokens = prompt
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if isinstance(cached, int):
        result.cached_tokens = cached


def _error_message(response: httpx.Response) -> str:
    try:
        return response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return response.text[:200]
