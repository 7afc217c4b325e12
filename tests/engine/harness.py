"""Driving an Engine from a test: run it, submit requests at chosen steps, collect streams.

`run_script` starts the engine loop, submits each request when the engine has
completed `at_step` steps (so admissions land mid-prefill or mid-decode), and
returns every request's Completion plus a log of each step's plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from strata.engine.sampling import SamplingParams


@dataclass
class Job:
    prompt: list[int]
    params: SamplingParams
    at_step: int = 0
    cancel_after_tokens: int | None = None     # cancel once this many tokens arrived
    cancel_at_step: int | None = None          # cancel when the engine reaches this step
    name: str = ""


@dataclass
class StepLog:
    prefill: list[tuple[str, int, int]] = field(default_factory=list)   # (request id, start, length)
    decode: list[str] = field(default_factory=list)
    admitted: list[str] = field(default_factory=list)


async def run_script(engine, jobs: list[Job], timeout: float = 600.0):
    steps: list[StepLog] = []

    def observe(plan, result):
        steps.append(StepLog([(c.request.request_id, c.start, c.length) for c in plan.prefill],
                             [r.request_id for r in plan.decode], [r.request_id for r in plan.admitted]))

    engine.step_observers.append(observe)
    results = [None] * len(jobs)
    try:
        with anyio.fail_after(timeout):
            async with anyio.create_task_group() as tg:
                await tg.start(engine.run)
                async with anyio.create_task_group() as clients:
                    for i, job in enumerate(jobs):
                        clients.start_soon(_client, engine, job, i, results)
                tg.cancel_scope.cancel()
    finally:
        engine.step_observers.remove(observe)
    return results, steps


async def _client(engine, job: Job, index: int, results: list) -> None:
    from strata.engine.stream import Completion

    while engine.metrics.steps < job.at_step:
        await anyio.sleep(0.001)
    stream = engine.submit(job.prompt, job.params)
    completion = Completion(stream.request_id)
    completion.request = stream.request
    async with anyio.create_task_group() as tg:
        if job.cancel_at_step is not None:
            tg.start_soon(_cancel_at, engine, stream, job.cancel_at_step)
        async for event in stream:
            completion.add(event)
            if job.cancel_after_tokens is not None and len(completion.token_ids) >= job.cancel_after_tokens:
                stream.cancel()
        tg.cancel_scope.cancel()
    results[index] = completion


async def _cancel_at(engine, stream, step: int) -> None:
    while engine.metrics.steps < step:
        await anyio.sleep(0.001)
    stream.cancel()


async def solo(engine, prompt, params):
    """The request alone in the engine: the reference every batched stream must equal."""
    results, _ = await run_script(engine, [Job(prompt, params)])
    return results[0]
