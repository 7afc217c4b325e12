"""MTP drafting (nextn layers) and batch-MTP: exact streams, isolated drafts, and the negative control.

A tiny random-weight llama GGUF with one nextn layer is written by the test
(tests/engine/mtp_checkpoint.py), in F16 and with a Q4_0 head, and drafted
from with the full vocabulary and with a vocabulary subset. Random weights
make acceptance meaningless, so beyond exactness (every stream equals plain
decoding) the tests compare what matters for batch-MTP: a slot's drafts,
step by step, are the same alone and beside admissions, cancellations and
slot reuse — and change when the drafter's per-slot state is shared
(`debug_shared_slot`), while the tokens still do not.
"""

import pytest

from strata import _ffi
from strata.config import ConfigError, EngineConfig
from strata.engine.drafting.mtp import MtpDrafter
from strata.engine.engine import Engine
from strata.engine.sampling import SamplingParams

from .harness import Job, run_script, solo
from .mtp_checkpoint import write_mtp_gguf
from .spec_prompts import code_prompt

pytestmark = pytest.mark.exactness

VARIANTS = {"f16": ("F16", None), "q4_head": ("Q4_0", None), "vocab_subset": ("F16", 1024)}


@pytest.fixture(scope="module", params=list(VARIANTS))
def mtp_model(request, device, tmp_path_factory):
    from strata.models.loader import load_model

    dtype, subset = VARIANTS[request.param]
    path = write_mtp_gguf(tmp_path_factory.mktemp("mtp") / f"tiny-mtp-{dtype}.gguf", dtype)
    ctx = _ffi.Context(device)
    model = load_model(str(path), ctx)
    yield ctx, model, subset
    for engine in ENGINES:
        engine.runner.close()
    ENGINES.clear()
    model.close()
    ctx.close()


ENGINES: list = []          # closed before the module's context


def engine_for(ctx, model, device, batch, drafter_kw=None, chunk=16):
    backend = "cuda" if device.startswith("cuda") else "cpu"
    config = EngineConfig(model="tiny-mtp", device=device, batch=batch, chunk=chunk, ctx=512,
                          draft_max=4).resolve(backend, model.spec.ctx_train)
    drafter = None
    if drafter_kw is not None:
        drafter = MtpDrafter(ctx, model, batch, 512, config.chunk + batch * 5, 4, **drafter_kw)
    engine = Engine(ctx, model, config, drafter=drafter)
    ENGINES.append(engine)
    return engine


def record_drafts(engine) -> dict[str, list]:
    """request id -> [(cells computed, drafts)] of every proposal that reached verification."""
    log: dict[str, list] = {}
    speculator = engine.runner.speculator
    propose = speculator.propose

    def logged(decode):
        out = propose(decode)
        for request, drafts in out.items():
            log.setdefault(request.request_id, []).append((request.num_computed, tuple(drafts)))
        return out

    speculator.propose = logged
    return log


def jobs_for(model) -> list[Job]:
    tok = model.tokenizer
    code = code_prompt(tok)
    text = tok.encode("The quick brown fox jumps over the lazy dog. " * 3, add_special=False)
    g = dict(temperature=0, max_tokens=20, ignore_eos=True)
    s = dict(temperature=0.9, top_p=0.95, top_k=50, max_tokens=20, ignore_eos=True)
    return [
        Job(code, SamplingParams(**g), name="A"),
        Job(text, SamplingParams(**s, seed=1), at_step=2, name="B"),                      # A mid-prefill
        Job(code[:40], SamplingParams(**s, seed=2), at_step=6, cancel_after_tokens=3, name="C"),
        Job(text[:20], SamplingParams(**g), at_step=12, name="D"),                        # reuses C's slot
    ]


async def test_mtp_loads_and_refuses_models_without_it(mtp_model, make_engine):
    ctx, model, _ = mtp_model
    assert model.spec.n_nextn == 1 and model.spec.n_layers == 2
    assert model.weights.get("blk.2.nextn.eh_proj_e.weight") is not None
    with pytest.raises(ConfigError, match="multi-token-prediction"):
        make_engine(draft="mtp")            # the default model has no nextn layer


async def test_mtp_streams_equal_plain_and_drafts_are_isolated(mtp_model, device):
    ctx, model, subset = mtp_model
    jobs = jobs_for(model)
    plain = engine_for(ctx, model, device, 1, chunk=512)
    expected = [(await solo(plain, j.prompt, j.params)).token_ids for j in jobs]
    # each job alone with MTP: its drafts, step by step, are the isolation reference
    alone_drafts = {}
    for job, want in zip(jobs, expected):
        engine = engine_for(ctx, model, device, 3, {"vocab_subset": subset})
        log = record_drafts(engine)
        got = await solo(engine, job.prompt, job.params)
        if job.cancel_after_tokens is None:
            assert got.token_ids == want, f"{job.name} alone with MTP drafts diverged"
        alone_drafts[job.name] = next(iter(log.values()), [])
    # batch-MTP: staggered admission, a cancellation, slot reuse
    engine = engine_for(ctx, model, device, 3, {"vocab_subset": subset})
    log = record_drafts(engine)
    results, _ = await run_script(engine, jobs)
    for job, result, want in zip(jobs, results, expected):
        assert result.token_ids == want[: len(result.token_ids)], f"{job.name} with batch-MTP diverged"
        if job.cancel_after_tokens is None:
            assert len(result.token_ids) == len(want)
    drafted = engine.metrics.drafts.drafted.get("mtp", 0)
    assert drafted > 0
    if subset is not None:
        assert all(t < subset for entries in log.values() for _, d in entries for t in d)
    by_name = {r.request.request_id: j.name for j, r in zip(jobs, results)}
    for request_id, entries in log.items():
        name = by_name[request_id]
        reference = alone_drafts[name]
        if name == "C":                      # cancelled: a prefix of its solo proposals
            reference = reference[: len(entries)]
        assert entries == reference, f"{name}'s drafts changed beside other slots"


async def test_shared_drafter_state_changes_drafts_not_tokens(mtp_model, device):
    """The negative control: every request on one MTP slot's KV and table. Its drafts now depend on
    its neighbours (the isolation check above catches it); its tokens still equal plain decoding."""
    ctx, model, subset = mtp_model
    if subset is not None:
        pytest.skip("one variant is enough for the control")
    jobs = [j for j in jobs_for(model) if j.name in ("A", "B")]
    plain = engine_for(ctx, model, device, 1, chunk=512)
    expected = [(await solo(plain, j.prompt, j.params)).token_ids for j in jobs]
    logs = {}
    for shared in (None, 0):
        engine = engine_for(ctx, model, device, 3, {"debug_shared_slot": shared})
        log = record_drafts(engine)
        results, _ = await run_script(engine, jobs)
        assert [r.token_ids for r in results] == expected
        logs[shared] = {j.name: log.get(r.request.request_id) for j, r in zip(jobs, results)}
    assert logs[None]["A"] and logs[0]["A"]
    assert logs[None] != logs[0], "sharing the drafter's slot state left every draft unchanged"
