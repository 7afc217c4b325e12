"""A tiny OpenAI-compatible streaming server on loopback for the load generator's tests.

It streams text-only chunks (no token ids, like llama-server) and answers
greedy requests the same way whatever else runs, but makes a seeded request's
answer depend on how many requests are in flight — a server without Strata's
guarantee. The first `gather` requests wait for each other, so the concurrent
phase is truly concurrent whatever the machine's speed. It keeps every body it
received, and its usage chunk reports 10 prompt tokens per message, all but
the last message's as cached unless the request sent "cache_prompt": false.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeServer:
    def __init__(self, gather: int):
        self.lock = threading.Lock()
        self.in_flight = 0
        self.barrier = threading.Barrier(gather, timeout=30)
        self.gathered = 0
        self.gather = gather
        self.bodies: list[dict] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def _answer(self, body: dict) -> list[str]:
        with self.lock:
            self.in_flight += 1
            wait = self.gathered < self.gather
            self.gathered += wait
        try:
            if wait:
                self.barrier.wait()      # all `gather` requests are in flight together here
            seen = self.gather if wait else self.in_flight
        finally:
            with self.lock:
                self.in_flight -= 1
        words = ["alpha", " beta", " gamma"]
        if body.get("temperature", 1.0) != 0.0:
            words.append(f" batch{seen}")   # the answer depends on who else is served
        return words

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if body.get("model") != "fake-model":
                    return self._json(404, {"error": {"message": "no such model"}})
                with fake.lock:
                    fake.bodies.append(body)
                words = fake._answer(body)
                messages = len(body["messages"])
                cached = 0 if body.get("cache_prompt") is False else 10 * (messages - 1)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for word in words:
                    self._event({"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]})
                self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
                self._event({"choices": [], "usage": {"completion_tokens": len(words), "prompt_tokens": 10 * messages,
                                                      "prompt_tokens_details": {"cached_tokens": cached}}})
                self.wfile.write(b"data: [DONE]\n\n")

            def _event(self, payload: dict) -> None:
                self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
                self.wfile.flush()

            def _json(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
