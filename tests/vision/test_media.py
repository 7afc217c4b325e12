"""image_url -> PIL image: every accepted source, every refusal, and real fetches over loopback."""

from __future__ import annotations

import base64
import http.server
import io
import os
import struct
import threading
import time
import zlib
from urllib.parse import quote

import anyio
import numpy as np
import pytest
from PIL import Image

from strata.vision.errors import MediaError
from strata.vision.media import (
    MediaLimits,
    collect_image_urls,
    image_url_of,
    load_image,
    load_image_async,
    load_images,
    load_images_async,
)

RED, BLUE = (255, 0, 0), (0, 0, 255)


def _encode(image: Image.Image, fmt: str, **kwargs) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **kwargs)
    return out.getvalue()


def _picture(width: int = 40, height: int = 30) -> Image.Image:
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def _data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def _animated_gif() -> bytes:
    frames = [Image.new("RGB", (16, 8), RED), Image.new("RGB", (16, 8), BLUE)]
    return _encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG signature + IHDR claiming width x height, then a scrap of IDAT: a bomb's shape."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))


# ---- data: URLs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt, mime, kwargs",
    [
        ("PNG", "image/png", {}),
        ("JPEG", "image/jpeg", {"quality": 95}),
        ("JPEG", "image/jpg", {}),
        ("WEBP", "image/webp", {"lossless": True}),
        ("GIF", "image/gif", {}),
    ],
)
def test_data_urls_of_every_accepted_type(fmt: str, mime: str, kwargs: dict) -> None:
    picture = _picture()
    image = load_image(_data_url(_encode(picture, fmt, **kwargs), mime), MediaLimits())
    assert image.size == picture.size and image.format == fmt
    if fmt in ("PNG", "WEBP"):
        assert np.array_equal(np.asarray(image.convert("RGB")), np.asarray(picture))


def test_gif_gives_its_first_frame() -> None:
    image = load_image(_data_url(_animated_gif(), "image/gif"), MediaLimits())
    assert image.convert("RGB").getpixel((3, 3)) == RED


def test_declared_type_may_differ_from_content() -> None:
    # clients often label JPEGs image/png; the bytes decide, within the accepted formats
    image = load_image(_data_url(_encode(_picture(), "JPEG"), "image/png"), MediaLimits())
    assert image.format == "JPEG"


@pytest.mark.parametrize(
    "url, message",
    [
        ("data:image/png;base64,iVBORw0KGgo!!!!", "not valid base64"),
        ("data:image/png;base64,iVBORw0KGgo", "not valid base64"),  # bad padding
        ("data:image/png;base64,iVBO Rw0K", "not valid base64"),  # whitespace
        ("data:image/png;base64,iVBO-Rw_", "not valid base64"),  # url-safe alphabet
        (_data_url(b"hello, this is not an image"), "does not hold an image"),
        (_data_url(_encode(_picture(), "PNG")[:300]), "truncated or corrupt"),
        (_data_url(_encode(_picture(), "BMP"), "image/bmp"), "media type 'image/bmp' is not supported"),
        (_data_url(_encode(_picture(), "BMP"), "image/png"), "format BMP is not supported"),
        (_data_url(_encode(_picture(), "TIFF"), "image/png"), "format TIFF is not supported"),
        ("data:image/png," + "iVBORw0KGgo=", "must be base64-encoded"),
        ("data:;base64,iVBORw0KGgo=", r"media type '\(none\)' is not supported"),
        ("data:image/png;base64", "must look like data:image/png;base64,<data>"),
        ("ftp://example.com/cat.png", "scheme 'ftp' is not supported"),
        ("javascript:alert(1)", "scheme 'javascript' is not supported"),
    ],
    ids=lambda v: v[:40] if isinstance(v, str) else None,
)
def test_bad_data_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(MediaError, match=message) as info:
        load_image(url, MediaLimits())
    assert info.value.status == 400 and info.value.code


def test_encoded_size_limit() -> None:
    data = _encode(_picture(200, 200), "PNG")
    limits = MediaLimits(max_encoded_bytes=len(data) - 1)
    with pytest.raises(MediaError, match=r"too large: [0-9,]+ bytes or more encoded; at most [0-9,]+ bytes \(0\.1 MB\)") as info:
        load_image(_data_url(data), limits)
    assert info.value.code == "image_too_large"
    assert load_image(_data_url(data), MediaLimits(max_encoded_bytes=len(data))).size == (200, 200)


def test_pixel_limit_is_checked_before_decoding() -> None:
    # the header claims 10000x6000; the data is a scrap, so only a header check can give this message
    with pytest.raises(MediaError, match=r"10000x6000 \(60\.0 megapixels\); at most 50\.0 megapixels") as info:
        load_image(_data_url(_png_header_only(10000, 6000)), MediaLimits())
    assert info.value.code == "image_too_large"


def test_decompression_bomb_beyond_pil_limit_is_refused() -> None:
    with pytest.raises(MediaError, match="likely decompression bomb"):
        load_image(_data_url(_png_header_only(60000, 60000)), MediaLimits())


def test_real_image_over_pixel_limit_is_refused() -> None:
    data = _encode(Image.new("RGB", (1200, 1000)), "PNG")
    with pytest.raises(MediaError, match=r"1200x1000 \(1\.2 megapixels\); at most 1\.0 megapixels"):
        load_image(_data_url(data), MediaLimits(max_pixels=1_000_000))


# ---- request shape and counts -----------------------------------------------------------------


def test_image_url_parts_and_count_limit() -> None:
    url = _data_url(_encode(_picture(), "PNG"))
    part = {"type": "image_url", "image_url": {"url": url, "detail": "high"}}
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "what is this?"}, part, part]},
    ]
    assert collect_image_urls(messages, MediaLimits()) == [url, url]
    assert image_url_of({"type": "image_url", "image_url": url}) == url
    with pytest.raises(MediaError, match="3 images; at most 2 are allowed per request") as info:
        collect_image_urls(messages + [{"role": "user", "content": [part]}], MediaLimits(max_images_per_request=2))
    assert info.value.code == "too_many_images"
    with pytest.raises(MediaError, match="9 images; at most 8"):
        load_images([url] * 9, MediaLimits())
    assert len(load_images([url] * 8, MediaLimits())) == 8


async def test_errors_name_the_image_they_are_about() -> None:
    good = _data_url(_encode(_picture(), "PNG"))
    with pytest.raises(MediaError, match=r"^image 2 of 3: image_url data URL payload is not valid base64"):
        load_images([good, "data:image/png;base64,@@@@", good], MediaLimits())
    with pytest.raises(MediaError, match=r"^image 1 of 2: image_url media type 'image/bmp'"):
        await load_images_async(["data:image/bmp;base64,AAAA", good], MediaLimits())


@pytest.mark.parametrize(
    "part, message",
    [
        ({"type": "image_url"}, "needs"),
        ({"type": "image_url", "image_url": {"url": ""}}, "needs"),
        ({"type": "image_url", "image_url": {"url": 5}}, "needs"),
        ({"type": "image_url", "image_url": {"url": "data:x", "detail": "max"}}, "detail must be auto, low or high"),
    ],
)
def test_malformed_parts_are_refused(part: dict, message: str) -> None:
    with pytest.raises(MediaError, match=message):
        image_url_of(part)


def test_limits_from_env(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("STRATA_MEDIA_DIR", str(tmp_path))
    monkeypatch.setenv("STRATA_ALLOW_REMOTE_MEDIA", "1")
    limits = MediaLimits.from_env(max_images_per_request=2)
    assert limits.media_dir == os.path.realpath(tmp_path) and limits.allow_remote and limits.max_images_per_request == 2
    monkeypatch.delenv("STRATA_MEDIA_DIR")
    monkeypatch.delenv("STRATA_ALLOW_REMOTE_MEDIA")
    assert MediaLimits.from_env() == MediaLimits()
    with pytest.raises(ValueError, match="is not a directory"):
        MediaLimits(media_dir=str(tmp_path / "missing"))


# ---- local files ------------------------------------------------------------------------------


@pytest.fixture
def media(tmp_path):
    """(limits, media dir, a file outside it); the dir holds cat.png, sub/dog.png, 'my pic.png'."""
    root = tmp_path / "media"
    (root / "sub").mkdir(parents=True)
    png = _encode(_picture(), "PNG")
    for name in ("cat.png", "sub/dog.png", "my pic.png"):
        (root / name).write_bytes(png)
    outside = tmp_path / "secret.png"
    outside.write_bytes(png)
    return MediaLimits(media_dir=str(root)), root, outside


def test_local_files_inside_the_media_dir(media) -> None:
    limits, root, _ = media
    (root / "inner-link.png").symlink_to(root / "sub" / "dog.png")
    for ref in (
        "cat.png",
        "sub/dog.png",
        "./sub/dog.png",
        f"file://{root}/cat.png",
        f"file://localhost{root}/sub/dog.png",
        f"file://{root}/my%20pic.png",
        str(root / "cat.png"),
        "inner-link.png",
    ):
        assert load_image(ref, limits).size == (40, 30), ref


def test_local_file_refusals(media, tmp_path) -> None:
    limits, root, outside = media
    (root / "escape.png").symlink_to(outside)
    (root / "dir-escape").symlink_to(tmp_path)
    os.mkfifo(root / "pipe.png")
    cases = {
        "../secret.png": "contains '..'",
        "sub/../../secret.png": "contains '..'",
        f"file://{root}/../secret.png": "contains '..'",
        "escape.png": "outside the media directory",
        "dir-escape/secret.png": "outside the media directory",
        str(outside): "outside the media directory",
        f"file://{outside}": "outside the media directory",
        "file:///etc/passwd": "outside the media directory",
        "file://otherhost/cat.png": "names host 'otherhost'",
        "missing.png": "no such file in the media directory",
        "sub": "not a regular file",
        "pipe.png": "not a regular file",
        "cat\x00.png": "NUL character",
        # every check runs on the percent-decoded path, as the OS would see it
        f"file://{root}/cat.png%00.txt": "NUL character",
        "file:///media/ok.png%00.txt": "NUL character",
        f"file://{root}/%2e%2e/secret.png": "contains '..'",
        f"file://{root}/sub/%2E%2E/%2e%2e/secret.png": "contains '..'",
        f"file://{root}/%ff.png": "not valid UTF-8",
        f"file://{quote(str(outside))}": "outside the media directory",
    }
    for ref, message in cases.items():
        with pytest.raises(MediaError, match=message):
            load_image(ref, limits)
    with pytest.raises(MediaError, match="too large"):
        load_image("cat.png", MediaLimits(media_dir=str(root), max_encoded_bytes=100))


def test_local_files_are_refused_without_a_media_dir(media) -> None:
    _, root, _ = media
    for ref in (f"file://{root}/cat.png", "cat.png", str(root / "cat.png")):
        with pytest.raises(MediaError, match="reads no local files") as info:
            load_image(ref, MediaLimits())
        assert info.value.code == "image_source_not_allowed"


async def test_async_loads_data_and_files(media) -> None:
    limits, _, _ = media
    url = _data_url(_encode(_picture(), "WEBP", lossless=True), "image/webp")
    images = await load_images_async([url, "sub/dog.png"], limits)
    assert [im.size for im in images] == [(40, 30), (40, 30)]
    with pytest.raises(MediaError, match="contains '..'"):
        await load_image_async("../secret.png", limits)


# ---- remote fetches over loopback -------------------------------------------------------------

PNG = _encode(_picture(), "PNG")
BIG = b"\0" * 50_000


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, length: bool = True) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        try:
            self._route()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _route(self) -> None:
        path = self.path
        if path == "/cat.png":
            self._send(200, PNG, {"Content-Type": "image/png"})
        elif path == "/big-declared":
            self._send(200, BIG, {"Content-Type": "image/png"})
        elif path == "/big-undeclared":  # HTTP/1.0 body ended by closing: only streaming can catch it
            self._send(200, BIG, {"Content-Type": "image/png"}, length=False)
        elif path == "/drip":  # every byte arrives quickly, the whole body never does
            self._send(200, b"", {"Content-Type": "image/png"}, length=False)
            for _ in range(60):
                self.wfile.write(b"\0")
                self.wfile.flush()
                time.sleep(0.05)
        elif path == "/stall":
            time.sleep(3)
            self._send(200, PNG)
        elif path.startswith("/hops/"):
            left = int(path.rsplit("/", 1)[1])
            self._send(302, b"", {"Location": f"/hops/{left - 1}" if left > 1 else "/cat.png"})
        elif path == "/to-file":
            self._send(302, b"", {"Location": "file:///etc/passwd"})
        elif path == "/text":
            self._send(200, b"<html>no image here</html>", {"Content-Type": "text/html"})
        else:
            self._send(404, b"not found")


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


# the test servers listen on loopback, a private address: allowed here (test_remote_policy.py covers the refusal)
REMOTE = MediaLimits(allow_remote=True, allow_private=True, max_encoded_bytes=10_000, fetch_timeout_s=1.0,
                     max_redirects=3)
FETCH_FAILED = "could not fetch image_url .*: a remote image must be served with status 200 from a public address"


async def _load(mode: str, url: str, limits: MediaLimits) -> Image.Image:
    if mode == "sync":
        return await anyio.to_thread.run_sync(load_image, url, limits)
    return await load_image_async(url, limits)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_remote_fetch(server: str, mode: str) -> None:
    image = await _load(mode, f"{server}/cat.png", REMOTE)
    assert image.size == (40, 30) and np.array_equal(np.asarray(image), np.asarray(_picture()))
    assert (await _load(mode, f"{server}/hops/3", REMOTE)).size == (40, 30)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("path", ["/big-declared", "/big-undeclared", "/drip", "/stall", "/hops/4", "/to-file",
                                  "/missing", "/text"])
async def test_remote_refusals(server: str, mode: str, path: str) -> None:
    """Every failure is the same error, so a client can't tell a slow host from a closed port or a non-image."""
    started = time.monotonic()
    with pytest.raises(MediaError, match=FETCH_FAILED) as info:
        await _load(mode, server + path, REMOTE)
    assert info.value.code == "image_fetch_failed"
    assert "10,000 bytes, within 1 s and 3 redirects" in info.value.message
    assert time.monotonic() - started < 2.5  # the 1 s budget holds, slow servers included


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_remote_refused_by_default_and_unreachable_hosts(server: str, mode: str) -> None:
    with pytest.raises(MediaError, match="fetches no remote images") as info:
        await _load(mode, f"{server}/cat.png", MediaLimits())
    assert info.value.code == "image_source_not_allowed"
    with pytest.raises(MediaError, match=FETCH_FAILED):
        await _load(mode, "http://127.0.0.1:9/cat.png", REMOTE)
