"""OpenAI response bodies: whole responses, stream chunks, logprobs and usage, for chat and completions.

One Formatter per request holds what every body repeats (id, created, model)
and the request's extensions (`return_token_ids` adds the generated ids to
each choice and chunk). Chat and completions differ only in the choice's
shape, so each has a small subclass.
"""

from __future__ import annotations

import json
import secrets
import time

from quart import Response

from strata.engine.output import Event, TokenLogprob
from strata.engine.stream import Completion

from .schemas import Options


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


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

    def response(self, done: Completion) -> dict:
        choice = self._choice(done.text, done.logprobs if self.options.params.logprobs else None)
        choice["finish_reason"] = done.finish_reason
        if self.options.return_token_ids:
            choice["token_ids"] = list(done.token_ids)
        body = self._envelope(self.object_name, [choice])
        body["usage"] = usage(done.prompt_tokens, done.completion_tokens)
        return body

    # ------------------------------------------------------------ stream chunks

    def opening_chunks(self) -> list[dict]:
        return []

    def delta_chunk(self, event: Event) -> dict | None:
        """The chunk for one engine event's tokens, or None when it shows nothing."""
        wants_ids = self.options.return_token_ids and event.token_ids
        wants_logprobs = self.options.params.logprobs and event.logprobs
        if not (event.text or wants_ids or wants_logprobs):
            return None
        choice = self._delta_choice(event.text, event.logprobs if wants_logprobs else None)
        choice["finish_reason"] = None
        if self.options.return_token_ids:
            choice["token_ids"] = list(event.token_ids)
        return self._chunk([choice])

    def finish_chunk(self, reason: str) -> dict:
        choice = self._delta_choice("", None, empty=True)
        choice["finish_reason"] = reason
        if self.options.return_token_ids:
            choice["token_ids"] = []
        return self._chunk([choice])

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict:
        body = self._envelope(self.chunk_object, [])
        body["usage"] = usage(prompt_tokens, completion_tokens)
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

    def _choice(self, text: str, logprobs: list[TokenLogprob] | None) -> dict:
        raise NotImplementedError

    def _delta_choice(self, text: str, logprobs: list[TokenLogprob] | None, empty: bool = False) -> dict:
        raise NotImplementedError


class ChatFormatter(Formatter):
    object_name = "chat.completion"
    chunk_object = "chat.completion.chunk"
    id_prefix = "chatcmpl"

    def opening_chunks(self) -> list[dict]:
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        if self.options.return_token_ids:
            choice["token_ids"] = []
        return [self._chunk([choice])]

    def _choice(self, text, logprobs):
        return {"index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": self._logprobs(logprobs)}

    def _delta_choice(self, text, logprobs, empty=False):
        return {"index": 0, "delta": {} if empty else {"content": text}, "logprobs": self._logprobs(logprobs)}

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
        self._offset = 0        # text_offset of the next token's logprob entry

    def _choice(self, text, logprobs):
        return {"index": 0, "text": text, "logprobs": self._logprobs(logprobs)}

    def _delta_choice(self, text, logprobs, empty=False):
        return self._choice(text, logprobs)

    def _logprobs(self, logprobs: list[TokenLogprob] | None) -> dict | None:
        if logprobs is None:
            return None
        out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for lp in logprobs:
            text = self.token_text(lp.token_id)
            out["tokens"].append(text)
            out["token_logprobs"].append(lp.logprob)
            out["top_logprobs"].append({self.token_text(t): v for t, v in lp.top})
            out["text_offset"].append(self._offset)
            self._offset += len(text)
        return out


def formatter_for(kind: str, options: Options, tokenizer) -> Formatter:
    return (ChatFormatter if kind == "chat" else CompletionFormatter)(options, tokenizer)


def json_response(body: dict, status: int = 200) -> Response:
    return Response(json.dumps(body, ensure_ascii=False), status=status, content_type="application/json")
