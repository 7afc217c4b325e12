"""Remote image fetches can't reach the operator's network: addresses are checked after resolution, on every
redirect, and pinned; bodies never inflate past the limit; every failure is one error.

All traffic stays on loopback: the listeners bind 127.0.0.1 and 127.0.0.2, names are resolved by a stubbed
resolver, and the refused addresses (10/8, 169.254.169.254, ...) are refused before any connection is made.
"""

from __future__ import annotations

import gzip
import http.server
import io
import ipaddress
import threading
import zlib

import anyio
import numpy as np
import pytest
from PIL import Image

from strata.vision import address_policy
from strata.vision.bounded_body import BodyRefused, BoundedBody
from strata.vision.errors import MediaError
from strata.vision.media import MediaLimits, load_image, load_image_async

PICTURE = Image.new("RGB", (24, 16), (10, 200, 30))
_buf = io.BytesIO()
PICTURE.save(_buf, "PNG")
PNG = _buf.getvalue()
BOMB = gzip.compress(b"\0" * (30 * 1000 * 1000), compresslevel=9)      # ~30 KB that inflates to 30 MB
MAX_BYTES = 100_000


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: list = []
    redirect_to = ""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).hits.append((self.server.server_address[0], self.path, self.headers.get("Host")))
        routes = {
            "/cat.png": (200, PNG, {}),
            "/cat.png.gz": (200, gzip.compress(PNG), {"Content-Encoding": "gzip"}),
            "/cat.png.deflate": (200, zlib.compress(PNG), {"Content-Encoding": "deflate"}),
            "/bomb": (200, BOMB, {"Content-Encoding": "gzip"}),
            "/brotli": (200, PNG, {"Content-Encoding": "br"}),
            "/text": (200, b"<html>hello</html>", {"Content-Type": "text/html"}),
            "/redirect": (302, b"", {"Location": type(self).redirect_to}),
        }
        status, body, headers = routes.get(self.path, (404, b"missing", {}))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass


def _listen(host: str):
    httpd = http.server.ThreadingHTTPServer((host, 0), _Recorder)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.fixture(scope="module")
def listeners():
    inside, outside = _listen("127.0.0.1"), _listen("127.0.0.2")
    yield inside.server_address[1], outside.server_address[1]
    for httpd in (inside, outside):
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(autouse=True)
def fresh_hits():
    _Recorder.hits = []


@pytest.fixture
def stub_dns(monkeypatch):
    """Names under .test resolve as the table says; anything else as an IP literal or not at all (no real DNS)."""
    table: dict[str, list[str]] = {}

    def resolve(host: str, port: int) -> list[str]:
        if host in table:
            return table[host]
        try:
            return [str(ipaddress.ip_address(host.strip("[]")))]
        except ValueError:
            raise address_policy.AddressRefused(f"{host!r} is not in the test resolver") from None

    monkeypatch.setattr(address_policy, "resolve", resolve)
    return table


@pytest.fixture
def public_127_0_0_2(monkeypatch):
    """Treats 127.0.0.2 as a public host, so that loopback can stand for 'the internet' in these tests."""
    real = address_policy.is_public
    monkeypatch.setattr(address_policy, "is_public", lambda a: str(a) == "127.0.0.2" or real(a))


PUBLIC_ONLY = MediaLimits(allow_remote=True, max_encoded_bytes=MAX_BYTES, fetch_timeout_s=2.0, max_redirects=3)
PRIVATE_OK = MediaLimits(allow_remote=True, allow_private=True, max_encoded_bytes=MAX_BYTES, fetch_timeout_s=2.0,
                         max_redirects=3)
FETCH_FAILED = "could not fetch image_url .*: a remote image must be served with status 200 from a public address"


async def _load(mode: str, url: str, limits: MediaLimits) -> Image.Image:
    if mode == "sync":
        return await anyio.to_thread.run_sync(load_image, url, limits)
    return await load_image_async(url, limits)


@pytest.mark.parametrize("address, public", [
    ("8.8.8.8", True), ("2606:4700:4700::1111", True),
    ("127.0.0.1", False), ("127.8.9.10", False), ("0.0.0.0", False), ("10.1.2.3", False), ("172.16.0.1", False),
    ("192.168.1.1", False), ("169.254.169.254", False), ("100.64.0.1", False), ("224.0.0.251", False),
    ("239.255.255.250", False), ("255.255.255.255", False), ("::", False), ("::1", False), ("fe80::1", False),
    ("fc00::1", False), ("fd12:3456::1", False), ("ff02::1", False), ("::ffff:127.0.0.1", False),
    ("::ffff:169.254.169.254", False), ("2002:7f00:1::1", False), ("2002:0a00:0001::1", False),
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", False), ("::ffff:8.8.8.8", True),
])
def test_address_rule(address: str, public: bool) -> None:
    assert address_policy.is_public(ipaddress.ip_address(address)) is public


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_loopback_private_and_metadata_addresses_are_refused(listeners, mode) -> None:
    inside, _ = listeners
    urls = [f"http://127.0.0.1:{inside}/cat.png", f"http://localhost:{inside}/cat.png",
            f"http://2130706433:{inside}/cat.png", f"http://0x7f.1:{inside}/cat.png", f"http://0.0.0.0:{inside}/",
            f"http://[::1]:{inside}/cat.png", f"http://[::ffff:127.0.0.1]:{inside}/cat.png",
            "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/cat.png", "http://[fe80::1]/cat.png",
            "http://224.0.0.1/cat.png"]
    for url in urls:
        with pytest.raises(MediaError, match=FETCH_FAILED) as info:
            await _load(mode, url, PUBLIC_ONLY)
        assert info.value.code == "image_fetch_failed", url
    assert _Recorder.hits == []                      # refused before connecting: nothing reached the listener


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_names_are_judged_by_every_address_they_resolve_to(listeners, stub_dns, mode) -> None:
    inside, _ = listeners
    stub_dns["cdn.example.test"] = ["127.0.0.1"]
    stub_dns["mixed.example.test"] = ["93.184.216.34", "127.0.0.1"]    # one private answer is enough to refuse
    for host in ("cdn.example.test", "mixed.example.test"):
        with pytest.raises(MediaError, match=FETCH_FAILED):
            await _load(mode, f"http://{host}:{inside}/cat.png", PUBLIC_ONLY)
    assert _Recorder.hits == []


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_connection_goes_to_the_checked_address(listeners, stub_dns, public_127_0_0_2, mode) -> None:
    _, outside = listeners
    stub_dns["cdn.example.test"] = ["127.0.0.2"]      # no real resolver knows this name: only the pinned IP works
    image = await _load(mode, f"http://cdn.example.test:{outside}/cat.png", PUBLIC_ONLY)
    assert np.array_equal(np.asarray(image), np.asarray(PICTURE))
    assert _Recorder.hits == [("127.0.0.2", "/cat.png", f"cdn.example.test:{outside}")]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("target", ["http://127.0.0.1:{inside}/cat.png", "http://inside.example.test:{inside}/cat.png",
                                    "http://169.254.169.254/latest/meta-data/"])
async def test_a_redirect_into_the_private_network_is_refused(listeners, stub_dns, public_127_0_0_2, mode,
                                                              target) -> None:
    inside, outside = listeners
    stub_dns["cdn.example.test"] = ["127.0.0.2"]
    stub_dns["inside.example.test"] = ["127.0.0.1"]
    _Recorder.redirect_to = target.format(inside=inside)
    with pytest.raises(MediaError, match=FETCH_FAILED):
        await _load(mode, f"http://cdn.example.test:{outside}/redirect", PUBLIC_ONLY)
    assert [h[0] for h in _Recorder.hits] == ["127.0.0.2"]    # the outside host only; loopback never contacted


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_allow_private_media_lets_loopback_through(listeners, mode) -> None:
    inside, _ = listeners
    image = await _load(mode, f"http://127.0.0.1:{inside}/cat.png", PRIVATE_OK)
    assert np.array_equal(np.asarray(image), np.asarray(PICTURE))


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_compressed_bodies_are_decoded_within_the_limit(listeners, mode) -> None:
    inside, _ = listeners
    for path in ("/cat.png.gz", "/cat.png.deflate"):
        image = await _load(mode, f"http://127.0.0.1:{inside}{path}", PRIVATE_OK)
        assert np.array_equal(np.asarray(image), np.asarray(PICTURE))
    for path in ("/bomb", "/brotli"):
        with pytest.raises(MediaError, match=FETCH_FAILED):
            await _load(mode, f"http://127.0.0.1:{inside}{path}", PRIVATE_OK)


def test_a_gzip_bomb_never_inflates_past_the_limit() -> None:
    body = BoundedBody("gzip", MAX_BYTES)
    sizes = []
    real_append = body._append

    def watch(data: bytes) -> None:
        sizes.append(len(data))
        real_append(data)

    body._append = watch
    with pytest.raises(BodyRefused):
        body.feed(BOMB)                   # one chunk holding the whole bomb
    assert max(sizes) <= MAX_BYTES + 1    # the decompressor never produced more than the room left


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_every_failure_is_the_same_error(listeners, stub_dns, mode) -> None:
    """Refused address, closed port, 404, a non-image, a bomb: a client learns nothing about which."""
    inside, _ = listeners
    stub_dns["closed.example.test"] = ["127.0.0.1"]
    cases = {"refused": ("http://10.0.0.1/x", PUBLIC_ONLY), "closed": ("http://127.0.0.1:9/x", PRIVATE_OK),
             "missing": (f"http://127.0.0.1:{inside}/missing", PRIVATE_OK),
             "not an image": (f"http://127.0.0.1:{inside}/text", PRIVATE_OK),
             "bomb": (f"http://127.0.0.1:{inside}/bomb", PRIVATE_OK),
             "unresolvable": ("http://nowhere.invalid/x", PRIVATE_OK)}
    messages = set()
    for url, limits in cases.values():
        with pytest.raises(MediaError) as info:
            await _load(mode, url, limits)
        messages.add((info.value.code, info.value.message.replace(url, "URL")))
    assert len(messages) == 1, messages
