"""Image inputs: an OpenAI content part's image_url to a decoded PIL image, under limits.

Accepted sources: `data:image/{png,jpeg,webp,gif};base64,...` URLs (strict
base64) always; local files only inside the operator's media directory
(file:///abs/path, or a path relative to it; `..` and symlink escapes
refused, checked on the percent-decoded path); http(s) URLs only when the
operator allows remote media (fetched by fetch.py from public addresses,
within the byte, time and redirect limits, one error for every failure). The
bytes must decode as PNG, JPEG, WebP or GIF (first frame), and the pixel
count is checked from the header before decoding, so a decompression bomb is
refused without being expanded; at most MAX_CONCURRENT_DECODES images are
decoded at once in the process. Every refusal is a MediaError whose message
says what was wrong and what is allowed.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import os
import re
import stat
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from PIL import Image, UnidentifiedImageError

from strata import env
from strata.vision import fetch
from strata.vision.errors import MediaError

MIME_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")
_MIME_ALIASES = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg"}
# MPO is how PIL names the multi-picture JPEGs many phone cameras write.
FORMATS = {"PNG": "PNG", "JPEG": "JPEG", "MPO": "JPEG", "WEBP": "WebP", "GIF": "GIF"}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_DATA_HEAD = re.compile(r"^data:([^,;]*)((?:;[^,;]*)*),", re.IGNORECASE)
# Decoded images are the largest transient memory of a request (up to max_pixels x 4 bytes each); at most this
# many are decoded (and preprocessed) at once in the whole process, whatever the number of requests.
MAX_CONCURRENT_DECODES = 2
_DECODE_SLOTS = threading.BoundedSemaphore(MAX_CONCURRENT_DECODES)
# Decode failures that would tell a client what a remote URL serves (an open port from a closed one).
_CONTENT_CODES = frozenset({"invalid_image", "unsupported_image_format"})


@dataclass(frozen=True)
class MediaLimits:
    """What a request's images may be and where they may come from."""

    max_encoded_bytes: int = 20 * 1000 * 1000
    max_pixels: int = 50 * 1000 * 1000
    max_images_per_request: int = 8
    media_dir: str | None = None  # local files only under this directory; None refuses them
    allow_remote: bool = False  # fetch http(s) URLs
    allow_private: bool = False  # let those fetches reach loopback/private/link-local addresses (address_policy)
    fetch_timeout_s: float = 10.0  # the whole remote fetch, redirects included
    max_redirects: int = 3

    def __post_init__(self) -> None:
        for name in ("max_encoded_bytes", "max_pixels", "max_images_per_request"):
            if getattr(self, name) <= 0:
                raise ValueError(f"MediaLimits.{name} must be positive")
        if not self.fetch_timeout_s > 0 or self.max_redirects < 0:
            raise ValueError("MediaLimits: fetch_timeout_s must be positive and max_redirects at least 0")
        if self.media_dir is not None:
            real = os.path.realpath(self.media_dir)
            if not os.path.isdir(real):
                raise ValueError(f"media directory {self.media_dir} is not a directory")
            object.__setattr__(self, "media_dir", real)

    @classmethod
    def from_env(cls, **overrides: Any) -> MediaLimits:
        """Defaults plus STRATA_MEDIA_DIR and STRATA_ALLOW_REMOTE_MEDIA; keyword overrides win."""
        allow_remote = (env.get("STRATA_ALLOW_REMOTE_MEDIA") or "0").strip().lower() in ("1", "true", "yes", "on")
        allow_private = (env.get("STRATA_ALLOW_PRIVATE_MEDIA") or "0").strip().lower() in ("1", "true", "yes", "on")
        fields: dict[str, Any] = {"media_dir": env.get("STRATA_MEDIA_DIR"), "allow_remote": allow_remote,
                                  "allow_private": allow_private}
        return cls(**(fields | overrides))


# ---- request shape -------------------------------------------------------------------------


def image_url_of(part: Any) -> str:
    """The URL of one `{"type": "image_url", "image_url": {"url": ...}}` content part."""
    image_url = part.get("image_url") if isinstance(part, dict) else None
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str) or not url:
        raise MediaError(
            'an image_url content part needs {"image_url": {"url": "<data:, file or http(s) URL>"}}',
            "invalid_image_url",
        )
    detail = image_url.get("detail", "auto") if isinstance(image_url, dict) else "auto"
    if detail not in ("auto", "low", "high"):
        raise MediaError(f"image_url.detail must be auto, low or high, got {detail!r}", "invalid_image_url")
    return url


def collect_image_urls(messages: Iterable[Any], limits: MediaLimits) -> list[str]:
    """The image URLs of a chat request in order, refusing more than the per-request limit."""
    urls = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            urls += [image_url_of(p) for p in content if isinstance(p, dict) and p.get("type") == "image_url"]
    check_image_count(len(urls), limits)
    return urls


def check_image_count(num_images: int, limits: MediaLimits) -> None:
    if num_images > limits.max_images_per_request:
        raise MediaError(
            f"the request has {num_images} images; at most {limits.max_images_per_request} are allowed per request",
            "too_many_images",
        )


# ---- decoding ------------------------------------------------------------------------------


def decode_image(data: bytes, limits: MediaLimits) -> Image.Image:
    """Encoded bytes -> a loaded PIL image (a GIF's or animated WebP's first frame)."""
    _check_encoded_size(len(data), limits)
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise MediaError("image_url does not hold an image; send PNG, JPEG, WebP or GIF", "invalid_image") from None
    except Image.DecompressionBombError:
        raise MediaError(
            "image has more pixels than PIL will decode (a likely decompression bomb); "
            f"at most {_megapixels(limits.max_pixels)} are accepted",
            "image_too_large",
        ) from None
    except Exception as e:  # PIL raises many types on malformed headers
        raise MediaError(f"image is corrupt: {e}", "invalid_image") from None
    if image.format not in FORMATS:
        raise MediaError(
            f"image format {image.format} is not supported; send PNG, JPEG, WebP or GIF",
            "unsupported_image_format",
        )
    width, height = image.size
    if width * height > limits.max_pixels:
        raise MediaError(
            f"image is {width}x{height} ({_megapixels(width * height)}); "
            f"at most {_megapixels(limits.max_pixels)} are accepted",
            "image_too_large",
        )
    try:
        image.load()
    except Exception as e:
        raise MediaError(f"image is truncated or corrupt: {e}", "invalid_image") from None
    return image


def _check_encoded_size(num_bytes: int, limits: MediaLimits) -> None:
    fetch.check_encoded_size(num_bytes, limits.max_encoded_bytes)


def _megapixels(num_pixels: int) -> str:
    return f"{num_pixels / 1e6:.1f} megapixels"


# ---- sources -------------------------------------------------------------------------------


def source_kind(url: str) -> str:
    """'data', 'remote' or 'file', or a MediaError for any other scheme."""
    match = _SCHEME.match(url)
    scheme = match.group(1).lower() if match else None
    if scheme == "data":
        return "data"
    if scheme in ("http", "https"):
        return "remote"
    if scheme in (None, "file"):
        return "file"
    raise MediaError(f"image_url scheme {scheme!r} is not supported; send a data: URL (base64)", "invalid_image_url")


def decode_data_url(url: str, limits: MediaLimits) -> bytes:
    """The bytes of `data:<image mime>;base64,<payload>`, with strict base64."""
    head = _DATA_HEAD.match(url[:256])
    if head is None:
        raise MediaError("image_url data URL must look like data:image/png;base64,<data>", "invalid_image_url")
    mime = _MIME_ALIASES.get(head.group(1).strip().lower(), head.group(1).strip().lower())
    if mime not in MIME_TYPES:
        raise MediaError(
            f"image_url media type {mime or '(none)'!r} is not supported; use one of {', '.join(MIME_TYPES)}",
            "unsupported_image_format",
        )
    if "base64" not in (p.strip().lower() for p in head.group(2).split(";")):
        raise MediaError("image_url data URL must be base64-encoded (data:<type>;base64,<data>)", "invalid_image_url")
    payload = url[head.end():]
    _check_encoded_size(len(payload) // 4 * 3 - payload[-2:].count("="), limits)  # before decoding it
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError(
            "image_url data URL payload is not valid base64 (standard alphabet, padded, no whitespace)",
            "invalid_image_url",
        ) from None


def read_local_file(reference: str, limits: MediaLimits) -> bytes:
    """A file inside the media directory, named by file:///abs/path or a relative path."""
    if limits.media_dir is None:
        raise MediaError(
            "image_url names a local file, but this server reads no local files (the operator sets STRATA_MEDIA_DIR); "
            "send the image as a data: URL",
            "image_source_not_allowed",
        )
    try:
        path = _file_path(reference)
    except UnicodeDecodeError:
        raise MediaError("image path is not valid UTF-8 once percent-decoded", "invalid_image_url") from None
    if ".." in re.split(r"[/\\]", path):
        raise MediaError(
            f"image path {fetch.shorten(path)!r} contains '..'; name a file inside the media directory",
            "image_source_not_allowed",
        )
    real = os.path.realpath(os.path.join(limits.media_dir, path))
    if os.path.commonpath([real, limits.media_dir]) != limits.media_dir:
        raise MediaError(
            f"image path {fetch.shorten(path)!r} is outside the media directory",
            "image_source_not_allowed",
        )
    try:
        if not stat.S_ISREG(os.stat(real).st_mode):  # before open: opening a FIFO would block
            raise MediaError(f"image path {fetch.shorten(path)!r} is not a regular file", "invalid_image_url")
        with open(real, "rb") as f:
            _check_encoded_size(os.fstat(f.fileno()).st_size, limits)
            data = f.read(limits.max_encoded_bytes + 1)
    except FileNotFoundError:
        raise MediaError(
            f"image path {fetch.shorten(path)!r}: no such file in the media directory",
            "invalid_image_url",
        ) from None
    except OSError as e:
        raise MediaError(
            f"image path {fetch.shorten(path)!r} cannot be read: {e.strerror}",
            "invalid_image_url",
        ) from None
    _check_encoded_size(len(data), limits)
    return data


def _file_path(reference: str) -> str:
    """The path a reference names, decoded first, so that every check below sees what the OS would."""
    path = reference
    if reference[:5].lower() == "file:":
        parts = urllib.parse.urlsplit(reference)
        if parts.netloc not in ("", "localhost"):
            raise MediaError(
                f"file URL names host {parts.netloc!r}; only local files (file:///path) are read",
                "invalid_image_url",
            )
        path = urllib.parse.unquote(parts.path, errors="strict")
    if "\x00" in path:
        raise MediaError("image path contains a NUL character", "invalid_image_url")
    return path


def read_source(url: str, limits: MediaLimits) -> bytes:
    """The encoded bytes behind an image_url of any accepted kind (blocking)."""
    kind = source_kind(url)
    if kind == "data":
        return decode_data_url(url, limits)
    if kind == "file":
        return read_local_file(url, limits)
    return fetch_remote(url, limits)


# ---- remote fetch --------------------------------------------------------------------------


def _check_remote_allowed(limits: MediaLimits) -> None:
    if not limits.allow_remote:
        raise MediaError(
            "image_url is an http(s) URL, but this server fetches no remote images (the operator sets "
            "STRATA_ALLOW_REMOTE_MEDIA=1); send the image as a data: URL",
            "image_source_not_allowed",
        )


def fetch_remote(url: str, limits: MediaLimits) -> bytes:
    """An http(s) URL's body within the byte, time and redirect limits (blocking)."""
    _check_remote_allowed(limits)
    return fetch.fetch(
        url, max_bytes=limits.max_encoded_bytes, timeout_s=limits.fetch_timeout_s, max_redirects=limits.max_redirects,
        allow_private=limits.allow_private,
    )


async def fetch_remote_async(url: str, limits: MediaLimits, client: httpx.AsyncClient | None = None) -> bytes:
    """fetch_remote for the event loop; `client` from make_async_client, or None for one per call."""
    _check_remote_allowed(limits)
    return await fetch.fetch_async(
        url, max_bytes=limits.max_encoded_bytes, timeout_s=limits.fetch_timeout_s,
        max_redirects=limits.max_redirects, client=client, allow_private=limits.allow_private,
    )


def make_async_client(limits: MediaLimits) -> httpx.AsyncClient:
    """An AsyncClient for image fetches, for a server to share across requests."""
    return fetch.make_async_client(limits.fetch_timeout_s)


# ---- the entry points ----------------------------------------------------------------------


def load_image(url: str, limits: MediaLimits) -> Image.Image:
    """An image_url (data:, local file or http(s)) -> a loaded PIL image, or a MediaError."""
    return decode_source(read_source(url, limits), url, limits)


def decode_source(data: bytes, url: str, limits: MediaLimits) -> Image.Image:
    """decode_image within the process-wide decode bound; a remote URL's content errors become the fetch error."""
    with _DECODE_SLOTS:
        return _decode_as_source(data, url, limits)


def decode_and_process(data: bytes, url: str, limits: MediaLimits, process: Callable[[Image.Image], Any]) -> Any:
    """process(decoded image) with the decoded pixels freed before returning, all within the decode bound."""
    with _DECODE_SLOTS:
        image = _decode_as_source(data, url, limits)
        try:
            return process(image)
        finally:
            image.close()


def _decode_as_source(data: bytes, url: str, limits: MediaLimits) -> Image.Image:
    try:
        return decode_image(data, limits)
    except MediaError as e:
        if source_kind(url) == "remote" and e.code in _CONTENT_CODES:
            raise fetch.fetch_error(url, max_bytes=limits.max_encoded_bytes, timeout_s=limits.fetch_timeout_s,
                                    max_redirects=limits.max_redirects) from None
        raise


def load_images(urls: list[str], limits: MediaLimits) -> list[Image.Image]:
    """All of a request's images; an error names the image (1-based) it is about."""
    check_image_count(len(urls), limits)
    images = []
    for index, url in enumerate(urls):
        with _naming_image(index, len(urls)):
            images.append(load_image(url, limits))
    return images


async def load_image_async(url: str, limits: MediaLimits, client: httpx.AsyncClient | None = None) -> Image.Image:
    """load_image without blocking the event loop: decoding and file reads run in a worker thread."""
    data = await read_source_async(url, limits, client)
    return await anyio.to_thread.run_sync(decode_source, data, url, limits)


async def read_source_async(url: str, limits: MediaLimits, client: httpx.AsyncClient | None = None) -> bytes:
    """read_source without blocking the event loop."""
    if source_kind(url) == "remote":
        return await fetch_remote_async(url, limits, client)
    return await anyio.to_thread.run_sync(read_source, url, limits)


async def load_processed_images(urls: list[str], limits: MediaLimits, process: Callable[[Image.Image], Any],
                                client: httpx.AsyncClient | None = None, run_cpu=None) -> list[Any]:
    """process(image) of each of a request's images, one after another: only the processed results are kept,
    so a request never holds all its decoded images at once. run_cpu: the thread pool to decode in
    (`await run_cpu(fn, *args)`), anyio's by default."""
    check_image_count(len(urls), limits)
    run_cpu = run_cpu or anyio.to_thread.run_sync
    results = []
    for index, url in enumerate(urls):
        with _naming_image(index, len(urls)):
            data = await read_source_async(url, limits, client)
            results.append(await run_cpu(decode_and_process, data, url, limits, process))
            del data
    return results


async def load_images_async(
    urls: list[str], limits: MediaLimits, client: httpx.AsyncClient | None = None
) -> list[Image.Image]:
    """load_images for the event loop, one image after another."""
    check_image_count(len(urls), limits)
    images = []
    for index, url in enumerate(urls):
        with _naming_image(index, len(urls)):
            images.append(await load_image_async(url, limits, client))
    return images


@contextlib.contextmanager
def _naming_image(index: int, num_images: int) -> Iterator[None]:
    try:
        yield
    except MediaError as e:
        if num_images == 1:
            raise
        raise MediaError(f"image {index + 1} of {num_images}: {e.message}", e.code) from None
