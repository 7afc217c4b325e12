"""Cheap bounds on a request's size, derived from the context length, checked before any tokenizing.

A prompt can't hold more tokens than a slot (ctx). Every token of a
byte-level BPE vocabulary stands for at most `max_token_bytes` bytes (the
longest entry, special tokens included), and a character is at least one
byte, so text of more than ctx x max_token_bytes characters has more than
ctx tokens; NORMALIZER_FACTOR covers tokenizers whose normalizer shortens
text first (NFC composes at most 3 code points into 1). Text past that bound
is refused at once, with the same error the exact count would give later.

The body limit follows: a text model's request is that much text, JSON
escapes (6 bytes per character at worst) and room for the rest; a vision
model's requests carry base64 images, so they keep VISION_BODY_BYTES.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import bad_request

NORMALIZER_FACTOR = 4
JSON_ESCAPE_BYTES = 6
BODY_SLACK_BYTES = 64 * 1024
MIN_BODY_BYTES = 1024 * 1024
VISION_BODY_BYTES = 64 * 1024 * 1024         # room for a few base64 images
MAX_BODY_BYTES = VISION_BODY_BYTES


@dataclass(frozen=True)
class InputBounds:
    ctx: int
    max_token_bytes: int
    vision: bool

    @classmethod
    def of(cls, engine) -> "InputBounds":
        tokenizer = engine.tokenizer
        longest = max((len(tokenizer.token_bytes(i)) for i in range(tokenizer.vocab_size)), default=1)
        return cls(engine.config.ctx, max(1, longest), engine.model.vision is not None)

    @property
    def max_text_chars(self) -> int:
        """More characters than this can't fit in a slot, whatever they are."""
        return NORMALIZER_FACTOR * self.ctx * self.max_token_bytes

    @property
    def max_body_bytes(self) -> int:
        if self.vision:
            return VISION_BODY_BYTES
        return min(MAX_BODY_BYTES, max(MIN_BODY_BYTES, JSON_ESCAPE_BYTES * self.max_text_chars + BODY_SLACK_BYTES))

    def check_text(self, num_chars: int, param: str) -> None:
        if num_chars > self.max_text_chars:
            raise bad_request(f"the request holds {num_chars:,} characters of text, more than the {self.ctx}-token "
                              f"context can take whatever the text (at most {self.max_text_chars:,} characters "
                              "before tokenizing); shorten the prompt", param, code="context_length_exceeded")
