"""DeviceThread without a model: calls run one at a time in submission order on one thread other than
the event loop's, results and exceptions come back to the caller, a started call finishes even when its
caller is cancelled, and STRATA_DEVICE_THREAD=anyio takes anyio's worker threads instead."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from strata.engine.device_thread import DeviceThread


@pytest.fixture(params=["own", "anyio"])
def device(request, monkeypatch):
    monkeypatch.setenv("STRATA_DEVICE_THREAD", request.param)
    thread = DeviceThread()
    yield request.param, thread
    thread.stop()


async def test_results_exceptions_and_the_thread(device):
    mode, thread = device
    thread.choose()
    assert thread.own_thread == (mode == "own")
    assert await thread.run(lambda a, b: a + b, 2, 3) == 5
    name = await thread.run(lambda: threading.current_thread().name)
    assert name != threading.current_thread().name
    if mode == "own":
        assert name == "strata-device"

    def fails():
        raise ValueError("on the device")

    with pytest.raises(ValueError, match="on the device"):
        await thread.run(fails)
    assert await thread.run(lambda: "still serving") == "still serving"


async def test_calls_never_overlap_and_keep_their_order(device):
    _, thread = device
    thread.choose()
    active, seen, order = [0], [], []

    def work(i):
        active[0] += 1
        seen.append(active[0])
        time.sleep(0.002)
        order.append(i)
        active[0] -= 1
        return i

    results = []

    async def one(i):
        results.append(await thread.run(work, i))

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(one, i)
            await anyio.lowlevel.checkpoint()   # submitted in this order
    assert max(seen) == 1
    assert sorted(results) == list(range(8))
    if thread.own_thread:
        assert order == list(range(8))


async def test_a_started_call_finishes_when_its_caller_is_cancelled(device):
    _, thread = device
    thread.choose()
    started, done = threading.Event(), []

    def slow():
        started.set()
        time.sleep(0.05)
        done.append(True)
        return "done"

    with anyio.move_on_after(0.01) as scope:
        result = await thread.run(slow)
    assert done == [True] and result == "done"     # shielded: the caller waited for the call's end
    assert scope.cancel_called


async def test_stop_then_run_again(monkeypatch):
    monkeypatch.setenv("STRATA_DEVICE_THREAD", "own")
    thread = DeviceThread()
    thread.choose()
    assert await thread.run(lambda: 1) == 1
    thread.stop()
    assert await thread.run(lambda: 2) == 2      # a new thread starts
    thread.stop()


def test_bad_setting(monkeypatch):
    monkeypatch.setenv("STRATA_DEVICE_THREAD", "fast")

    async def main():
        DeviceThread().choose()

    with pytest.raises(ValueError, match="STRATA_DEVICE_THREAD"):
        anyio.run(main)


async def test_a_loop_of_calls_stops_when_its_scope_is_cancelled(device):
    """The engine loop awaits little but these calls: a cancelled scope must stop it at the next call
    (a server asked to shut down ends its streams), not after the requests run out."""
    _, thread = device
    thread.choose()
    calls = 0

    def step():
        nonlocal calls
        calls += 1
        time.sleep(0.002)

    with anyio.move_on_after(0.1) as scope:
        for _ in range(2000):        # ~4 s of calls if cancellation never lands
            await thread.run(step)
    assert scope.cancelled_caught
    assert calls < 500, f"{calls} calls ran after the scope was cancelled"
