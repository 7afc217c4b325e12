"""EventChannel: how a request's Events go from the engine loop to whoever reads them.

Every generated token is one Event sent and one received, for every stream, on
the event loop that also serves HTTP; with many clients that per-token cost
is a large part of the server's work (bench/RESULTS.md, "the server's cost
per token"). anyio's memory object streams did the job but cost about 16 µs a
token with the keep-alive timeout (a cancel scope and a timer per receive, a
typed item holder and an Event per wait); this channel keeps their semantics
for what the engine and the server use, on asyncio's own futures:

- senders: send_nowait (never blocks: the buffer is unbounded), clone, close;
- the receiver: receive_nowait, receive(timeout) (TimeoutError once `timeout`
  seconds pass with nothing), close;
- the end: once every sender is closed and the buffer is read, receive raises
  anyio.EndOfStream; after the receiver is closed, receive raises
  anyio.ClosedResourceError and send_nowait anyio.BrokenResourceError (the
  engine's sign that the client went away). A closed sender raises
  anyio.ClosedResourceError.

Like anyio's streams it belongs to one event loop and is not thread-safe. An
item that is waiting is returned at once, as asyncio.Queue.get does (no extra
scheduling point per token).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import anyio

_EXPIRED = object()
_EMPTY = object()


class _State:
    __slots__ = ("buffer", "waiters", "senders", "receiver_closed")

    def __init__(self) -> None:
        self.buffer: collections.deque = collections.deque()
        self.waiters: collections.deque[asyncio.Future] = collections.deque()
        self.senders = 1
        self.receiver_closed = False

    def wake_one(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def wake_all(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)


class EventSender:
    __slots__ = ("_state", "_closed")

    def __init__(self, state: _State) -> None:
        self._state = state
        self._closed = False

    def send_nowait(self, item: Any) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        state = self._state
        if state.receiver_closed:
            raise anyio.BrokenResourceError
        state.buffer.append(item)
        if state.waiters:
            state.wake_one()

    def clone(self) -> "EventSender":
        if self._closed:
            raise anyio.ClosedResourceError
        self._state.senders += 1
        return EventSender(self._state)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        state = self._state
        state.senders -= 1
        if state.senders == 0:
            state.wake_all()        # waiting receivers see the end


class EventReceiver:
    __slots__ = ("_state",)

    def __init__(self, state: _State) -> None:
        self._state = state

    def _take(self) -> Any:
        """The next item, or _EMPTY while senders are open and nothing waits (no exception on that path)."""
        state = self._state
        if state.receiver_closed:
            raise anyio.ClosedResourceError
        if state.buffer:
            return state.buffer.popleft()
        if state.senders == 0:
            raise anyio.EndOfStream
        return _EMPTY

    def receive_nowait(self) -> Any:
        item = self._take()
        if item is _EMPTY:
            raise anyio.WouldBlock
        return item

    async def receive(self, timeout: float | None = None) -> Any:
        """The next item; TimeoutError after `timeout` seconds without one (None: wait as long as it takes)."""
        state = self._state
        while True:
            item = self._take()
            if item is not _EMPTY:
                return item
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            state.waiters.append(waiter)
            timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
            try:
                woke = await waiter
            except BaseException:         # cancelled
                if waiter.done() and not waiter.cancelled() and waiter.result() is None:
                    state.wake_one()      # a sender had picked this receive: pass its wake-up on
                else:
                    _discard(state.waiters, waiter)
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            if woke is _EXPIRED:
                _discard(state.waiters, waiter)
                raise TimeoutError

    def close(self) -> None:
        state = self._state
        if state.receiver_closed:
            return
        state.receiver_closed = True
        state.buffer.clear()
        state.wake_all()            # a waiting receive sees ClosedResourceError


def _discard(waiters: collections.deque, waiter: asyncio.Future) -> None:
    try:
        waiters.remove(waiter)
    except ValueError:
        pass


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(_EXPIRED)


def open_event_channel() -> tuple[EventSender, EventReceiver]:
    """A new channel: one sender (clone it for more) and its receiver."""
    state = _State()
    return EventSender(state), EventReceiver(state)
