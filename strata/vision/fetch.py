"""Fetching an image over http(s) within a byte limit, one deadline and a redirect limit.

Only media.py calls this, and only when the operator allows remote images.
The byte limit is enforced while streaming (and from Content-Length when the
server sends one); redirects are followed by hand so that no redirect body is
read; the deadline covers the whole fetch, redirects included. A failure of
any kind is a MediaError saying what happened.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import anyio
import httpx

from strata.vision.errors import MediaError

HEADERS = {
    "Accept": "image/png, image/jpeg, image/webp, image/gif",
    # images are compressed already; a gzip bomb could inflate far past the byte limit within one chunk
    "Accept-Encoding": "identity",
    "User-Agent": "strata",
}


def check_encoded_size(num_bytes: int, max_bytes: int) -> None:
    """The size refusal every image source shares."""
    if num_bytes > max_bytes:
        raise MediaError(
            f"image is too large: {num_bytes:,} bytes or more encoded; "
            f"at most {max_bytes:,} bytes ({max_bytes / 1e6:.1f} MB) are accepted",
            "image_too_large",
        )


def shorten(text: str, limit: int = 120) -> str:
    """A URL or path short enough to quote in an error message."""
    return text if len(text) <= limit else text[:limit] + "..."


def make_async_client(timeout_s: float) -> httpx.AsyncClient:
    """An AsyncClient set up for image fetches, for a server to share across requests."""
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), follow_redirects=False, headers=HEADERS)


def fetch(url: str, *, max_bytes: int, timeout_s: float, max_redirects: int) -> bytes:
    """GET `url`'s body (blocking).

    The deadline is checked before each hop and between body chunks, and no
    single network wait may outlast the time left when its hop began.
    """
    deadline = time.monotonic() + timeout_s
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout_s), follow_redirects=False, headers=HEADERS) as client:
            request = client.build_request("GET", url)
            for _ in range(max_redirects + 1):
                response = client.send(_with_timeout(request, deadline), stream=True)
                try:
                    if response.next_request is None:
                        _check_response(response, url, max_bytes)
                        return _read_body(response.iter_bytes(), max_bytes, deadline)
                    request = response.next_request
                finally:
                    response.close()
    except (httpx.HTTPError, httpx.InvalidURL, TimeoutError) as e:
        raise _fetch_error(url, e, timeout_s) from None
    raise _too_many_redirects(url, max_redirects)


async def fetch_async(
    url: str, *, max_bytes: int, timeout_s: float, max_redirects: int, client: httpx.AsyncClient | None = None
) -> bytes:
    """fetch for the event loop, cancelled at the deadline wherever it waits.

    `client`: one from make_async_client (shared by a server), or None for one made per call.
    """
    own_client = client is None
    client = client or make_async_client(timeout_s)
    try:
        with anyio.fail_after(timeout_s):
            request = client.build_request("GET", url)
            for _ in range(max_redirects + 1):
                response = await client.send(request, stream=True, follow_redirects=False)
                try:
                    if response.next_request is None:
                        _check_response(response, url, max_bytes)
                        body = bytearray()
                        async for chunk in response.aiter_bytes():
                            body += chunk
                            check_encoded_size(len(body), max_bytes)
                        return bytes(body)
                    request = response.next_request
                finally:
                    with anyio.CancelScope(shield=True):  # release the connection even past the deadline
                        await response.aclose()
    except (httpx.HTTPError, httpx.InvalidURL, TimeoutError) as e:
        raise _fetch_error(url, e, timeout_s) from None
    finally:
        if own_client:
            await client.aclose()
    raise _too_many_redirects(url, max_redirects)


def _with_timeout(request: httpx.Request, deadline: float) -> httpx.Request:
    """Bounds every network wait of this hop by the time left to the whole fetch."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    request.extensions["timeout"] = httpx.Timeout(remaining).as_dict()
    return request


def _check_response(response: httpx.Response, url: str, max_bytes: int) -> None:
    if response.status_code != 200:
        raise MediaError(
            f"fetching image_url {shorten(url)} returned HTTP {response.status_code}",
            "image_fetch_failed",
        )
    declared = response.headers.get("content-length", "")
    if declared.isdigit():
        check_encoded_size(int(declared), max_bytes)


def _read_body(chunks: Iterable[bytes], max_bytes: int, deadline: float) -> bytes:
    body = bytearray()
    for chunk in chunks:
        body += chunk
        check_encoded_size(len(body), max_bytes)
        if time.monotonic() > deadline:
            raise TimeoutError
    return bytes(body)


def _fetch_error(url: str, error: Exception, timeout_s: float) -> MediaError:
    if isinstance(error, (httpx.TimeoutException, TimeoutError)):
        return MediaError(f"fetching image_url {shorten(url)} took longer than {timeout_s:g} s", "image_fetch_failed")
    return MediaError(
        f"fetching image_url {shorten(url)} failed: {type(error).__name__}: {error}",
        "image_fetch_failed",
    )


def _too_many_redirects(url: str, max_redirects: int) -> MediaError:
    return MediaError(
        f"fetching image_url {shorten(url)} took more than {max_redirects} redirects",
        "image_fetch_failed",
    )
