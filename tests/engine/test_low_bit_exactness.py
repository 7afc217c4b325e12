"""Strata's promise on the low-bit weight types: Q2_K, Q3_K and IQ3_S models give every request
the tokens it gets alone.

Tiny random-weight llama files written by `strata synth --pure` hold every matrix (the
embedding and output included) in one of the three types, so the engine's embedding gather
and every matmul of a step run the new decoders. Requests are admitted mid-prefill and
mid-decode beside each other, greedy and seeded, prompts read in chunks of 8, and each
stream must equal its solo run bit for bit. The streams must also differ from each other:
a model whose decoders produced zeros or constants would make every stream trivially "equal".
"""

import gc

import pytest

from strata import _ffi
from strata.config import EngineConfig
from strata.engine.engine import Engine
from strata.engine.sampling import SamplingParams

from .harness import Job, run_script, solo

pytestmark = [pytest.mark.exactness]

GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)


def seeded(seed: int) -> SamplingParams:
    return SamplingParams(temperature=0.9, top_k=50, seed=seed, max_tokens=10, ignore_eos=True)


def _devices():
    devices = ["cpu"]
    if _ffi.cuda_device_count() > 0:
        devices.append(pytest.param("cuda:0", marks=pytest.mark.gpu))
    return devices


@pytest.fixture(scope="module", params=["Q2_K", "Q3_K_M", "IQ3_S"])
def low_bit_file(request, tmp_path_factory):
    from strata.synth.shapes import SynthError
    from strata.synth.tokenizer import find_tokenizer_gguf
    from strata.synth.writer import write_llama_gguf

    try:
        find_tokenizer_gguf()
    except SynthError as exc:
        pytest.skip(f"no tokenizer GGUF for strata synth: {exc}")
    path = tmp_path_factory.mktemp("low_bit") / f"tiny-{request.param}.gguf"
    return write_llama_gguf(path, "tiny", request.param, seed=7, pure=True).path


@pytest.fixture(scope="module", params=_devices())
def loaded(request, low_bit_file):
    from strata.models.loader import load_model

    ctx = _ffi.Context(request.param)
    model = load_model(str(low_bit_file), ctx)
    yield request.param, ctx, model
    gc.collect()
    model.close()
    ctx.close()


@pytest.fixture
def make_engine(loaded):
    device, ctx, model = loaded
    engines = []

    def make(batch, chunk):
        backend = "cuda" if device.startswith("cuda") else "cpu"
        config = EngineConfig(model="low-bit", device=device, batch=batch, chunk=chunk, ctx=256,
                              graphs=True, max_queue=8).resolve(backend, model.spec.ctx_train)
        engine = Engine(ctx, model, config)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.runner.close()


async def test_staggered_streams_equal_their_solo_runs(loaded, make_engine):
    _, _, model = loaded
    tok = model.tokenizer.encode
    prompts = [tok("The quick brown fox jumps over the lazy dog. " * 3), tok("Once upon a time"),
               tok("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12"), tok("Hello")]
    jobs = [Job(prompts[0], GREEDY, at_step=0, name="A"), Job(prompts[1], seeded(3), at_step=1, name="B"),
            Job(prompts[2], GREEDY, at_step=4, name="C"), Job(prompts[3], seeded(11), at_step=7, name="D")]
    expected = [(await solo(make_engine(batch=1, chunk=64), job.prompt, job.params)).token_ids for job in jobs]
    results, steps = await run_script(make_engine(batch=3, chunk=8), jobs)
    assert any(s.prefill and s.decode for s in steps), "no step mixed prefill and decode"
    for job, result, want in zip(jobs, results, expected):
        assert result.token_ids == want, f"request {job.name} ({len(job.prompt)} tokens) diverged from its solo run"
    assert len({tuple(t) for t in expected}) == len(expected), f"streams are degenerate: {expected}"
