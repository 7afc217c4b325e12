"""Strata's promise on Gemma 3 270M: batched, staggered and chunked streams equal their solo runs.

Gemma adds the sliding window (local layers see each row's last 512 cells),
so the long prompts here run past the window and keep decoding beyond it:
requests are admitted mid-prefill and mid-decode beside each other, read in
chunks of 7, 64 and 512, and every token stream must be bit-identical to the
same request run alone. The window itself is shown to matter (and to be
per-row) by tests/kernels/test_gemma_kernels.py.
"""

import gc

import pytest

from strata import _ffi
from strata.config import EngineConfig
from strata.engine.engine import Engine
from strata.engine.sampling import SamplingParams

from .harness import Job, run_script, solo
from .prompts import CHAT_QUESTIONS, LONG_TEXT, chat_prompt

pytestmark = [pytest.mark.exactness, pytest.mark.slow]

WINDOW = 512
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def seeded(seed: int) -> SamplingParams:
    return SamplingParams(temperature=0.8, top_p=0.95, top_k=40, seed=seed, max_tokens=12, ignore_eos=True)


def _devices():
    devices = ["cpu"]
    if _ffi.cuda_device_count() > 0:
        devices.append(pytest.param("cuda:0", marks=pytest.mark.gpu))
    return devices


@pytest.fixture(scope="module", params=_devices())
def gemma(request):
    from strata.model_store import ModelStoreError, resolve_model
    from strata.models.loader import load_model

    try:
        path = resolve_model("gemma3-270m")
    except ModelStoreError as exc:
        pytest.skip(f"Gemma 3 270M is not in the cache ({exc}); run `strata models fetch gemma3-270m`")
    ctx = _ffi.Context(request.param)
    model = load_model(str(path), ctx)
    yield request.param, ctx, model
    gc.collect()
    model.close()
    ctx.close()


@pytest.fixture
def make_engine(gemma):
    device, ctx, model = gemma
    engines = []

    def make(batch=2, chunk=64, ctx_len=1024):
        backend = "cuda" if device.startswith("cuda") else "cpu"
        config = EngineConfig(model="gemma3-270m", device=device, batch=batch, chunk=chunk, ctx=ctx_len,
                              graphs=True, max_queue=16).resolve(backend, model.spec.ctx_train)
        engine = Engine(ctx, model, config)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.runner.close()


@pytest.fixture(scope="module")
def prompts(gemma):
    _, _, model = gemma
    long_a = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[0], repeat_context=6)
    long_b = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[6], repeat_context=7)
    short_c = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[4])
    short_d = model.tokenizer.encode(LONG_TEXT[:200])
    assert WINDOW < len(long_a) < len(long_b) < 1000 - GREEDY.max_tokens, (len(long_a), len(long_b))
    return long_a, long_b, short_c, short_d


@pytest.fixture(scope="module")
def solo_cache():
    return {}


async def solo_of(make_engine, solo_cache, prompt, params):
    key = (tuple(prompt), params.seed, params.temperature)
    if key not in solo_cache:
        solo_cache[key] = (await solo(make_engine(batch=1, chunk=512), prompt, params)).token_ids
    return solo_cache[key]


async def test_staggered_batch_past_the_window(make_engine, prompts, solo_cache):
    """Two prompts longer than the window and two short ones, admitted at different steps into three
    slots (mid-prefill and mid-decode): every stream equals its solo run."""
    long_a, long_b, short_c, short_d = prompts
    jobs = [Job(long_a, GREEDY, at_step=0, name="A"), Job(short_c, seeded(3), at_step=2, name="C"),
            Job(long_b, seeded(5), at_step=5, name="B"), Job(short_d, GREEDY, at_step=12, name="D")]
    expected = [await solo_of(make_engine, solo_cache, job.prompt, job.params) for job in jobs]
    results, steps = await run_script(make_engine(batch=3, chunk=64), jobs)
    assert any(s.prefill and s.decode for s in steps), "no step mixed prefill and decode"
    for job, result, want in zip(jobs, results, expected):
        assert result.token_ids == want, f"request {job.name} ({len(job.prompt)} tokens) diverged from its solo run"


@pytest.mark.parametrize("chunk", [7, 64])
async def test_chunk_invariance_past_the_window(make_engine, prompts, solo_cache, chunk):
    """A prompt longer than the window read in chunks of 7 or 64 equals the one-chunk run (512)."""
    long_a = prompts[0]
    want = await solo_of(make_engine, solo_cache, long_a, seeded(9))
    got = await solo(make_engine(batch=1, chunk=chunk), long_a, seeded(9))
    assert got.token_ids == want
