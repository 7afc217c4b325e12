"""ChoiceSet: the n choices of one request, submitted all or none, their events read from one stream.

Choice i is its own engine request in its own slot, sampled with the key
(seed, choice_index + i) (SamplingParams.sampler_seed), so choice i is the
same whether asked as one of n or alone with `choice_index` = i. A request
without a seed gets one here, once, shared by its choices. The choices send
their events into one event channel (Engine.submit's `events`), each
tagged with its choice index, so reading them needs no task per choice and a
wait can time out safely (SSE keep-alive). If any choice can't be queued,
the ones already queued are cancelled and the error stands for the request.
"""

from __future__ import annotations

import secrets
from dataclasses import replace

import anyio

from strata.engine.event_channel import open_event_channel
from strata.engine.sampling import SamplingParams
from strata.engine.stream import Completion, RequestStream

PING = object()          # next() timed out: nothing arrived within the interval


class ChoiceSet:
    def __init__(self, engine, ids: list[int], params: SamplingParams, n: int, vision: dict | None):
        if params.seed is None:
            params = replace(params, seed=secrets.randbits(63))
        self.base = params.choice_index
        self.n = n
        send, self._receive = open_event_channel()
        self.streams: list[RequestStream] = []
        try:
            for i in range(n):
                self.streams.append(engine.submit(ids, replace(params, choice_index=self.base + i),
                                                  events=(send, self._receive), **(vision or {})))
        except BaseException:
            for stream in self.streams:
                stream.cancel()
            self._receive.close()
            raise
        finally:
            send.close()          # each request holds its own clone; the stream ends when all have ended

    @property
    def request_id(self) -> str:
        return self.streams[0].request_id

    async def next(self, timeout: float | None = None):
        """(choice index, event), PING after `timeout` seconds without one, or None once every choice ended."""
        try:
            event = await self._receive.receive(timeout)
        except TimeoutError:
            return PING
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return None
        return event.choice - self.base, event

    def cancel(self) -> None:
        for stream in self.streams:
            stream.cancel()

    async def collect(self) -> list[Completion]:
        completions = [Completion(s.request_id) for s in self.streams]
        while (item := await self.next()) is not None:
            index, event = item
            completions[index].add(event)
        return completions

    async def aclose(self) -> None:
        for stream in self.streams:
            await stream.aclose()
        self._receive.close()
