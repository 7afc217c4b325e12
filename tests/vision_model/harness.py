"""Driving an Engine with image requests from a test, and watching every sampled row's logits.

`drive` starts the engine loop and submits each Job when its condition holds:
at once, once another job has a number of tokens (admission mid-decode), or
once another job has finished (slot reuse). Conditions are checked in a step
observer, right after the step, so "admitted while X decodes" is exact, not
a race. The observer also downloads the logits of every sampled row, so
streams can be compared bit for bit, logits included, with their solo runs.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

import anyio
import numpy as np
from PIL import Image

from strata.engine.sampling import SamplingParams
from strata.inputs import EngineInput, chat_input
from strata.vision.media import MediaLimits

GREEDY = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)


def picture(width: int, height: int, seed: int) -> Image.Image:
    """Noise over a gradient, so resizing and every patch matter."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack([xx * 255 // max(width - 1, 1), yy * 255 // max(height - 1, 1), (xx * yy) % 256], axis=-1)
    noise = rng.integers(-60, 61, size=(height, width, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))


def data_url(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def user(*parts) -> dict:
    """A user message from strings (text parts) and PIL images (image_url parts)."""
    content = [{"type": "text", "text": p} if isinstance(p, str) else
               {"type": "image_url", "image_url": {"url": data_url(p)}} for p in parts]
    return {"role": "user", "content": content}


async def encode(engine, messages: list[dict], limits: MediaLimits | None = None) -> EngineInput:
    return await chat_input(engine, messages, limits or MediaLimits())


@dataclass
class Job:
    name: str
    inputs: EngineInput
    params: SamplingParams = GREEDY
    after_tokens: tuple[str, int] | None = None   # submit once that job has this many tokens
    after_finish: str | None = None               # submit once that job has finished
    cancel_after: int | None = None               # cancel once this job has this many tokens


@dataclass
class Result:
    tokens: list[int]
    logits: np.ndarray                              # float32 [n_tokens, vocab]
    finish_reason: str | None
    error: str | None
    slot: int | None
    admitted_at_step: int | None = None
    num_cached: int = 0                             # prompt tokens it mapped from the prefix cache


async def drive(engine, jobs: list[Job], timeout: float = 300.0, steps: list | None = None) -> dict[str, Result]:
    """Runs the jobs to the end; `steps`, when given, gets one (decoding, prefilling) pair of job names per step."""
    runner, vocab = engine.runner, engine.model.spec.vocab
    runner.keep_logits = True     # every step's own logits stay in act.logits (no decode-ahead guess over them)
    rows: dict[str, list[np.ndarray]] = {}
    streams, admitted = {}, {}
    ready = {job.name: anyio.Event() for job in jobs}
    pending = list(jobs)

    def submit_due() -> None:
        for job in list(pending):
            if _due(job, streams):
                pending.remove(job)
                streams[job.name] = engine.submit(job.inputs.prompt_ids, job.params, **job.inputs.submit_kwargs())
                ready[job.name].set()

    def observe(plan, result) -> None:
        for job in jobs:
            stream = streams.get(job.name)
            if job.cancel_after is not None and stream and len(stream.request.output_ids) >= job.cancel_after:
                stream.cancel()
        sampled = plan.sampled_requests()
        if sampled:
            logits = runner.act.buffer.to_numpy(np.float32, (len(sampled), vocab), runner.act.logits)
            for request, row in zip(sampled, logits):
                rows.setdefault(request.request_id, []).append(row)
        for request in plan.admitted:
            admitted[request.request_id] = engine.metrics.steps
        if steps is not None:
            names = {s.request.request_id: name for name, s in streams.items()}
            steps.append(([names[r.request_id] for r in plan.decode],
                          [names[c.request.request_id] for c in plan.prefill]))
        submit_due()

    async def collect(job: Job, out: dict) -> None:
        await ready[job.name].wait()
        out[job.name] = await streams[job.name].collect()

    completions: dict = {}
    engine.step_observers.append(observe)
    try:
        with anyio.fail_after(timeout):
            async with anyio.create_task_group() as tg:
                await tg.start(engine.run)
                submit_due()
                async with anyio.create_task_group() as clients:
                    for job in jobs:
                        clients.start_soon(collect, job, completions)
                tg.cancel_scope.cancel()
    finally:
        engine.step_observers.remove(observe)
    out = {}
    for job in jobs:
        c, request = completions[job.name], streams[job.name].request
        got = rows.get(request.request_id, [])
        out[job.name] = Result(c.token_ids, np.stack(got) if got else np.zeros((0, vocab), np.float32),
                               c.finish_reason, c.error, request.slot, admitted.get(request.request_id),
                               request.num_cached)
    return out


def _due(job: Job, streams: dict) -> bool:
    if job.after_tokens is not None:
        name, count = job.after_tokens
        return name in streams and len(streams[name].request.output_ids) >= count
    if job.after_finish is not None:
        return job.after_finish in streams and streams[job.after_finish].request.finished
    return True


async def solo(make_engine, job: Job, **engine_shape) -> Result:
    """The job alone in a fresh engine of the given shape."""
    alone = Job(job.name, job.inputs, job.params)
    return (await drive(make_engine(**engine_shape), [alone]))[job.name]


def same_stream(a: Result, b: Result) -> bool:
    """Identical tokens and bit-identical logits at every sampled row."""
    return (a.tokens == b.tokens and a.logits.shape == b.logits.shape
            and np.array_equal(a.logits.view(np.uint32), b.logits.view(np.uint32)))
