"""OpenAI response bodies: whole responses, stream chunks, logprobs and usage, for chat and completions.

One Formatter per request holds what every body repeats (id, created, model)
and the request's extensions (`return_token_ids` adds the generated ids to
each choice and chunk). A request has n choices (`index` 0..n-1), each an
engine request of its own. Chat and completions differ in the choice's
shape, so each has a small subclass; a chat choice's text goes through its
ChatOutputParser (strata.toolcall.parser), which splits reasoning_content
and tool_calls from the content.
"""

from __future__ import annotations

import json
import secrets
import time

from quart import Response

from strata.engine.output import Event, TokenLogprob
from strata.engine.stream import Completion
from strata.toolcall.parser import ChatOutputParser, Delta

from .schemas import Options


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    """OpenAI's usage object; cached_tokens: prompt tokens read from the prefix cache (docs/kv_pool.md)."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


class Formatter:
    object_name = ""
    chunk_object = ""
    id_prefix = ""

    def __init__(self, options: Options, tokenizer):
        self.options = options
        self.tokenizer = tokenizer
        self.id = f"{self.id_prefix}-{secrets.token_hex(12)}"
        self.created = int(time.time())

    # ------------------------------------------------------------ whole responses

    def response(self, dones: list[Completion]) -> dict:
        choices = []
        for index, done in enumerate(dones):
            choice = self._choice(done.text, done.logprobs if self.options.params.logprobs else None, index)
            choice["finish_reason"] = self._finish_reason(index, done.finish_reason)
            if self.options.return_token_ids:
                choice["token_ids"] = list(done.token_ids)
            choices.append(choice)
        body = self._envelope(self.object_name, choices)
        body["usage"] = usage(dones[0].prompt_tokens, sum(d.completion_tokens for d in dones),
                              dones[0].cached_tokens)
        return body

    # ------------------------------------------------------------ stream chunks

    def opening_chunks(self) -> list[dict]:
        return []

    def delta_chunk(self, event: Event, index: int = 0) -> dict | None:
        """The chunk for one engine event's tokens, or None when it shows nothing."""
        wants_ids = self.options.return_token_ids and event.token_ids
        wants_logprobs = self.options.params.logprobs and event.logprobs
        delta = self._delta(event.text, index, final=event.final)
        if not (delta or wants_ids or wants_logprobs):
            return None
        choice = self._delta_choice(delta, event.logprobs if wants_logprobs else None, index)
        choice["finish_reason"] = None
        if self.options.return_token_ids:
            choice["token_ids"] = list(event.token_ids)
        return self._chunk([choice])

    def finish_chunk(self, reason: str, index: int = 0) -> dict:
        choice = self._delta_choice(Delta(), None, index, empty=True)
        choice["finish_reason"] = self._finish_reason(index, reason)
        if self.options.return_token_ids:
            choice["token_ids"] = []
        return self._chunk([choice])

    def _delta(self, text: str, index: int, final: bool) -> Delta:
        return Delta(content=text)

    def _finish_reason(self, index: int, reason: str) -> str:
        return reason

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
        body = self._envelope(self.chunk_object, [])
        body["usage"] = usage(prompt_tokens, completion_tokens, cached_tokens)
        return body

    # ------------------------------------------------------------ shared pieces

    def _chunk(self, choices: list[dict]) -> dict:
        body = self._envelope(self.chunk_object, choices)
        if self.options.include_usage:
            body["usage"] = None
        return body

    def _envelope(self, object_name: str, choices: list[dict]) -> dict:
        return {"id": self.id, "object": object_name, "created": self.created, "model": self.options.model,
                "system_fingerprint": None, "choices": choices}

    def token_bytes(self, token_id: int) -> bytes:
        """A token's bytes; ids past the tokenizer's table (padded embedding rows) have none."""
        try:
            return self.tokenizer.token_bytes(token_id)
        except IndexError:
            return b""

    def token_text(self, token_id: int) -> str:
        return self.token_bytes(token_id).decode("utf-8", errors="replace")

    def _choice(self, text: str, logprobs: list[TokenLogprob] | None, index: int) -> dict:
        raise NotImplementedError

    def _delta_choice(self, delta: Delta, logprobs: list[TokenLogprob] | None, index: int, empty: bool = False
                      ) -> dict:
        raise NotImplementedError


class ChatFormatter(Formatter):
    object_name = "chat.completion"
    chunk_object = "chat.completion.chunk"
    id_prefix = "chatcmpl"

    def __init__(self, options: Options, tokenizer, parsers: list[ChatOutputParser] | None = None):
        super().__init__(options, tokenizer)
        self.parsers = parsers or [ChatOutputParser() for _ in range(options.n)]

    def opening_chunks(self) -> list[dict]:
        chunks = []
        for index in range(len(self.parsers)):
            choice = {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                      "finish_reason": None}
            if self.options.return_token_ids:
                choice["token_ids"] = []
            chunks.append(self._chunk([choice]))
        return chunks

    def _choice(self, text, logprobs, index):
        parser = self.parsers[index]
        parser.push(text)
        parser.finish()
        message = {"role": "assistant", "content": parser.content_or_none}
        if parser.reasoning_text:
            message["reasoning_content"] = parser.reasoning_text
        if parser.calls:
            message["tool_calls"] = [c.as_dict() for c in parser.calls]
        return {"index": index, "message": message, "logprobs": self._logprobs(logprobs)}

    def _delta(self, text, index, final):
        parser = self.parsers[index]
        delta = parser.push(text)
        if final:
            rest = parser.finish()
            delta = Delta(delta.reasoning + rest.reasoning, delta.content + rest.content, delta.calls + rest.calls)
        return delta

    def _delta_choice(self, delta, logprobs, index, empty=False):
        body = {}
        if delta.reasoning:
            body["reasoning_content"] = delta.reasoning
        if delta.content or not (empty or delta.reasoning or delta.calls):
            body["content"] = delta.content
        if delta.calls:
            first = len(self.parsers[index].calls) - len(delta.calls)
            body["tool_calls"] = [c.as_dict(first + i) for i, c in enumerate(delta.calls)]
        return {"index": index, "delta": body, "logprobs": self._logprobs(logprobs)}

    def _finish_reason(self, index, reason):
        return "tool_calls" if reason == "stop" and self.parsers[index].calls else reason

    def _logprobs(self, logprobs: list[TokenLogprob] | None) -> dict | None:
        if logprobs is None:
            return None
        return {"content": [self._entry(lp.token_id, lp.logprob, lp.top) for lp in logprobs], "refusal": None}

    def _entry(self, token_id: int, logprob: float, top=None) -> dict:
        text = self.token_text(token_id)
        entry = {"token": text, "logprob": logprob, "bytes": list(self.token_bytes(token_id))}
        if top is not None:
            entry["top_logprobs"] = [self._entry(t, lp) for t, lp in top]
        return entry


class CompletionFormatter(Formatter):
    object_name = "text_completion"
    chunk_object = "text_completion"
    id_prefix = "cmpl"

    def __init__(self, options: Options, tokenizer):
        super().__init__(options, tokenizer)
        self._offset = [0] * options.n      # per choice: text_offset of the next token's logprob entry

    def _choice(self, text, logprobs, index):
        return {"index": index, "text": text, "logprobs": self._logprobs(logprobs, index)}

    def _delta_choice(self, delta, logprobs, index, empty=False):
        return self._choice(delta.content, logprobs, index)

    def _logprobs(self, logprobs: list[TokenLogprob] | None, index: int = 0) -> dict | None:
        if logprobs is None:
            return None
        out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for lp in logprobs:
            text = self.token_text(lp.token_id)
            out["tokens"].append(text)
            out["token_logprobs"].append(lp.logprob)
            out["top_logprobs"].append({self.token_text(t): v for t, v in lp.top})
            out["text_offset"].append(self._offset[index])
            self._offset[index] += len(text)
        return out


def formatter_for(kind: str, options: Options, tokenizer, parsers: list[ChatOutputParser] | None = None
                  ) -> Formatter:
    if kind == "chat":
        return ChatFormatter(options, tokenizer, parsers)
    return CompletionFormatter(options, tokenizer)


def json_response(body: dict, status: int = 200) -> Response:
    return Response(json.dumps(body, ensure_ascii=False), status=status, content_type="application/json")
