"""DeviceThread: the one worker thread that runs the engine's device calls, one at a time.

Every engine step and every Engine.run_on_device call (the vision encoder, slot files) runs
here in submission order, so no device call ever runs beside a step. The event loop hands a
call over and awaits its result without blocking; the wait is shielded from cancellation, as
a call that has started must finish before the loop moves on (the device state is the
runner's).

On asyncio (what the server runs) a hand-off is one queue put and one call_soon_threadsafe:
about 40 µs of host CPU, against about 100 µs for anyio.to_thread.run_sync with a capacity
limiter (its checkpoint, limiter, cancel scope, context copy and worker pool), and the engine
pays it every step (bench/host_step.py, bench/RESULTS.md). Other anyio backends (trio), and
STRATA_DEVICE_THREAD=anyio (the A/B switch, read when the engine loop starts), take
anyio.to_thread.run_sync with a limiter of one instead.
"""

from __future__ import annotations

import asyncio
import queue
import threading

import anyio
import anyio.lowlevel

from .. import env


class DeviceThread:
    def __init__(self, name: str = "strata-device"):
        self._name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._limiter: anyio.CapacityLimiter | None = None
        self.own_thread: bool | None = None    # the mode, fixed by choose() (None: on first use)

    def choose(self) -> None:
        """Fixes the hand-off for the running event loop: the own thread on asyncio unless
        STRATA_DEVICE_THREAD=anyio. Called when the engine loop starts; the two modes never mix
        while calls are in flight (each serializes only its own calls)."""
        wanted = (env.get("STRATA_DEVICE_THREAD") or "own").strip().lower()
        if wanted not in ("own", "anyio"):
            raise ValueError(f"STRATA_DEVICE_THREAD must be 'own' or 'anyio', got {wanted!r}")
        self.own_thread = wanted == "own" and _on_asyncio()

    async def run(self, fn, *args):
        """fn(*args) on the device thread; its result, or its exception raised here."""
        if self.own_thread is None:
            self.choose()
        if not self.own_thread:
            if self._limiter is None:
                self._limiter = anyio.CapacityLimiter(1)
            return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)
        # A cancelled caller stops here, before handing over (as anyio.to_thread.run_sync does): the
        # engine loop awaits little else between steps, so without it a cancelled loop would go on
        # stepping until its requests end (a server asked to shut down would not stop them).
        await anyio.lowlevel.checkpoint_if_cancelled()
        loop = asyncio.get_running_loop()
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, args=(self._queue,), name=self._name, daemon=True)
            self._thread.start()
        future = loop.create_future()
        self._queue.put((loop, future, fn, args))
        with anyio.CancelScope(shield=True):     # a started call runs to its end before the caller goes on
            return await future

    def stop(self) -> None:
        """Lets the thread end once the calls queued so far are done (a later run starts a new one)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread = None
            self._queue = queue.SimpleQueue()

    @staticmethod
    def _work(jobs: queue.SimpleQueue) -> None:
        while True:
            job = jobs.get()
            if job is None:
                return
            loop, future, fn, args = job
            try:
                outcome = (True, fn(*args))
            except BaseException as exc:     # handed to the caller, as anyio.to_thread does
                outcome = (False, exc)
            try:
                loop.call_soon_threadsafe(_settle, future, outcome)
            except RuntimeError:             # the loop is closed: nobody waits for the result
                pass
            del job, loop, future, fn, args, outcome


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:         # trio, or no loop
        return False
    return True


def _settle(future: asyncio.Future, outcome: tuple) -> None:
    if future.cancelled():
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
