"""Reference streams that run in the background while a test misbehaves, each compared with its solo run.

`ReferenceStreams(server)` computes the solo token ids of a greedy and a seeded request, then streams each
of them over and over from its own thread. A test wraps its bad request in `during()`, which waits until a
stream is mid-flight, so the request is served while that stream decodes; `check()` at the end raises if
any stream's ids differ from its solo run, naming the cases it overlapped.
"""

from __future__ import annotations

import json
import threading
import time

import httpx

from server_helpers import MODEL

REQUESTS = [
    {"model": MODEL, "messages": [{"role": "user", "content": "Tell a long story about a lighthouse keeper."}],
     "max_tokens": 48, "ignore_eos": True, "temperature": 0, "return_token_ids": True},
    {"model": MODEL, "prompt": "The history of the printing press began", "max_tokens": 48, "ignore_eos": True,
     "temperature": 0.9, "top_p": 0.95, "seed": 1234, "return_token_ids": True},
]


def _path(body: dict) -> str:
    return "/v1/chat/completions" if "messages" in body else "/v1/completions"


def stream_ids(client: httpx.Client, body: dict, started=None) -> list[int]:
    ids: list[int] = []
    with client.stream("POST", _path(body), json={**body, "stream": True}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices", []):
                ids += choice.get("token_ids") or []
                if ids and started is not None:
                    started.set()
    return ids


class ReferenceStreams:
    def __init__(self, server):
        self.server = server
        with server.http() as client:
            self.solo = [stream_ids(client, body) for body in REQUESTS]
        self.runs: list[tuple[int, float, float, list[int]]] = []      # (request index, start, end, ids)
        self.cases: list[tuple[str, float, float]] = []
        self.errors: list[str] = []
        self._in_flight = 0                  # streams past their first token
        self._cond = threading.Condition()
        self._stop = threading.Event()
        # one thread per request, each looping: with two of them some stream is nearly always mid-flight
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(len(REQUESTS))]
        for thread in self._threads:
            thread.start()

    def _loop(self, index: int) -> None:
        with self.server.http() as client:
            while not self._stop.is_set():
                started = _Flag(self._cond, self)
                start = time.monotonic()
                try:
                    ids = stream_ids(client, REQUESTS[index], started)
                except Exception as exc:        # reported by check()
                    self.errors.append(f"reference stream {index}: {type(exc).__name__}: {exc}")
                    ids = []
                started.clear()
                self.runs.append((index, start, time.monotonic(), ids))

    def during(self, name: str):
        """A context manager: the block runs while a reference stream is mid-flight."""
        streams = self

        class _During:
            def __enter__(self):
                with streams._cond:
                    assert streams._cond.wait_for(lambda: streams._in_flight > 0, 120), "no reference stream runs"
                self.start = time.monotonic()

            def __exit__(self, *exc):
                streams.cases.append((name, self.start, time.monotonic()))

        return _During()

    def check(self) -> int:
        """Stops the streams; raises unless every run equals its solo run. Returns the number of runs."""
        self._stop.set()
        for thread in self._threads:
            thread.join(120)
        bad = []
        for index, start, end, ids in self.runs:
            if ids != self.solo[index]:
                overlapped = [n for n, s, e in self.cases if s < end and e > start]
                bad.append(f"reference {index} ({len(ids)} ids) differs from solo; it ran during {overlapped[:10]}")
        assert not self.errors and not bad, "\n".join(self.errors + bad)
        return len(self.runs)


class _Flag:
    """The `started` event of one stream: counts it in flight from its first token until clear()."""

    def __init__(self, cond: threading.Condition, streams: ReferenceStreams):
        self._cond, self._streams, self._set = cond, streams, False

    def set(self) -> None:
        with self._cond:
            if not self._set:
                self._set = True
                self._streams._in_flight += 1
                self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            if self._set:
                self._set = False
                self._streams._in_flight -= 1
