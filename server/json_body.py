"""A request's JSON body, read within bounds: content type, size, nesting depth, finite numbers, text length.

The body must be JSON: sent as application/json (or a +json type), or with
no Content-Type at all (some clients send none); anything else (text/plain,
curl -d's form type) is a 415 that says which header to send, never parsed
as JSON regardless of what it claims to be. The size
bound is the app's MAX_CONTENT_LENGTH (413, from input_bounds); bodies past
INLINE_PARSE_BYTES are parsed in a worker thread (RequestWorkers), never on
the event loop; depth and numbers are checked by json_limits; with a
`text_param`, text that can't fit in a slot is refused before tokenizing.
"""

from __future__ import annotations

from collections.abc import Callable

from quart import Request

from . import json_limits, memory, schemas
from .errors import APIError

INLINE_PARSE_BYTES = 64 * 1024


def parse_and_scan(data: bytes) -> tuple[dict, int]:
    """The body as a JSON object and its number of text characters (blocking; run off the loop when large)."""
    body = schemas.parse_json(data)
    return body, json_limits.scan(body)


async def read_json(request: Request, state, text_param: str | Callable[[dict], str] | None = None) -> dict:
    """The request's body as a checked JSON object; text_param names the field a too-long text is blamed on
    (or picks it from the body)."""
    check_content_type(request.headers.get("Content-Type"))
    data = await request.get_data(cache=False)
    if len(data) > memory.LARGE_REQUEST_BYTES:
        request.scope[memory.SCOPE_KEY] = True
    if len(data) > INLINE_PARSE_BYTES:
        body, num_chars = await state.workers.run(parse_and_scan, data)
    else:
        body, num_chars = parse_and_scan(data)
    del data
    if text_param is not None:
        state.bounds.check_text(num_chars, text_param(body) if callable(text_param) else text_param)
    return body


def check_content_type(content_type: str | None) -> None:
    if not content_type:
        return
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json")):
        return
    raise APIError(415, f"the request body must be JSON sent with 'Content-Type: application/json', got "
                        f"{content_type[:100]!r}", code="unsupported_media_type")
