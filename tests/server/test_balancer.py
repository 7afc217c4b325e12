"""Two CPU replicas behind HAProxy with deploy/haproxy/haproxy.cfg: spread, exactness, affinity, drain, kill.

The replicas are real `strata serve` processes and the balancer Debian's
haproxy (`make balancer`), all on loopback. Shown here: requests spread over
both replicas and every stream equals its solo run on one replica; a session
(X-Session-ID, else the start of the conversation or prompt) stays on its
replica; a replica sent SIGTERM finishes its stream in flight while new
requests flow to the other, exits 0 and rejoins when restarted; a replica
killed mid-run costs only its own streams (their clients get an error, not a
hang) while the other's finish exactly and new requests keep being answered.
Token counts are small: the CI machine has two cores for both replicas.
"""

from __future__ import annotations

import signal
import threading

import httpx
import pytest
from balancer_helpers import haproxy_or_skip, replica_of, start_balancer
from server_helpers import MODEL, sse_events, start_server

REPLICA_FLAGS = ("--batch", "2", "--threads", "1", "--drain-timeout", "60")
NAMES = ("r0", "r1")


class Stream(threading.Thread):
    """One streamed chat request in a thread: its replica, text, finish reason, or the error that ended it."""

    def __init__(self, url: str, body: dict, session: str | None = None):
        super().__init__(daemon=True)
        self.url, self.body = url, {**body, "stream": True}
        self.headers = {"X-Session-ID": session} if session else {}
        self.started = threading.Event()
        self.replica = self.status = self.error = self.finish = None
        self.text = ""

    def run(self):
        lines = []
        try:
            with httpx.Client(timeout=httpx.Timeout(60, connect=10)) as client:
                with client.stream("POST", f"{self.url}/v1/chat/completions", json=self.body,
                                   headers=self.headers) as response:
                    self.status, self.replica = response.status_code, replica_of(response)
                    for line in response.iter_lines():
                        lines.append(line)
                        if sum(x.startswith("data: ") for x in lines) >= 2:
                            self.started.set()
        except httpx.HTTPError as exc:
            self.error = exc
        finally:
            self.started.set()
        events = sse_events(lines)
        for event in events:
            if isinstance(event, dict) and event.get("choices"):
                choice = event["choices"][0]
                self.text += choice["delta"].get("content") or ""
                self.finish = choice.get("finish_reason") or self.finish

    def result(self) -> tuple[str, str | None]:
        self.join(90)
        assert not self.is_alive(), "a stream hung"
        assert self.error is None and self.status == 200, (self.status, self.error)
        return self.text, self.finish


def chat(content: str, max_tokens: int, system: str | None = None, **extra) -> dict:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
    return {"model": MODEL, "messages": messages, "max_tokens": max_tokens, **extra}


def solo(url: str, body: dict) -> tuple[str, str | None]:
    stream = Stream(url, body)
    stream.start()
    return stream.result()


def post(url: str, body: dict, session: str | None = None) -> httpx.Response:
    headers = {"X-Session-ID": session} if session else {}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60)


@pytest.fixture(scope="module")
def cluster(model_available, tmp_path_factory):
    haproxy_or_skip()                  # before the replicas take seconds to load
    logs = tmp_path_factory.mktemp("cluster")
    replicas = {name: start_server(logs, *REPLICA_FLAGS) for name in NAMES}
    balancer = start_balancer(logs, {name: r.port for name, r in replicas.items()})
    yield balancer, replicas, logs
    balancer.stop()
    for replica in replicas.values():
        replica.stop(signal.SIGKILL)


def sessions_by_replica(balancer, count: int = 24) -> dict[str, list[str]]:
    """Session ids grouped by the replica the balancer sends them to (probed with a body-less GET)."""
    placed: dict[str, list[str]] = {name: [] for name in NAMES}
    for i in range(count):
        session = f"session-{i}"
        response = httpx.get(f"{balancer.url}/v1/models", headers={"X-Session-ID": session}, timeout=10)
        placed[replica_of(response)].append(session)
    return placed


def test_requests_spread_and_every_stream_equals_its_solo_run(cluster):
    balancer, replicas, _ = cluster
    bodies = [chat("Name a color.", 12, temperature=0), chat("Say hello.", 12, temperature=0.8, seed=7),
              chat("Count to five.", 12, temperature=0), chat("Name a fruit.", 12, temperature=1.0, seed=3),
              chat("What is 2+2?", 12, temperature=0), chat("Name an animal.", 12, temperature=0.7, seed=11)]
    references = [solo(replicas["r0"].url, body) for body in bodies]
    streams = [Stream(balancer.url, body, session=f"spread-{i}") for i, body in enumerate(bodies)]
    for stream in streams:
        stream.start()
    results = [stream.result() for stream in streams]
    assert {stream.replica for stream in streams} == set(NAMES)
    for result, reference, stream in zip(results, references, streams):
        assert result == reference, f"on {stream.replica}"


def test_a_session_stays_on_its_replica(cluster):
    balancer, _, _ = cluster
    # The X-Session-ID header: every turn of a session on one replica, the sessions on both.
    placed = {}
    for session in [f"affinity-{i}" for i in range(4)]:
        for turn in range(3):
            response = post(balancer.url, chat(f"Turn {turn}.", 1), session=session)
            assert response.status_code == 200
            placed.setdefault(session, set()).add(replica_of(response))
    assert all(len(where) == 1 for where in placed.values()), placed
    assert set().union(*placed.values()) == set(NAMES)
    # No header: the start of the conversation (system prompt + first user message, or the first
    # message) keeps later turns with their first one.
    conversations = {}
    for i in range(8):
        system = "You are terse." if i % 2 else None
        first = chat(f"Tell me about topic {i}.", 1, system=system)
        later = {**first, "messages": first["messages"] + [{"role": "assistant", "content": "Sure."},
                                                          {"role": "user", "content": "Go on."}]}
        conversations[i] = {replica_of(post(balancer.url, body)) for body in (first, later)}
    assert all(len(where) == 1 for where in conversations.values()), conversations
    assert set().union(*conversations.values()) == set(NAMES)


def test_sigterm_drains_a_replica_and_traffic_moves_to_the_other(cluster):
    balancer, replicas, logs = cluster
    placed = sessions_by_replica(balancer)
    draining_session, other_sessions = placed["r1"][0], placed["r1"][1:4]
    long_body = chat("Tell me a story about a lighthouse.", 120, temperature=0, ignore_eos=True)
    short_body = chat("Name a planet.", 6, temperature=0)
    long_reference, short_reference = solo(replicas["r0"].url, long_body), solo(replicas["r0"].url, short_body)

    in_flight = Stream(balancer.url, long_body, session=draining_session)
    in_flight.start()
    assert in_flight.started.wait(60)
    replicas["r1"].proc.send_signal(signal.SIGTERM)
    # Asked directly, the draining replica refuses new work with 503 + Retry-After, and /health is 503.
    refused = post(replicas["r1"].url, short_body)
    assert refused.status_code == 503 and refused.headers["Retry-After"]
    assert refused.json()["error"]["code"] == "shutting_down"
    assert httpx.get(f"{replicas['r1'].url}/health", timeout=10).status_code == 503
    # Through the balancer, r1's sessions are answered (by r0: a retry or the failed check).
    for session in other_sessions:
        response = post(balancer.url, {**short_body, "stream": False}, session=session)
        assert response.status_code == 200 and replica_of(response) == "r0"
    assert in_flight.result() == long_reference and in_flight.replica == "r1"
    assert replicas["r1"].proc.wait(60) == 0
    log = replicas["r1"].log()
    assert "draining: 1 request(s) in flight" in log and "drained: no request in flight" in log
    # Restarted on its port, r1 is back in rotation for its sessions.
    replicas["r1"] = start_server(logs, *REPLICA_FLAGS, port=replicas["r1"].port)
    for _ in range(100):
        response = post(balancer.url, short_body, session=draining_session)
        if replica_of(response) == "r1":
            break
    assert replica_of(response) == "r1" and response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == short_reference[0]


def test_a_killed_replica_costs_only_its_requests(cluster):
    balancer, replicas, _ = cluster
    placed = sessions_by_replica(balancer)
    doomed_body = chat("Write a long poem about the sea.", 400, temperature=0, ignore_eos=True)
    kept_bodies = [chat("Describe a forest.", 40, temperature=0, ignore_eos=True),
                   chat("Describe a city.", 40, temperature=0.8, seed=5, ignore_eos=True)]
    after_body = chat("Name a river.", 6, temperature=0)
    kept_references = [solo(replicas["r0"].url, body) for body in kept_bodies]
    after_reference = solo(replicas["r0"].url, after_body)

    doomed = [Stream(balancer.url, doomed_body, session=s) for s in placed["r1"][:2]]
    kept = [Stream(balancer.url, body, session=s) for body, s in zip(kept_bodies, placed["r0"])]
    for stream in doomed + kept:
        stream.start()
    for stream in doomed + kept:
        assert stream.started.wait(60)
    assert all(stream.replica == "r1" for stream in doomed) and all(stream.replica == "r0" for stream in kept)
    replicas["r1"].proc.send_signal(signal.SIGKILL)
    for stream in doomed:            # an error, promptly: the read timeout is 60 s and 400 tokens were asked
        stream.join(90)
        assert not stream.is_alive()
        assert stream.error is not None and not isinstance(stream.error, httpx.TimeoutException), stream.error
        assert stream.finish is None
    for stream, reference in zip(kept, kept_references):
        assert stream.result() == reference
    # r1's sessions are answered by r0 from now on, exactly.
    for session in placed["r1"][:4]:
        response = post(balancer.url, {**after_body, "stream": False}, session=session)
        assert response.status_code == 200 and replica_of(response) == "r0"
        assert response.json()["choices"][0]["message"]["content"] == after_reference[0]
