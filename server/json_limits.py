"""Bounds on a parsed JSON body: nesting depth, finite numbers, and the amount of text it carries.

json.loads recurses once per nesting level, so `[[[[...` 20,000 deep ends
in RecursionError (caught by the parser's caller); anything that does parse
is walked here once, without recursion: deeper than MAX_DEPTH is refused (no
request field nests that deep, and later code that recurses stays safe),
numbers must be finite (1e999 parses as inf), and the characters of its
strings are counted, image URLs excepted, for the early prompt-size bound
(input_bounds).
"""

from __future__ import annotations

import math

from .errors import bad_request

MAX_DEPTH = 32
_URL_KEYS = frozenset({"url", "image_url"})    # image data: bounded by the media limits, not the context


def scan(body, max_depth: int = MAX_DEPTH) -> int:
    """The number of text characters in `body` (image URLs excepted); a 400 for depth or non-finite numbers."""
    chars = 0
    stack = [(body, 1, None)]
    while stack:
        value, depth, key = stack.pop()
        if isinstance(value, str):
            if key not in _URL_KEYS:
                chars += len(value)
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise bad_request("the request body holds a number too large to represent (such as 1e999); "
                                  "numbers must be finite", code="invalid_json")
            continue
        if isinstance(value, dict):
            items = value.items()
        elif isinstance(value, list):
            items = ((None, v) for v in value)
        else:
            continue
        if depth > max_depth:
            raise bad_request(f"the request body nests objects and arrays more than {max_depth} levels deep",
                              code="invalid_json")
        for child_key, child in items:
            if isinstance(child, (str, float, dict, list)):
                stack.append((child, depth + 1, child_key if child_key is not None else key))
    return chars
