"""`strata serve --model <Qwen2.5-VL dir>` answers image chats over real HTTP through the openai SDK.

The server runs as in production (a subprocess on a loopback port, CPU,
`--media-dir` set). Its greedy answer to an image chat equals the engine's
answer in this process for the same request; the same picture by media-dir
path gives the same answer; bad images get 400 with their code, and the
server keeps answering exactly afterwards.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .harness import Job, data_url, drive, encode, picture, user

openai = pytest.importorskip("openai")

CAT = picture(170, 140, 1)
QUESTION = "what is in this picture?"
STARTUP_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vision_server(checkpoint, tmp_path_factory):
    media = tmp_path_factory.mktemp("media")
    CAT.save(media / "cat.png")
    port, log_path = _free_port(), media.parent / "serve.log"
    script = Path(sys.executable).with_name("strata")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "strata.cli"]
    command += ["serve", "--model", str(checkpoint), "--device", "cpu", "--port", str(port), "--ctx", "512",
                "--batch", "2", "--chunk", "16", "--media-dir", str(media), "--served-model-name", "tiny-vl"]
    env = {k: v for k, v in os.environ.items() if k not in ("STRATA_API_KEY", "STRATA_ALLOW_REMOTE_MEDIA")}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, url, log_path)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_healthy(proc, url: str, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"strata serve exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"strata serve did not become healthy:\n{log_path.read_text()[-3000:]}")


def _ask(client, image_url: str, stream: bool = False) -> str:
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_url}},
                                             {"type": "text", "text": QUESTION}]}]
    reply = client.chat.completions.create(model="tiny-vl", messages=messages, temperature=0, max_tokens=6,
                                           stream=stream)
    if stream:
        return "".join(c.choices[0].delta.content or "" for c in reply if c.choices)
    return reply.choices[0].message.content


async def test_image_chat_over_http_equals_the_engine(vision_server, make_engine, device):
    if device != "cpu":
        pytest.skip("the server runs on the CPU here")
    engine = make_engine(batch=1)
    inputs = await encode(engine, [user(CAT, QUESTION)])
    want = await drive(engine, [Job("x", inputs, _params())])
    client = openai.OpenAI(base_url=vision_server + "/v1", api_key="unused", max_retries=0)
    answer = _ask(client, data_url(CAT))
    assert answer == engine.tokenizer.decode(want["x"].tokens, skip_special=True)
    assert _ask(client, data_url(CAT), stream=True) == answer
    assert _ask(client, "cat.png") == answer                       # the same picture from --media-dir


@pytest.mark.parametrize("url, code", [
    ("data:image/png;base64,aGVsbG8=", "invalid_image"),
    ("http://127.0.0.1:9/cat.png", "image_source_not_allowed"),
    ("../outside.png", "image_source_not_allowed"),
])
def test_bad_images_get_400_and_the_server_keeps_serving(vision_server, url, code):
    client = openai.OpenAI(base_url=vision_server + "/v1", api_key="unused", max_retries=0)
    before = _ask(client, data_url(CAT))
    with pytest.raises(openai.BadRequestError) as refused:
        _ask(client, url)
    assert refused.value.status_code == 400 and refused.value.code == code
    assert _ask(client, data_url(CAT)) == before


def test_a_repeated_image_chat_reports_its_cached_image_pages(vision_server):
    """The second time, the image's pages come from the prefix cache: usage and /metrics count them, and the
    answer is the same. The text before the picture is unique to this test, so the first time is a miss."""
    prometheus = pytest.importorskip("prometheus_client.parser")

    def cached_total() -> float:
        text = httpx.get(f"{vision_server}/metrics", timeout=10).text
        return sum(s.value for f in prometheus.text_string_to_metric_families(text) for s in f.samples
                   if s.name == "strata_prompt_cached_tokens_total")

    client = openai.OpenAI(base_url=vision_server + "/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": [
        {"type": "text", "text": "A long first sentence that no other test of this module sends, then a picture: "},
        {"type": "image_url", "image_url": {"url": data_url(CAT)}}, {"type": "text", "text": QUESTION}]}]
    first = client.chat.completions.create(model="tiny-vl", messages=messages, temperature=0, max_tokens=4)
    before = cached_total()
    second = client.chat.completions.create(model="tiny-vl", messages=messages, temperature=0, max_tokens=4)
    n = first.usage.prompt_tokens
    cached = 64 * ((n - 1) // 64)          # every full page below the prompt's last token
    assert n > 128 and first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == cached
    assert second.choices[0].message.content == first.choices[0].message.content
    assert cached_total() - before == cached


def _params():
    from strata.engine.sampling import SamplingParams

    return SamplingParams(max_tokens=6, temperature=0.0)      # what the requests above ask for
