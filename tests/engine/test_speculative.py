"""Speculative decoding never changes a token: every stream with drafting equals plain decoding.

For each draft source (suffix lookup, a draft model — the default model
drafting for itself —, an oracle replaying the plain output and a drafter
that is always wrong), greedy and seeded top-p/top-k: each request alone,
and batched with staggered admission, cancellation and slot reuse, gives the
plain solo run's tokens bit for bit. The oracle's drafts are all accepted
and the wrong drafter's none, so verification really ran both ways.
"""

import pytest

from strata.engine.drafting.accept import accepted_run
from strata.engine.drafting.suffix import SuffixDrafter
from strata.engine.drafting.suffix_index import SuffixIndex
from strata.engine.sampling import SamplingParams

from .drafters import OracleDrafter, WrongDrafter, ref_key
from .harness import Job, run_script, solo
from .prompts import CHAT_QUESTIONS, chat_prompt
from .spec_prompts import code_prompt, rewrite_prompt

pytestmark = pytest.mark.exactness

MAX_TOKENS = 24


def greedy(**kw) -> SamplingParams:
    kw.setdefault("max_tokens", MAX_TOKENS)
    return SamplingParams(temperature=0, ignore_eos=True, **kw)


def seeded(seed: int, **kw) -> SamplingParams:
    kw.setdefault("max_tokens", MAX_TOKENS)
    return SamplingParams(temperature=0.8, top_p=0.9, top_k=40, seed=seed, ignore_eos=True, **kw)


# ---------------------------------------------------------------- the rule and the index (pure)


def test_accepted_run():
    assert accepted_run([], [7]) == [7]
    assert accepted_run([1, 2, 3], [1, 2, 3, 4]) == [1, 2, 3, 4]          # all accepted + bonus
    assert accepted_run([1, 2, 3], [1, 9, 3, 4]) == [1, 9]                 # first differing sample kept
    assert accepted_run([1, 2, 3], [5, 2, 3, 4]) == [5]
    with pytest.raises(ValueError):
        accepted_run([1, 2], [1, 2])


def test_suffix_index_against_brute_force():
    import random

    rng = random.Random(0)

    def brute(t):
        for length in range(len(t) - 1, 0, -1):
            for end in range(length - 1, len(t) - 1):
                if t[end - length + 1: end + 1] == t[len(t) - length:]:
                    return length, end
        return 0, -1

    for _ in range(200):
        index, tokens = SuffixIndex(), []
        for _ in range(rng.randint(1, 50)):
            tokens.append(rng.randint(0, 3))
            index.extend(tokens[-1:])
            assert index.longest_repeat() == brute(tokens)
    index = SuffixIndex()
    index.extend([5, 6, 7, 8, 9, 5, 6])
    assert index.draft(2, min_match=2) == [7, 8]
    assert index.draft(2, min_match=3) == []


# ---------------------------------------------------------------- exactness per draft source


@pytest.fixture(scope="module")
def plain_cache():
    return {}


def spec_jobs(model) -> list[Job]:
    tok, tpl = model.tokenizer, model.chat_template
    rewrite, code = rewrite_prompt(tok, tpl), code_prompt(tok)
    chat = [chat_prompt(tok, tpl, q) for q in CHAT_QUESTIONS[:3]]
    return [
        Job(rewrite, greedy(), at_step=0, name="rewrite greedy"),
        Job(code, seeded(21), at_step=3, name="code seeded"),                     # during the first prefill
        Job(chat[0], seeded(22), at_step=5, cancel_after_tokens=6, name="cancelled"),
        Job(rewrite, seeded(23), at_step=9, name="rewrite seeded"),               # beside decoding slots
        Job(chat[1], greedy(), at_step=12, name="reuse greedy"),                   # into a freed slot
        Job(code, greedy(), at_step=14, name="code greedy"),
    ]


async def plain_references(make_engine, jobs, cache) -> list[list[int]]:
    """Each job alone on a plain engine (no drafting): the tokens every other run must equal."""
    engine = None
    out = []
    for job in jobs:
        key = (tuple(job.prompt), job.params)
        if key not in cache:
            engine = engine or make_engine(batch=1, chunk=512)
            cache[key] = (await solo(engine, job.prompt, job.params)).token_ids
        out.append(cache[key])
    return out


def make_drafter(source, loaded, references):
    ctx, model = loaded
    if source == "suffix":
        return SuffixDrafter()
    if source == "oracle":
        return OracleDrafter(references)
    if source == "wrong":
        return WrongDrafter(references, model.spec.vocab)
    if source == "model":
        from strata.engine.drafting.draft_model import ModelDrafter

        return ModelDrafter(ctx, model, batch=3, ctx_len=1024, chunk=64)
    raise ValueError(source)


def by_key(jobs, expected) -> dict:
    return {ref_key(job.prompt, job.params): want for job, want in zip(jobs, expected)}


SOURCES = ["suffix", "model", "oracle", "wrong"]


@pytest.mark.parametrize("source", SOURCES)
async def test_batched_staggered_equals_plain(make_engine, loaded, source, plain_cache):
    """Staggered admission mid-prefill and mid-decode, a cancellation, slot reuse: every stream
    equals its plain solo run, and verification rows shared steps with prefill chunks."""
    _, model = loaded
    jobs = spec_jobs(model)
    expected = await plain_references(make_engine, jobs, plain_cache)
    drafter = make_drafter(source, loaded, by_key(jobs, expected))
    engine = make_engine(batch=3, chunk=16, drafter=drafter, draft_max=4)
    runs: list[tuple[bool, int]] = []          # (step had prefill rows, longest kept run)
    engine.step_observers.append(lambda plan, result: runs.append(
        (bool(plan.prefill), max((len(t) for t in result.tokens), default=0))))
    results, _ = await run_script(engine, jobs)
    for job, result, want in zip(jobs, results, expected):
        if job.cancel_after_tokens is not None:
            assert result.finish_reason == "cancelled"
            assert result.token_ids == want[: len(result.token_ids)], f"{job.name} diverged before its cancel"
        else:
            assert result.finish_reason == "length"
            assert result.token_ids == want, f"{job.name} diverged from plain decoding with {source} drafts"
    counts = engine.metrics.drafts
    drafted, accepted = counts.drafted.get(drafter.source, 0), counts.accepted.get(drafter.source, 0)
    assert drafted > 0, "nothing was drafted: the test would pass without verification"
    if source in ("oracle", "model"):
        assert accepted == drafted, f"{source} drafts equal plain decoding's tokens, all must be accepted"
    elif source == "wrong":
        assert accepted == 0
    else:
        assert 0 < accepted < drafted
    if source != "wrong":
        assert any(prefill and longest > 1 for prefill, longest in runs), \
            "no step verified drafts beside a prefill chunk"
    assert engine.scheduler.busy_slots == 0 and sorted(engine.scheduler.free_slots) == [0, 1, 2]


@pytest.mark.parametrize("source", ["suffix", "model"])
@pytest.mark.parametrize("graphs", [True, False])
async def test_alone_equals_plain(make_engine, loaded, source, graphs, plain_cache):
    """Each request alone with drafting (graphs and eager) equals plain decoding, greedy and seeded."""
    _, model = loaded
    jobs = [j for j in spec_jobs(model) if j.cancel_after_tokens is None][:4]
    expected = await plain_references(make_engine, jobs, plain_cache)
    engine = make_engine(batch=1, chunk=64, graphs=graphs, drafter=make_drafter(source, loaded, {}), draft_max=6)
    for job, want in zip(jobs, expected):
        got = await solo(engine, job.prompt, job.params)
        assert got.token_ids == want, f"{job.name} alone with {source} drafts diverged"
    assert engine.metrics.drafts.accepted.get(source, 0) > 0


# ---------------------------------------------------------------- ends inside an accepted run


async def test_stops_inside_accepted_runs(make_engine, loaded, plain_cache):
    """A stop string, a stop token, EOS and max_tokens met inside an oracle's fully accepted run end
    the request exactly as plain decoding does: same tokens, same text, same finish reason."""
    _, model = loaded
    prompt = rewrite_prompt(model.tokenizer, model.chat_template)
    base = greedy(max_tokens=64)
    reference = (await plain_references(make_engine, [Job(prompt, base)], plain_cache))[0]
    text = model.tokenizer.decode(reference[:40], skip_special=True)
    eos = [i for i, t in enumerate(reference) if t in model.tokenizer.eos_ids]
    variants = {
        "stop string": SamplingParams(temperature=0, max_tokens=64, stop=(text[len(text) // 2: len(text) // 2 + 7],)),
        "stop token": SamplingParams(temperature=0, max_tokens=64, ignore_eos=True, stop_token_ids=(reference[17],)),
        "max_tokens": SamplingParams(temperature=0, max_tokens=13, ignore_eos=True),
    }
    if eos:
        variants["eos"] = SamplingParams(temperature=0, max_tokens=64)
    plain = make_engine(batch=1, chunk=128)
    oracle = OracleDrafter({})
    engine = make_engine(batch=1, chunk=128, drafter=oracle, draft_max=8)
    kept = []
    engine.step_observers.append(lambda plan, result: kept.extend(len(t) for t in result.tokens[: len(plan.decode)]))
    for name, params in variants.items():
        want = await solo(plain, prompt, params)
        oracle.references = {ref_key(prompt, params): reference}
        kept.clear()
        got = await solo(engine, prompt, params)
        assert (got.token_ids, got.text, got.finish_reason) == (want.token_ids, want.text, want.finish_reason), name
        assert want.finish_reason == ("length" if name == "max_tokens" else "stop")
        assert 1 + sum(kept) > len(got.token_ids) or name == "max_tokens", f"{name} did not end inside a run"
        assert max(kept) > 1


async def test_request_opts_out(make_engine, loaded, plain_cache):
    """`speculative: false` keeps a request from drafting; a neighbour still drafts; both are exact."""
    _, model = loaded
    prompt = rewrite_prompt(model.tokenizer, model.chat_template)
    jobs = [Job(prompt, greedy(speculative=False), name="off"), Job(prompt, seeded(23), name="on")]
    expected = await plain_references(make_engine, jobs, plain_cache)
    engine = make_engine(batch=2, chunk=64, drafter=SuffixDrafter(), draft_max=4)
    results, _ = await run_script(engine, jobs)
    assert [r.token_ids for r in results] == expected
    off, on = (r.request for r in results)
    assert off.num_drafted == 0 and on.num_drafted > 0 and on.num_draft_accepted > 0


async def test_draft_model_flag(make_engine, loaded, tmp_path, plain_cache):
    """`--draft model --draft-model FILE`: a small same-tokenizer GGUF drafts (badly: random weights)
    and the stream is still plain decoding's; a draft model with another vocabulary is refused."""
    from strata.config import ConfigError

    from .mtp_checkpoint import write_mtp_gguf

    _, model = loaded
    job = Job(rewrite_prompt(model.tokenizer, model.chat_template), seeded(31))
    expected = await plain_references(make_engine, [job], plain_cache)
    path = write_mtp_gguf(tmp_path / "draft.gguf", nextn=False)
    engine = make_engine(batch=1, chunk=64, draft="model", draft_model=str(path), draft_max=3)
    got = await solo(engine, job.prompt, job.params)
    assert got.token_ids == expected[0]
    assert engine.metrics.drafts.drafted.get("model", 0) > 0
    other = write_mtp_gguf(tmp_path / "other.gguf", nextn=False, vocab=1000)
    with pytest.raises(ConfigError, match="vocabulary"):
        make_engine(batch=1, draft="model", draft_model=str(other))


async def test_logprobs_with_drafting(make_engine, loaded):
    """Logprobs of tokens kept from verification rows equal plain decoding's, value for value."""
    _, model = loaded
    prompt = rewrite_prompt(model.tokenizer, model.chat_template)
    params = greedy(logprobs=True, top_logprobs=3)
    want = await solo(make_engine(batch=1, chunk=128), prompt, params)
    engine = make_engine(batch=1, chunk=128, drafter=SuffixDrafter(), draft_max=4)
    got = await solo(engine, prompt, params)
    assert got.token_ids == want.token_ids and len(got.logprobs) == len(want.logprobs) == MAX_TOKENS
    assert [(lp.token_id, lp.logprob, lp.top) for lp in got.logprobs] == \
        [(lp.token_id, lp.logprob, lp.top) for lp in want.logprobs]
    assert engine.metrics.drafts.accepted.get("suffix", 0) > 0
