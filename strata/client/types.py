"""The Strata SDK's typed results and exceptions, and how server JSON becomes them.

Shared by the sync and async clients in strata.client.clients: Completion (a whole
answer), CompletionChunk (one streamed piece), Usage, TokenLogprob, Model,
and the exceptions, which carry the server's own message, status and code.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class StrataClientError(Exception):
    """Base of every error the SDK raises."""


class APIConnectionError(StrataClientError):
    """The server could not be reached, or the connection broke."""


class APITimeoutError(APIConnectionError):
    """The server did not answer within the client's timeout."""


class APIError(StrataClientError):
    """The server refused or failed the request; `message` is the server's explanation.

    status_code is the HTTP status (None for an error event inside a stream);
    type, param and code are the fields of the OpenAI error body."""

    def __init__(self, message: str, status_code: int | None = None, *, type: str | None = None,
                 param: str | None = None, code: str | None = None, body=None):
        super().__init__(f"{status_code}: {message}" if status_code else message)
        self.message = message
        self.status_code = status_code
        self.type = type
        self.param = param
        self.code = code
        self.body = body


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


@dataclass
class TokenLogprob:
    token: str
    logprob: float
    top: list[tuple[str, float]] = field(default_factory=list)   # best first


@dataclass
class Completion:
    """A whole answer of chat() or complete()."""

    id: str
    model: str
    text: str
    finish_reason: str | None
    usage: Usage
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class CompletionChunk:
    """One streamed piece: new text and token ids, or the end (finish_reason), or usage."""

    id: str
    model: str
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    logprobs: list[TokenLogprob] | None = None
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class Model:
    id: str
    created: int = 0
    owned_by: str = ""
    max_model_len: int | None = None


# ---------------------------------------------------------------- parsing


def error_from_body(status: int | None, body) -> APIError:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return APIError(str(error.get("message", "")), status, type=error.get("type"), param=error.get("param"),
                        code=error.get("code"), body=body)
    text = body if isinstance(body, str) else repr(body)
    return APIError(text[:500] or "the server gave no explanation", status, body=body)


def parse_completion(body: dict) -> Completion:
    choice = _first_choice(body)
    return Completion(id=body.get("id", ""), model=body.get("model", ""), text=_choice_text(choice),
                      finish_reason=choice.get("finish_reason"), usage=parse_usage(body.get("usage")) or Usage(),
                      token_ids=list(choice.get("token_ids") or []), logprobs=parse_logprobs(choice.get("logprobs")),
                      raw=body)


def parse_chunk(body: dict) -> CompletionChunk:
    chunk = CompletionChunk(id=body.get("id", ""), model=body.get("model", ""), usage=parse_usage(body.get("usage")),
                            raw=body)
    choices = body.get("choices") or []
    if choices:
        choice = choices[0]
        chunk.text = _choice_text(choice)
        chunk.token_ids = list(choice.get("token_ids") or [])
        chunk.finish_reason = choice.get("finish_reason")
        chunk.logprobs = parse_logprobs(choice.get("logprobs"))
    return chunk


def parse_usage(usage) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    return Usage(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0), usage.get("total_tokens", 0))


def parse_logprobs(logprobs) -> list[TokenLogprob] | None:
    """Either shape: chat ({"content": [...]}) or completions ({"tokens", "token_logprobs", ...})."""
    if not isinstance(logprobs, dict):
        return None
    if "content" in logprobs:
        return [TokenLogprob(e["token"], e["logprob"], [(t["token"], t["logprob"]) for t in e.get("top_logprobs", [])])
                for e in logprobs["content"] or []]
    tops = logprobs.get("top_logprobs") or [{}] * len(logprobs.get("tokens", []))
    return [TokenLogprob(token, lp, sorted((top or {}).items(), key=lambda kv: -kv[1]))
            for token, lp, top in zip(logprobs.get("tokens", []), logprobs.get("token_logprobs", []), tops)]


def parse_models(body: dict) -> list[Model]:
    return [Model(m.get("id", ""), m.get("created", 0), m.get("owned_by", ""), m.get("max_model_len"))
            for m in body.get("data", [])]


def _first_choice(body: dict) -> dict:
    choices = body.get("choices") or []
    if not choices:
        raise APIError("the response holds no choices", None, body=body)
    return choices[0]


def _choice_text(choice: dict) -> str:
    if "message" in choice:
        return choice["message"].get("content") or ""
    if "delta" in choice:
        return choice["delta"].get("content") or ""
    return choice.get("text") or ""
