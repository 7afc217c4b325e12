"""32 concurrent streaming clients (async SDK) on a 4-slot server: no errors, and every stream's
token ids and text equal the same request run alone — greedy and seeded, chat and completions,
short prompts and prompts longer than the prefill chunk."""

from __future__ import annotations

import anyio
import httpx
import pytest
from server_helpers import wait_idle

from strata.client import AsyncClient, Client

NUM_CLIENTS = 32
TOPICS = ["the sea", "a robot", "Paris", "winter", "a cat", "music", "the moon", "bread"]


def _requests() -> list[tuple[str, object, dict]]:
    """(kind, prompt, options) for each client: half greedy, half seeded sampling."""
    out = []
    for i in range(NUM_CLIENTS):
        topic = TOPICS[i % len(TOPICS)]
        options = {"max_tokens": 6 + i % 5}
        if i % 2:
            options |= {"temperature": 0.9, "seed": 1000 + i, "top_p": 0.95, "top_k": 50 if i % 3 else 0}
        else:
            options |= {"temperature": 0}
        if i % 4 == 3:
            prompt = f"Here is a long list of things about {topic}: " + ", ".join(f"item {n}" for n in range(20))
            out.append(("complete", prompt, options))                 # > 32 tokens: prefill takes several steps
        else:
            out.append(("chat", [{"role": "system", "content": "Be brief."},     # short: prefill is the cost here
                                 {"role": "user", "content": f"One sentence about {topic}."}], options))
    return out


def _solo(client: Client, kind: str, prompt, options: dict) -> tuple[list[int], str, str]:
    stream = client.chat_stream if kind == "chat" else client.complete_stream
    chunks = list(stream(prompt, **options))
    return _result(chunks)


def _result(chunks) -> tuple[list[int], str, str]:
    return ([t for c in chunks for t in c.token_ids], "".join(c.text for c in chunks),
            next(c.finish_reason for c in chunks if c.finish_reason))


@pytest.mark.exactness
def test_concurrent_streams_equal_their_solo_runs(server):
    requests = _requests()
    with Client(server.url, timeout=300) as client:
        solo = []
        for kind, prompt, options in requests:
            wait_idle(server)                   # alone: nothing else in flight
            solo.append(_solo(client, kind, prompt, options))

    async def run_all():
        results: list = [None] * NUM_CLIENTS
        busy_seen, queue_seen = [], []
        async with AsyncClient(server.url, timeout=300) as aclient, httpx.AsyncClient(base_url=server.url) as http:
            async def one(i, kind, prompt, options):
                stream = aclient.chat_stream if kind == "chat" else aclient.complete_stream
                results[i] = _result([c async for c in stream(prompt, **options)])

            async def watch():
                while None in results:
                    state = (await http.get("/slots")).json()
                    busy_seen.append(state["busy_slots"])
                    queue_seen.append(state["queue_len"])
                    await anyio.sleep(0.05)

            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                for i, (kind, prompt, options) in enumerate(requests):
                    tg.start_soon(one, i, kind, prompt, options)
        return results, busy_seen, queue_seen

    together, busy_seen, queue_seen = anyio.run(run_all)
    assert max(busy_seen) == 4 and max(queue_seen) > 0      # batched, and admitted as slots freed
    for i, (alone, batched) in enumerate(zip(solo, together)):
        assert batched == alone, f"client {i} ({requests[i][0]}, {requests[i][2]}) differs from its solo run"
    assert all(len(ids) > 0 for ids, _, _ in solo)
    wait_idle(server)
