"""The layer split keeps Strata's promise: on any split, every stream equals its solo run on one device.

Two (and three) stages on the CPU are two (three) contexts in one process; on
the GPU two stages on cuda:0 twice exercise every path but peer access, and
cuda:0,cuda:1 runs when two GPUs are present. The references are solo runs on
one device (the folder's `loaded` model); the split engines run batched,
staggered, chunked, cancelled and reused requests. A negative control shows
that an incomplete hand-over between stages is caught.
"""

from __future__ import annotations

import dataclasses
import gc

import pytest

from strata import _ffi
from strata.config import PAGE_CELLS, ConfigError, EngineConfig
from strata.engine.engine import Engine
from strata.engine.host_cache import HostPage
from strata.engine.request import Request
from strata.engine.sampling import SamplingParams
from strata.models import batch_groups, split_decoder
from strata.models.layer_split import balanced_boundaries, check_boundaries, load_split_model, stage_tensors
from strata.models.model import ModelFormatError

from .drafters import OracleDrafter, WrongDrafter, ref_key
from .harness import Job, run_script, solo
from .prompts import CHAT_QUESTIONS, chat_prompt
from .spec_prompts import code_prompt, rewrite_prompt
from .test_exactness import GREEDY, prompts_of, seeded
from . import test_host_cache_exactness as host_tier
from .test_prefix_cache import GREEDY as CACHE_GREEDY, SEEDED as CACHE_SEEDED, next_user_turn, replay

pytestmark = pytest.mark.exactness


@pytest.fixture(scope="module")
def split_models(device, model_path):
    """split_models(boundaries) -> (ctx, model) split over len(boundaries)+1 contexts of `device`, kept per module."""
    held = {}

    def get(boundaries: tuple[int, ...]):
        if boundaries not in held:
            ctx = _ffi.Context(device)
            extra = (device,) * len(boundaries)
            held[boundaries] = (ctx, load_split_model(str(model_path), ctx, extra, boundaries))
        return held[boundaries]

    yield get
    gc.collect()
    for ctx, model in held.values():
        model.close()
        ctx.close()


@pytest.fixture
def make_split_engine(split_models, device, loaded):
    engines = []

    def make(boundaries=(13,), batch=3, chunk=16, drafter=None, **pool):
        """pool: kv_pages=, prefix_cache= (default: the pool of every slot full, cache on) and graphs=
        (default: on, decode graphs per stage)."""
        ctx, model = split_models(boundaries)
        backend = "cuda" if device.startswith("cuda") else "cpu"
        config = EngineConfig(device=device, devices=(device,) * (len(boundaries) + 1), layer_split=boundaries,
                              batch=batch, chunk=chunk, ctx=1024, max_queue=64, **pool).resolve(backend,
                                                                                                model.spec.ctx_train)
        engine = Engine(ctx, model, config, drafter=drafter)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        if engine.pool.host is not None:
            engine.pool.host.close()
        engine.runner.close()


SHORT = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)


def short_seeded(seed: int) -> SamplingParams:
    return SamplingParams(temperature=0.7, top_p=0.95, top_k=50, seed=seed, max_tokens=10, ignore_eos=True)


@pytest.fixture(scope="module")
def solo_cache():
    return {}


@pytest.fixture
def one_device_solo(make_engine, solo_cache, device):
    """one_device_solo(jobs) -> each job's tokens run alone on one device (cached per module)."""

    async def run(jobs: list[Job]) -> list[list[int]]:
        out = []
        for job in jobs:
            key = (device, tuple(job.prompt), job.params)
            if key not in solo_cache:
                solo_cache[key] = (await solo(make_engine(batch=1, chunk=512), job.prompt, job.params)).token_ids
            out.append(solo_cache[key])
        return out

    return run


@pytest.mark.parametrize("boundaries,n_jobs,graphs", [((13,), 4, True), ((13,), 4, False), ((5, 21), 2, True)],
                         ids=["2-stages-graphs", "2-stages-eager", "3-stages-graphs"])
async def test_split_batch_equals_one_device_solo(one_device_solo, make_split_engine, loaded, boundaries, n_jobs,
                                                  graphs):
    """Concurrent greedy and seeded requests of different lengths on the split equal solo on one device,
    decode steps replaying the per-stage graphs or run eagerly."""
    _, model = loaded
    prompts = prompts_of(model, n_jobs, long_every=4)
    jobs = [Job(p, SHORT if i % 2 == 0 else short_seeded(200 + i)) for i, p in enumerate(prompts)]
    expected = await one_device_solo(jobs)
    engine = make_split_engine(boundaries, batch=2, chunk=32, graphs=graphs)
    assert len(engine.runner.slots.parts) == len(boundaries) + 1
    results, steps = await run_script(engine, jobs)
    assert max(len(s.decode) + len({r for r, _, _ in s.prefill}) for s in steps) == 2     # really batched
    for job, result, want in zip(jobs, results, expected):
        assert result.token_ids == want, f"prompt of {len(job.prompt)} tokens diverged on split {boundaries}"
    captured = list(engine.runner.graphs.values())
    if graphs:      # decode steps really replayed per-stage graphs
        assert captured and all(isinstance(g, split_decoder.SplitGraph) and len(g.graphs) == len(boundaries) + 2
                                for g in captured)
    else:
        assert not captured


async def test_split_staggered_cancelled_and_reused(one_device_solo, make_split_engine, loaded):
    """Admitted mid-prefill and mid-decode (a prompt read in chunks of 7), one request cancelled in
    decode, its slot reused: every stream equals its solo run on one device."""
    _, model = loaded
    long_a = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[0], repeat_context=1)
    prompts = prompts_of(model, 4, long_every=5)
    jobs = [
        Job(long_a, SHORT, at_step=0, name="long, in chunks"),
        Job(prompts[1], short_seeded(7), at_step=2, name="during prefill"),
        Job(prompts[2], SHORT, cancel_after_tokens=3, name="cancelled in decode"),
        Job(prompts[3], short_seeded(13), at_step=12, name="reuse"),
    ]
    engine = make_split_engine((13,), batch=2, chunk=7)
    results, steps = await run_script(engine, jobs)
    expected = await one_device_solo(jobs)
    assert results[2].finish_reason == "cancelled"
    assert results[2].token_ids == expected[2][: len(results[2].token_ids)]
    for index in (0, 1, 3):
        assert results[index].token_ids == expected[index], f"{jobs[index].name} diverged on the split"
    assert any(s.prefill and s.decode for s in steps), "no step mixed a prefill chunk with decode rows"
    assert engine.scheduler.busy_slots == 0


async def test_negative_control_an_incomplete_hand_over_is_caught(one_device_solo, make_split_engine, loaded,
                                                                  monkeypatch):
    """If the hand-over to the next stage carried only the first row's hidden state, the other rows would
    run the later layers on stale activations: the same comparison as above must then fail."""
    _, model = loaded
    jobs = [Job(p, SHORT if i % 2 == 0 else short_seeded(300 + i))
            for i, p in enumerate(prompts_of(model, 4, long_every=4))][:2]
    expected = await one_device_solo(jobs)
    real = split_decoder.SplitDecoder._hand_over
    monkeypatch.setattr(split_decoder.SplitDecoder, "_hand_over",
                        lambda self, src, dst, n_rows: real(self, src, dst, min(n_rows, 1)))
    results, _ = await run_script(make_split_engine((13,), batch=2, chunk=32), jobs)
    assert any(result.token_ids != want for result, want in zip(results, expected))


async def test_negative_control_graphs_on_stale_step_inputs_are_caught(one_device_solo, make_split_engine, loaded,
                                                                       monkeypatch):
    """If the later stages' graphs replayed without this step's inputs copied to them (rows, positions
    and sample rows of an earlier step), the comparison must fail: the copy before each launch matters."""
    _, model = loaded
    jobs = [Job(p, SHORT if i % 2 == 0 else short_seeded(300 + i))
            for i, p in enumerate(prompts_of(model, 4, long_every=4))][:2]
    expected = await one_device_solo(jobs)

    def launch_without_inputs(self):
        d, last = self.decoder, self.act
        for index, graph in enumerate(self.graphs[:-1]):
            if index:
                _, sact = d.stages[index].buffers_for(self.io, d.spec)
                d._hand_over(last, sact, self.n_rows)
                last = sact
            graph.launch()
        d._logits_back(last, self.act, self.n_rows)
        self.graphs[-1].launch()

    monkeypatch.setattr(split_decoder.SplitGraph, "launch", launch_without_inputs)
    engine = make_split_engine((13,), batch=2, chunk=32)
    results, _ = await run_script(engine, jobs)
    assert engine.runner.graphs, "no decode graph ran"
    assert any(result.token_ids != want for result, want in zip(results, expected))


@pytest.mark.parametrize("boundaries,groups", [((13,), 2), ((5, 21), 3)], ids=["2-stages-2-groups",
                                                                                  "3-stages-3-groups"])
async def test_batch_groups_equal_one_device_solo(one_device_solo, make_split_engine, loaded, monkeypatch,
                                                  boundaries, groups):
    """The slots in groups pipelined over the stages: staggered greedy and seeded requests, a long prompt
    read in chunks beside decode rows, one cancelled and its slot reused, every stream equal to its solo
    run on one device; the steps really ran in several groups."""
    _, model = loaded
    long_a = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[0], repeat_context=1)
    prompts = prompts_of(model, 5, long_every=5)
    jobs = [Job(long_a, SHORT, at_step=0), Job(prompts[1], short_seeded(41), at_step=1),
            Job(prompts[2], SHORT, at_step=2, cancel_after_tokens=3), Job(prompts[3], short_seeded(43), at_step=3),
            Job(prompts[4], SHORT, at_step=14)]
    expected = await one_device_solo(jobs)
    used = []
    real = split_decoder.record_grouped

    def spy(decoder, io, act, slots, n_rows, *rest):
        used.append(len(set(batch_groups.group_of_slots(slots.n_slots, slots.groups)[io.rows[:n_rows, 0]])))
        return real(decoder, io, act, slots, n_rows, *rest)

    monkeypatch.setattr(split_decoder, "record_grouped", spy)
    engine = make_split_engine(boundaries, batch=4, chunk=16, batch_groups=groups)
    results, steps = await run_script(engine, jobs)
    assert results[2].finish_reason == "cancelled"
    assert results[2].token_ids == expected[2][: len(results[2].token_ids)]
    for index in (0, 1, 3, 4):
        assert results[index].token_ids == expected[index], f"job {index} diverged with {groups} groups"
    assert max(used) == groups, "no step ran in every group"
    assert not engine.runner.graphs


async def test_negative_control_group_logits_in_the_wrong_rows_are_caught(one_device_solo, make_split_engine,
                                                                          loaded, monkeypatch):
    """If a group's sampled rows pointed at the wrong rows of the group (here: in reverse order),
    requests would sample each other's logits: the comparison must fail."""
    _, model = loaded
    jobs = [Job(p, SHORT if i % 2 == 0 else short_seeded(500 + i)) for i, p in enumerate(prompts_of(model, 4))]
    expected = await one_device_solo(jobs)
    real = batch_groups.fill_group_io

    def unnumbered(gio, io, rows, logits):
        real(gio, io, rows, logits)
        gio.logit_idx[:len(logits)] = gio.logit_idx[:len(logits)][::-1].copy()
        gio.upload()

    monkeypatch.setattr(batch_groups, "fill_group_io", unnumbered)
    results, _ = await run_script(make_split_engine((13,), batch=4, chunk=32, batch_groups=2), jobs)
    assert any(result.token_ids != want for result, want in zip(results, expected))


@pytest.mark.parametrize("source,groups", [("oracle", 1), ("wrong", 1), ("oracle", 2), ("wrong", 2)])
async def test_split_with_drafts_equals_plain_solo(one_device_solo, make_split_engine, loaded, source, groups):
    """Speculative verification rows on the split, in one or two batch groups: all drafts accepted
    (oracle) or all rejected (wrong, so every stage's KV is truncated after each step), the tokens are
    plain decoding's on one device."""
    _, model = loaded
    long_greedy = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    long_seeded = SamplingParams(temperature=0.7, top_p=0.95, seed=17, max_tokens=16, ignore_eos=True)
    jobs = [Job(rewrite_prompt(model.tokenizer, model.chat_template), long_greedy),
            Job(code_prompt(model.tokenizer), long_seeded, at_step=2)]
    expected = await one_device_solo(jobs)
    references = {ref_key(job.prompt, job.params): want for job, want in zip(jobs, expected)}
    drafter = OracleDrafter(references) if source == "oracle" else WrongDrafter(references, model.spec.vocab)
    engine = make_split_engine((13,), batch=2, chunk=32, drafter=drafter, batch_groups=groups)
    results, _ = await run_script(engine, jobs)
    assert [result.token_ids for result in results] == expected
    drafted = engine.metrics.drafts.drafted.get(drafter.source, 0)
    accepted = engine.metrics.drafts.accepted.get(drafter.source, 0)
    assert drafted > 0, "nothing was drafted: the test would pass without verification rows"
    assert accepted == (drafted if source == "oracle" else 0)


async def test_split_prefix_cache_hits_equal_one_device_misses(make_split_engine, make_engine, loaded):
    """The paged pool is mirrored on every stage, so the prefix cache works on a split: conversations
    replayed turn by turn beside other traffic hit exactly the pages they should, and every stream
    equals its solo run on one device with the cache off. A cached page's bytes (the stages' layers
    one after the other) equal the same page on one device. Negative control: overwriting the chain's
    pages on the last stage only changes the tokens; `cache_prompt: false` ignores them and is exact."""
    _, model = loaded
    engine = make_split_engine((13,), batch=3, chunk=32)
    assert engine.pool.cache_on and engine.pool.n_pages == 3 * (1024 // PAGE_CELLS)
    prompts, outs = await replay(engine, model, turns=3)
    reference = make_engine(batch=1, chunk=512, prefix_cache=False)
    for turn, (turn_prompts, results) in enumerate(zip(prompts, outs)):
        for i, (prompt, result) in enumerate(zip(turn_prompts, results)):
            p = [CACHE_GREEDY, CACHE_GREEDY, CACHE_SEEDED][i]
            want = (await solo(reference, prompt, p)).token_ids
            assert result.token_ids == want, f"turn {turn} request {i} (cached {result.request.num_cached})"
    for turn in (1, 2):
        for conv in (0, 1):
            prev = len(prompts[turn - 1][2 * conv]) + len(outs[turn - 1][2 * conv].token_ids) - 1   # computed
            assert outs[turn][2 * conv].request.num_cached == PAGE_CELLS * (prev // PAGE_CELLS) > 0

    # The split's cached pages hold one device's bytes, in one device's layout (slot files rely on it).
    first = prompts[0][0]
    one = make_engine(batch=1, chunk=512)
    await solo(one, first, CACHE_GREEDY)
    split_chain = [entry.page for _, entry in engine.pool._lookup(Request(list(first), CACHE_GREEDY))]
    one_chain = [entry.page for _, entry in one.pool._lookup(Request(list(first), CACHE_GREEDY))]
    assert split_chain and len(split_chain) == len(one_chain)
    assert engine.runner.slots.page_bytes() == one.runner.slots.page_bytes()
    for a, b in zip(split_chain, one_chain):
        assert engine.runner.slots.read_page(a) == one.runner.slots.read_page(b)

    # Negative control on the last stage alone: its mirror of the pages is what its layers read.
    last, want = prompts[2][0], outs[2][0].token_ids
    chain = [entry.page for _, entry in engine.pool._lookup(Request(list(last), CACHE_GREEDY))]
    assert chain, "the last turn must hit the cache"
    stranger = next(e.page for e in engine.pool.cached.values() if e.page not in chain)
    for page in chain:
        engine.runner.slots.parts[-1].copy_page(page, stranger)
    corrupted = await solo(engine, last, CACHE_GREEDY)
    assert corrupted.request.num_cached > 0
    assert corrupted.token_ids != want, "a corrupted page on the last stage went unnoticed"
    fresh = await solo(engine, last, dataclasses.replace(CACHE_GREEDY, cache_prompt=False))
    assert fresh.request.num_cached == 0 and fresh.token_ids == want


async def test_split_host_tier_round_trip_equals_one_device(one_device_solo, make_split_engine, loaded):
    """The host tier of the prefix cache on a split: a conversation's cached pages, evicted from the
    mirrored pool to host memory (each page the stages' bytes one after the other) and written back
    to every stage on the next turn's hit, give the next turn exactly one device's tokens."""
    _, model = loaded
    engine = make_split_engine((13,), batch=3, chunk=32, kv_pages=host_tier.POOL_PAGES, host_cache=0.25)
    host = engine.pool.host
    assert host is not None and host.page_bytes == engine.runner.slots.page_bytes()
    first = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[0], repeat_context=1)
    answer = (await solo(engine, first, CACHE_GREEDY)).token_ids
    await host_tier.flush(engine, 1)
    chain = engine.pool._lookup(Request(list(first), CACHE_GREEDY))
    assert chain and all(isinstance(e, HostPage) for _, e in chain), "the pages should live in the host tier"
    follow = first + answer + next_user_turn(model, "Tell me more.")
    jobs = [Job(follow, CACHE_GREEDY), Job(follow, CACHE_SEEDED)]
    expected = await one_device_solo(jobs)
    results, _ = await run_script(engine, jobs)
    assert [r.token_ids for r in results] == expected
    assert results[0].request.num_cached == PAGE_CELLS * ((len(first) + len(answer) - 1) // PAGE_CELLS) > 0
    assert host.restored_tokens >= results[0].request.num_cached


async def test_split_short_pool_queues_and_stays_exact(one_device_solo, make_split_engine, loaded):
    """A pool of 7 pages mirrored on three stages: admission waits for pages (never more than two of
    these three-page requests at once), nothing is lost, every stream equals one device's solo run,
    and every stage's pool is whole again afterwards."""
    _, model = loaded
    prompts = [chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[i], repeat_context=1)
               for i in range(4)]
    jobs = [Job(p, CACHE_GREEDY if i % 2 else CACHE_SEEDED, at_step=i) for i, p in enumerate(prompts)]
    expected = await one_device_solo(jobs)
    engine = make_split_engine((5, 21), batch=4, chunk=32, kv_pages=7, prefix_cache=False)
    assert [engine.pool.pages_for(len(p), 24) for p in prompts] == [3] * 4
    results, steps = await run_script(engine, jobs)
    assert [r.token_ids for r in results] == expected
    assert max(len(set(s.decode) | {r for r, _, _ in s.prefill}) for s in steps) == 2
    assert engine.pool.num_free == 7
    assert [part.pages() for part in engine.runner.slots.parts] == [(7, 7)] * 3


# ---------------------------------------------------------------- two GPUs


@pytest.mark.gpu
@pytest.mark.skipif(_ffi.cuda_device_count() < 2, reason="needs two CUDA devices")
async def test_two_gpus_equal_one(model_path):
    """cuda:0,cuda:1 (peer-free: through host memory) against cuda:0 alone, batched, bit for bit."""
    single = Engine.create(EngineConfig(model=str(model_path), device="cuda:0", batch=1, ctx=1024, chunk=512))
    split = Engine.create(EngineConfig(model=str(model_path), devices=("cuda:0", "cuda:1"), batch=4, ctx=1024,
                                       chunk=64))
    try:
        prompts = prompts_of(single.model, 6)
        jobs = [Job(p, GREEDY if i % 2 == 0 else seeded(400 + i)) for i, p in enumerate(prompts)]
        expected = [(await solo(single, job.prompt, job.params)).token_ids for job in jobs]
        results, _ = await run_script(split, jobs)
        assert [r.token_ids for r in results] == expected
    finally:
        split.close()
        single.close()


# ---------------------------------------------------------------- boundaries and settings (no model)


def test_boundaries_are_checked():
    assert check_boundaries((12, 24), 30, 3) == (12, 24)
    for bad, count in [((12,), 3), ((0,), 2), ((30,), 2), ((12, 12), 3), ((20, 10), 3)]:
        with pytest.raises(ModelFormatError, match="--layer-split"):
            check_boundaries(bad, 30, count)


class _T:
    def __init__(self, nbytes):
        self.nbytes = nbytes


def test_balanced_boundaries_follow_the_weight_bytes():
    layers = {f"blk.{i}.w": _T(100) for i in range(8)}
    assert balanced_boundaries({**layers, "token_embd.weight": _T(0), "output.weight": _T(0)}, 8, 2) == (4,)
    # A heavy embedding on the first stage pushes layers to the second; every stage keeps a layer.
    heavy = {**layers, "token_embd.weight": _T(1000), "output.weight": _T(0)}
    assert balanced_boundaries(heavy, 8, 2) == (1,)
    assert balanced_boundaries(heavy, 8, 4) == (1, 2, 4)          # stages of 1100, 100, 200, 400 bytes
    with pytest.raises(ModelFormatError):
        balanced_boundaries(layers | {"token_embd.weight": _T(0)}, 8, 9)


def test_the_mirrored_pool_is_sized_by_the_tightest_device():
    """pool_fit: the device with the least free bytes per layer of KV decides; stages on one device
    count together against its memory."""
    from types import SimpleNamespace as NS

    def stage(device, free, n_layers):
        ctx = NS(device=device, info=lambda: NS(free_bytes=free))
        return NS(ctx=ctx, decoder=NS(spec=NS(n_layers=n_layers)))

    def fit(*stages):
        decoder = split_decoder.SplitDecoder.__new__(split_decoder.SplitDecoder)
        decoder.spec, decoder.stages = _spec(sum(st.decoder.spec.n_layers for st in stages)), list(stages)
        spec, free = decoder.pool_fit()
        return spec.n_layers, free

    assert fit(stage("cuda:0", 1000, 10), stage("cuda:1", 600, 20)) == (20, 600)     # 30 vs 100 per layer
    assert fit(stage("cuda:0", 1000, 10), stage("cuda:1", 3000, 20)) == (10, 1000)
    assert fit(stage("cpu", 900, 10), stage("cpu", 900, 20)) == (30, 900)           # one memory, all layers


def _spec(n_layers):
    from strata.models.spec import ModelSpec

    fields = {f.name: 2 for f in dataclasses.fields(ModelSpec) if f.default is dataclasses.MISSING}
    return ModelSpec(**{**fields, "n_layers": n_layers})


def test_stage_tensors_hold_only_their_layers():
    tensors = {"token_embd.weight": 1, "output_norm.weight": 2, "output.weight": 3, "rope_freqs.weight": 4,
               **{f"blk.{i}.attn_qkv.weight": 10 + i for i in range(4)}}
    first = stage_tensors(tensors, 0, 2, True, False, tied=False)
    last = stage_tensors(tensors, 2, 4, False, True, tied=False)
    assert first == {"token_embd.weight": 1, "rope_freqs.weight": 4, "blk.0.attn_qkv.weight": 10,
                     "blk.1.attn_qkv.weight": 11}
    assert last == {"output_norm.weight": 2, "output.weight": 3, "rope_freqs.weight": 4,
                    "blk.0.attn_qkv.weight": 12, "blk.1.attn_qkv.weight": 13}
    tied_last = stage_tensors({k: v for k, v in tensors.items() if k != "output.weight"}, 2, 4, False, True, tied=True)
    assert "token_embd.weight" in tied_last


@pytest.mark.parametrize("settings,message", [
    ({"layer_split": (12,)}, "--layer-split needs --devices"),
    ({"devices": ("cpu",)}, "2 to 16 devices"),
    ({"devices": ("cpu", "cuda:0")}, "one backend"),
    ({"devices": ("cpu", "cpu"), "device": "cuda:0"}, "disagrees"),
    ({"devices": ("cpu", "cpu"), "draft": "mtp"}, "--draft mtp"),
    ({"devices": ("cpu", "cpu"), "layer_split": (12, 20)}, "1 rising layer numbers"),
    ({"devices": ("cpu", "cpu", "cpu"), "layer_split": (20, 12)}, "2 rising layer numbers"),
    ({"batch_groups": 2}, "--batch-groups needs --devices"),
    ({"devices": ("cpu", "cpu"), "batch_groups": 0}, "whole number >= 1"),
    ({"devices": ("cpu", "cpu"), "batch_groups": 5, "batch": 4}, "more than the 4 slots"),
])
def test_split_settings_are_checked(settings, message):
    with pytest.raises(ConfigError, match=message):
        EngineConfig(**settings).check()


def test_a_split_keeps_graphs_unless_turned_off():
    assert EngineConfig(devices=("cpu", "cpu")).resolve("cpu", 2048).graphs is True
    assert EngineConfig(devices=("cpu", "cpu"), graphs=False).resolve("cpu", 2048).graphs is False
    assert EngineConfig(devices=("cpu", "cpu"), batch_groups=2).resolve("cpu", 2048).graphs is False   # eager


def test_cli_parses_the_split_flags():
    from strata.cli import build_parser

    args = build_parser().parse_args(["serve", "--devices", "cuda:0,cuda:1", "--layer-split", "14",
                                      "--batch-groups", "2"])
    assert args.devices == ("cuda:0", "cuda:1") and args.layer_split == (14,) and args.batch_groups == 2
    for bad in (["--devices", "cuda:0"], ["--layer-split", "a,b"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", *bad])
