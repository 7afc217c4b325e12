"""A response body read from its raw (still encoded) chunks, never grown past a byte limit.

We ask for `Accept-Encoding: identity`, but a server may compress anyway; a
few kilobytes of gzip can inflate to gigabytes, so the decoded size is
bounded inside the decompressor (zlib's max_length), never after a chunk was
inflated whole. gzip and deflate are decoded within the limit; any other
content coding (br, zstd, stacked codings) is refused.
"""

from __future__ import annotations

import zlib


class BodyRefused(Exception):
    """The body is over the limit or in a coding we don't decode; the text is for the server log."""


class BoundedBody:
    """Feed raw chunks; `data` holds at most `max_bytes` decoded bytes, else BodyRefused."""

    def __init__(self, content_encoding: str | None, max_bytes: int):
        self.max_bytes = max_bytes
        self._body = bytearray()
        coding = (content_encoding or "identity").strip().lower()
        if coding in ("", "identity"):
            self._inflater = None
        elif coding in ("gzip", "x-gzip"):
            self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == "deflate":
            self._inflater = _DeflateEither()
        else:
            raise BodyRefused(f"content coding {coding!r} is not decoded")

    def feed(self, chunk: bytes) -> None:
        if self._inflater is None:
            self._append(chunk)
            return
        data = chunk
        while data:
            room = self.max_bytes - len(self._body) + 1          # one byte more tells us it is over
            self._append(self._inflater.decompress(data, room))
            data = self._inflater.unconsumed_tail
        if self._inflater.eof and self._inflater.unused_data:
            raise BodyRefused("data after the end of the compressed body")

    def finish(self) -> bytes:
        if self._inflater is not None:
            if not self._inflater.eof:
                raise BodyRefused("the compressed body is truncated")
        return bytes(self._body)

    def _append(self, data: bytes) -> None:
        if len(self._body) + len(data) > self.max_bytes:
            raise BodyRefused(f"the body is over {self.max_bytes} bytes")
        self._body += data


class _DeflateEither:
    """`deflate` as servers send it: zlib-wrapped (RFC 1950) or, wrongly but commonly, raw (RFC 1951)."""

    def __init__(self) -> None:
        self._inner = None

    def decompress(self, data: bytes, max_length: int) -> bytes:
        if self._inner is None:
            wrapped = len(data) >= 2 and (data[0] & 0x0F) == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            self._inner = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        return self._inner.decompress(data, max_length)

    @property
    def unconsumed_tail(self) -> bytes:
        return self._inner.unconsumed_tail if self._inner else b""

    @property
    def unused_data(self) -> bytes:
        return self._inner.unused_data if self._inner else b""

    @property
    def eof(self) -> bool:
        return bool(self._inner and self._inner.eof)
