"""EventChannel (strata/engine/event_channel.py): the semantics the engine and the server rely on, the ones
anyio's memory object streams had — order, the end once every sender closed and the buffer is read, the
receiver's close seen by senders, timeouts that lose nothing, and cancelled receives that leave the channel
usable."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from strata.engine.event_channel import open_event_channel


async def test_items_arrive_in_order_then_the_end_once_every_sender_closed():
    send, receive = open_event_channel()
    other = send.clone()
    send.send_nowait(1)
    other.send_nowait(2)
    send.send_nowait(3)
    send.close()
    assert [await receive.receive() for _ in range(3)] == [1, 2, 3]
    with pytest.raises(anyio.WouldBlock):
        receive.receive_nowait()                 # `other` is still open
    other.send_nowait(4)
    other.close()
    assert await receive.receive() == 4          # what was sent before the end is still read
    with pytest.raises(anyio.EndOfStream):
        await receive.receive()
    with pytest.raises(anyio.EndOfStream):
        receive.receive_nowait()


async def test_a_waiting_receive_wakes_on_send_and_on_the_end():
    send, receive = open_event_channel()
    got = []

    async def reader():
        try:
            while True:
                got.append(await receive.receive())
        except anyio.EndOfStream:
            got.append("end")

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await asyncio.sleep(0.01)
        send.send_nowait("a")
        await asyncio.sleep(0.01)
        send.send_nowait("b")
        send.send_nowait("c")
        send.close()
    assert got == ["a", "b", "c", "end"]


async def test_closing_the_receiver_breaks_the_senders_and_a_waiting_receive():
    send, receive = open_event_channel()
    send.send_nowait(1)
    waiting = asyncio.ensure_future(receive.receive())
    assert await waiting == 1
    waiting = asyncio.ensure_future(receive.receive())
    await asyncio.sleep(0.01)
    receive.close()
    with pytest.raises(anyio.ClosedResourceError):
        await waiting
    with pytest.raises(anyio.BrokenResourceError):   # the engine's sign that the client went away
        send.send_nowait(2)
    with pytest.raises(anyio.ClosedResourceError):
        receive.receive_nowait()
    send.close()
    with pytest.raises(anyio.ClosedResourceError):
        send.send_nowait(3)
    with pytest.raises(anyio.ClosedResourceError):
        send.clone()


async def test_a_timeout_loses_nothing():
    send, receive = open_event_channel()
    with pytest.raises(TimeoutError):
        await receive.receive(0.02)
    send.send_nowait("late")
    assert await receive.receive(0.02) == "late"
    assert await asyncio.gather(receive.receive(1.0), _send_later(send, "next")) == ["next", None]
    assert not receive._state.waiters            # no expired waiter left behind


async def test_a_cancelled_receive_leaves_the_channel_usable():
    send, receive = open_event_channel()
    with anyio.move_on_after(0.02):
        await receive.receive()
    assert not receive._state.waiters
    # cancelled just as a sender picked it: the wake-up passes to the next receive, the item stays
    waiting = asyncio.ensure_future(receive.receive())
    other = asyncio.ensure_future(receive.receive())
    await asyncio.sleep(0.01)
    send.send_nowait("x")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await asyncio.wait_for(other, 1.0) == "x"


async def _send_later(send, item):
    await asyncio.sleep(0.01)
    send.send_nowait(item)
