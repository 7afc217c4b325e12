"""Fetching an image over http(s): public addresses only, within a byte limit, one deadline and a redirect limit.

Only media.py calls this, and only when the operator allows remote images.
Every hop (the first request and each redirect) is resolved and checked by
address_policy before anything is sent, and the connection goes to the
checked address. Redirects are followed by hand so that no redirect body is
read; the deadline covers the whole fetch, redirects included; the byte
limit holds while streaming, for the decoded body too (bounded_body).

Any failure is the same MediaError, whatever the cause: an error that told
a refused address from a closed port, an open port from a slow one, or
passed back the upstream status would make the server a port scanner for
its clients. The cause goes to the server log (debug level) instead.
"""

from __future__ import annotations

import logging
import time

import anyio
import httpx

from strata.vision import address_policy
from strata.vision.address_policy import AddressRefused
from strata.vision.bounded_body import BodyRefused, BoundedBody
from strata.vision.errors import MediaError

log = logging.getLogger("strata.vision")

HEADERS = {
    "Accept": "image/png, image/jpeg, image/webp, image/gif",
    "Accept-Encoding": "identity",        # images are compressed already; bounded_body copes when ignored
    "User-Agent": "strata",
}
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


class FetchFailed(Exception):
    """Why a fetch failed, for the log; the client only ever sees fetch_error()."""


def check_encoded_size(num_bytes: int, max_bytes: int) -> None:
    """The size refusal every local image source shares (data: URLs, media-dir files)."""
    if num_bytes > max_bytes:
        raise MediaError(
            f"image is too large: {num_bytes:,} bytes or more encoded; "
            f"at most {max_bytes:,} bytes ({max_bytes / 1e6:.1f} MB) are accepted",
            "image_too_large",
        )


def shorten(text: str, limit: int = 120) -> str:
    """A URL or path short enough to quote in an error message."""
    return text if len(text) <= limit else text[:limit] + "..."


def fetch_error(url: str, *, max_bytes: int, timeout_s: float, max_redirects: int) -> MediaError:
    """The one error of every failed fetch: what a URL must satisfy, never which part it missed."""
    return MediaError(
        f"could not fetch image_url {shorten(url)}: a remote image must be served with status 200 from a public "
        f"address, as PNG, JPEG, WebP or GIF of at most {max_bytes:,} bytes, within {timeout_s:g} s and "
        f"{max_redirects} redirects",
        "image_fetch_failed",
    )


def make_async_client(timeout_s: float) -> httpx.AsyncClient:
    """An AsyncClient set up for image fetches, for a server to share across requests.

    trust_env=False: a proxy from the environment would connect on our behalf to addresses we never checked.
    """
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), follow_redirects=False, headers=HEADERS,
                             trust_env=False)


def fetch(url: str, *, max_bytes: int, timeout_s: float, max_redirects: int, allow_private: bool = False) -> bytes:
    """GET `url`'s body (blocking). No single network wait may outlast the time left to the whole fetch."""
    deadline = time.monotonic() + timeout_s
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout_s), follow_redirects=False, headers=HEADERS,
                          trust_env=False) as client:
            target = httpx.URL(url)
            for _ in range(max_redirects + 1):
                hop = address_policy.check_hop(target, allow_private)
                request = _with_timeout(hop.request(client), deadline)
                response = client.send(request, stream=True)
                try:
                    target = _redirect_target(response, target)
                    if target is None:
                        _check_response(response, max_bytes)
                        body = BoundedBody(response.headers.get("content-encoding"), max_bytes)
                        for chunk in response.iter_raw():
                            body.feed(chunk)
                            if time.monotonic() > deadline:
                                raise TimeoutError
                        return body.finish()
                finally:
                    response.close()
            raise FetchFailed(f"more than {max_redirects} redirects")
    except (FetchFailed, AddressRefused, BodyRefused, httpx.HTTPError, httpx.InvalidURL, TimeoutError,
            ValueError) as exc:
        raise _failed(url, exc, max_bytes, timeout_s, max_redirects) from None


async def fetch_async(
    url: str, *, max_bytes: int, timeout_s: float, max_redirects: int, client: httpx.AsyncClient | None = None,
    allow_private: bool = False,
) -> bytes:
    """fetch for the event loop, cancelled at the deadline wherever it waits (name resolution included).

    `client`: one from make_async_client (shared by a server), or None for one made per call.
    """
    own_client = client is None
    client = client or make_async_client(timeout_s)
    try:
        with anyio.fail_after(timeout_s):
            target = httpx.URL(url)
            for _ in range(max_redirects + 1):
                hop = await anyio.to_thread.run_sync(address_policy.check_hop, target, allow_private,
                                                     abandon_on_cancel=True)
                response = await client.send(hop.request(client), stream=True, follow_redirects=False)
                try:
                    target = _redirect_target(response, target)
                    if target is None:
                        _check_response(response, max_bytes)
                        body = BoundedBody(response.headers.get("content-encoding"), max_bytes)
                        async for chunk in response.aiter_raw():
                            body.feed(chunk)
                        return body.finish()
                finally:
                    with anyio.CancelScope(shield=True):  # release the connection even past the deadline
                        await response.aclose()
            raise FetchFailed(f"more than {max_redirects} redirects")
    except (FetchFailed, AddressRefused, BodyRefused, httpx.HTTPError, httpx.InvalidURL, TimeoutError,
            ValueError) as exc:
        raise _failed(url, exc, max_bytes, timeout_s, max_redirects) from None
    finally:
        if own_client:
            await client.aclose()


def _redirect_target(response: httpx.Response, current: httpx.URL) -> httpx.URL | None:
    """The next hop's URL (joined to the URL the client named, not to the pinned address), or None."""
    if response.status_code not in REDIRECT_STATUSES:
        return None
    location = response.headers.get("location")
    if not location:
        raise FetchFailed(f"redirect {response.status_code} without a Location")
    return current.join(location)


def _with_timeout(request: httpx.Request, deadline: float) -> httpx.Request:
    """Bounds every network wait of this hop by the time left to the whole fetch."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    request.extensions["timeout"] = httpx.Timeout(remaining).as_dict()
    return request


def _check_response(response: httpx.Response, max_bytes: int) -> None:
    if response.status_code != 200:
        raise FetchFailed(f"status {response.status_code}")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise FetchFailed(f"Content-Length {declared} is over {max_bytes}")


def _failed(url: str, exc: Exception, max_bytes: int, timeout_s: float, max_redirects: int) -> MediaError:
    reason = "timed out" if isinstance(exc, (TimeoutError, httpx.TimeoutException)) else f"{type(exc).__name__}: {exc}"
    log.debug("image fetch of %s failed: %s", shorten(url), reason)
    return fetch_error(url, max_bytes=max_bytes, timeout_s=timeout_s, max_redirects=max_redirects)
