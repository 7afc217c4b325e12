"""Image pages in the prefix cache keep Strata's promise: a hit gives the stream of a miss, bit for bit.

Pages that hold image rows, or text at M-RoPE positions shifted by an image,
are keyed by their token ids and their salt (strata/engine/page_salt.py: the
positions and the image embedding rows they hold). Checked here on the tiny
Qwen2.5-VL, tokens and every sampled row's logits:

- two three-turn image conversations (greedy and seeded, two pictures of one
  size, so the same token ids) replayed with a text request beside them
  equal cache-less solo runs; each later turn maps its whole computed
  prefix (image pages, text after the image, the previous answer), and the
  two conversations share only their first, plain text page;
- the same ids with another picture never map the first picture's pages,
  also when the page keys are forced to collide (the stored salt refuses);
  negative control: without salts the second picture maps the first one's
  pages and its stream changes;
- image pages evicted to the host tier come back exact (negative control:
  corrupted host pages change the stream);
- a slot file of an image conversation, saved while part of it sits in the
  host tier, restored into a fresh engine, serves the next turn exactly
  (negative control: a corrupted file changes the stream), and its image
  page never serves another picture.

Each conversation turn is built as a client would send it again: the
previous prompt, the answer, the end of the turn and the new user message,
every image encoded anew, positions computed over the whole conversation.
"""

from __future__ import annotations

import dataclasses
import json
import struct

import numpy as np
import pytest

from strata.config import PAGE_CELLS
from strata.engine import kv_pool, slot_files
from strata.engine.host_cache import HostPage
from strata.engine.page_salt import row_digests
from strata.engine.request import Request, VisionInput
from strata.engine.sampling import SamplingParams
from strata.inputs import EngineInput
from strata.vision.mrope import mrope_positions

from .harness import GREEDY, Job, drive, encode, picture, same_stream, user

pytestmark = pytest.mark.exactness

LEAD = "Here is a photograph from my holiday last summer by the sea, near the old harbour wall: "
X, Y, Z = picture(224, 224, 5), picture(224, 224, 6), picture(200, 90, 7)    # X and Y: one size, same pad ids
TURNS = [(LEAD, "{image}", " what is in it?"), ("and what colour is the sky there?",),
         ("compare it with this one: ", Z, " please")]
GREEDY_T = dataclasses.replace(GREEDY, max_tokens=20)
SEEDED_T = SamplingParams(temperature=0.8, top_p=0.95, seed=21, max_tokens=20, ignore_eos=True)
SPECIAL = 151643            # the tiny tokenizer's special ids start here (tiny_checkpoint.py)


@dataclasses.dataclass
class Conversation:
    image: object
    images: list = dataclasses.field(default_factory=list)
    inputs: EngineInput | None = None

    async def next(self, engine, turn: int, answer: list[int] | None = None) -> EngineInput:
        """The prompt of turn `turn`: the conversation so far, the answer, and the next user message."""
        parts = [self.image if p == "{image}" else p for p in TURNS[turn]]
        self.images += [p for p in parts if not isinstance(p, str)]
        ids = (await encode(engine, [user(*parts)])).prompt_ids
        if self.inputs is not None:
            assert all(t < SPECIAL for t in answer), "a special id in an answer would end or break the turn"
            ids = self.inputs.prompt_ids + answer + engine.tokenizer.encode("<|im_end|>\n", add_special=False) + ids
        self.inputs = await conversation_input(engine, ids, self.images)
        return self.inputs


async def conversation_input(engine, ids: list[int], images: list) -> EngineInput:
    """ids with their images encoded anew and positions over the whole prompt (what a fresh chat prompt gets)."""
    spec = engine.model.vision.spec
    encoded = [(await encode(engine, [user(image)])).vision for image in images]
    grids = [v.grids[0] for v in encoded]
    mrope = mrope_positions(ids, grids, image_pad_id=spec.image_pad_id, vision_start_id=spec.vision_start_id,
                            spatial_merge_size=spec.merge_size)
    rows = np.flatnonzero(np.asarray(ids) == spec.image_pad_id).astype(np.int32)
    embeddings = np.concatenate([v.embeddings for v in encoded])
    vision = VisionInput(embeddings, rows, tuple(grids), row_digests(embeddings))     # as inputs/images.py does
    return EngineInput(ids, mrope.positions, mrope.rope_delta, vision)


def computed_pages(inputs: EngineInput, result) -> int:
    """Tokens of the full pages a finished request leaves cached (prompt + answer, the last token not computed)."""
    return PAGE_CELLS * ((len(inputs.prompt_ids) + len(result.tokens) - 1) // PAGE_CELLS)


def first_image_row(inputs: EngineInput) -> int:
    return int(inputs.vision.token_rows[0])


async def alone(reference, job: Job):
    return (await drive(reference, [Job(job.name, job.inputs, job.params)]))[job.name]


async def test_image_conversations_hit_and_equal_cacheless_runs(make_engine):
    engine = make_engine(batch=3, chunk=16, ctx_len=1024)
    reference = make_engine(batch=1, chunk=512, ctx_len=1024, prefix_cache=False)
    convs = {"a": Conversation(X), "b": Conversation(Y)}
    params = {"a": GREEDY_T, "b": SEEDED_T}
    inputs = {name: await conv.next(engine, 0) for name, conv in convs.items()}
    assert inputs["a"].prompt_ids == inputs["b"].prompt_ids and first_image_row(inputs["a"]) >= PAGE_CELLS
    previous = {}
    for turn in range(3):
        text = await encode(engine, [user(f"an unrelated question number {turn}, about the weather")])
        jobs = [Job("a", inputs["a"], GREEDY_T), Job("text", text, GREEDY_T, after_tokens=("a", 1)),
                Job("b", inputs["b"], SEEDED_T, after_tokens=("a", 3))]
        got = await drive(engine, jobs)
        for job in jobs:
            assert got[job.name].error is None, got[job.name].error
            assert same_stream(got[job.name], await alone(reference, job)), f"turn {turn}: {job.name} differs"
        if turn == 0:
            # b's first page is plain text (a's, shared); its second holds other image rows than a's.
            assert got["a"].num_cached == 0 and got["b"].num_cached == PAGE_CELLS
        else:
            for name in ("a", "b"):
                want = computed_pages(*previous[name])
                assert got[name].num_cached == want, f"turn {turn}: {name} mapped {got[name].num_cached} of {want}"
                assert want > first_image_row(inputs[name]), "the hit must cover image rows"
        if turn == 2:      # the text after the image, and turn 2's answer, came from the cache too
            assert got["a"].num_cached > int(inputs["a"].vision.token_rows[63]) + PAGE_CELLS
        previous = {name: (inputs[name], got[name]) for name in convs}
        if turn < 2:
            inputs = {name: await convs[name].next(engine, turn + 1, got[name].tokens) for name in convs}
    assert engine.metrics.cached_prompt_tokens > 0 and reference.metrics.cached_prompt_tokens == 0


@pytest.mark.parametrize("control", ["salted", "colliding_keys", "no_salt"])
async def test_same_ids_other_image_never_shares_pages(make_engine, monkeypatch, control):
    """`colliding_keys`: every page key ignores the salt, so the second picture's image page finds the
    first one's entry under its own key; the salt stored beside the ids must refuse it. `no_salt`
    (negative control): pages keyed by ids alone, as before image pages were salted; the second
    picture maps the first one's image page and the exactness check must see it."""
    engine = make_engine(batch=1, chunk=16)
    a = await Conversation(X).next(engine, 0)
    b = await Conversation(Y).next(engine, 0)
    assert a.prompt_ids == b.prompt_ids and not np.array_equal(a.vision.embeddings, b.vision.embeddings)
    want = await alone(make_engine(batch=1, chunk=16, prefix_cache=False), Job("b", b))
    if control == "colliding_keys":
        chain = kv_pool._chain
        monkeypatch.setattr(kv_pool, "_chain", lambda parent, tokens, salt=None: chain(parent, tokens))
    elif control == "no_salt":
        monkeypatch.setattr(kv_pool, "page_salt", lambda request, index, axes: None)
    await drive(engine, [Job("a", a)])
    got = (await drive(engine, [Job("b", b)]))["b"]
    if control == "no_salt":
        assert got.num_cached == PAGE_CELLS * ((len(b.prompt_ids) - 1) // PAGE_CELLS) > first_image_row(b)
        assert not same_stream(got, want), "another picture's cached image page went unnoticed"
    else:
        assert got.num_cached == PAGE_CELLS and same_stream(got, want)


POOL_PAGES = 8
HOST_GIB = 0.01


async def flush(engine) -> None:
    """A text request whose reservation is the whole pool: every idle cached page is evicted (spilled)."""
    job = Job("flush", EngineInput(list(range(300, 300 + POOL_PAGES * PAGE_CELLS - 12))),
              dataclasses.replace(GREEDY, max_tokens=4))
    assert engine.pool.pages_for(len(job.inputs.prompt_ids), 4) == POOL_PAGES
    await drive(engine, [job])


async def test_image_pages_from_the_host_tier_are_exact(make_engine):
    engine = make_engine(batch=2, chunk=16, kv_pages=POOL_PAGES, host_cache=HOST_GIB)
    reference = make_engine(batch=1, chunk=512, prefix_cache=False)
    host = engine.pool.host
    conv = Conversation(X)
    first = Job("t1", await conv.next(engine, 0), GREEDY_T)
    done = (await drive(engine, [first]))["t1"]
    assert same_stream(done, await alone(reference, first))
    second = Job("t2", await conv.next(engine, 1, done.tokens), GREEDY_T)
    await flush(engine)
    probe = Request(list(second.inputs.prompt_ids), GREEDY_T, **second.inputs.submit_kwargs())
    chain = engine.pool._lookup(probe)
    assert chain and all(isinstance(e, HostPage) for _, e in chain) and any(e.salt for _, e in chain)
    restored = host.num_restored
    got = (await drive(engine, [second]))["t2"]
    want = await alone(reference, second)
    assert got.num_cached == computed_pages(first.inputs, done) == len(chain) * PAGE_CELLS
    assert host.num_restored == restored + len(chain) and same_stream(got, want)

    # Negative control: the same turn, its pages evicted again and corrupted in the host tier.
    await flush(engine)
    chain = engine.pool._lookup(probe)
    assert chain and all(isinstance(e, HostPage) for _, e in chain)
    for _, entry in chain:
        entry.buffer.array[1::2] ^= 0x80             # flips the sign bit of every F16 K/V value
    corrupted = (await drive(engine, [second]))["t2"]
    assert corrupted.num_cached == len(chain) * PAGE_CELLS and not same_stream(corrupted, want), \
        "corrupted host-held image pages went unnoticed"


async def test_slot_file_of_an_image_conversation_with_host_held_pages(make_engine, tmp_path):
    source = make_engine(batch=2, chunk=16, kv_pages=POOL_PAGES, host_cache=HOST_GIB)
    conv = Conversation(X)
    first = Job("a", await conv.next(source, 0), GREEDY_T)
    busy = Job("busy", EngineInput(list(range(400, 430))), dataclasses.replace(GREEDY, max_tokens=30))
    got = await drive(source, [busy, dataclasses.replace(first, after_tokens=("busy", 1))])
    slot, n_cached = got["a"].slot, computed_pages(first.inputs, got["a"])
    n_pages = n_cached // PAGE_CELLS
    assert slot == 1 and n_pages >= 2
    # A text request that leaves one page too few: the least recently used of a's pages spills to the host.
    filler = Job("fill", EngineInput(list(range(300, 300 + (POOL_PAGES - n_pages + 1) * PAGE_CELLS - 12))),
                 dataclasses.replace(GREEDY, max_tokens=4))
    await drive(source, [filler])
    tokens, salts = slot_files._slot_tokens(source, slot)
    tiers = [type(e).__name__ for _, e in source.pool.chain(tokens, salts, host=True)]
    assert tiers == ["HostPage"] + ["_Cached"] * (n_pages - 1), tiers
    path = slot_files.resolve(tmp_path, "image-conv.bin")
    saved = await slot_files.save(source, slot, path)
    assert saved["n_saved"] == n_cached
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[len(slot_files.MAGIC):len(slot_files.MAGIC) + 8])
    header = json.loads(blob[len(slot_files.MAGIC) + 8:len(slot_files.MAGIC) + 8 + n])
    assert header["salts"][0] is None and None not in header["salts"][1:]    # a text page, then image pages

    second = Job("b", await conv.next(source, 1, got["a"].tokens), GREEDY_T)
    want = await alone(make_engine(batch=1, chunk=512, prefix_cache=False), second)
    target = make_engine(batch=2, chunk=16)
    assert (await slot_files.restore(target, 0, path))["n_restored"] == n_cached
    hit = (await drive(target, [second]))["b"]
    assert hit.num_cached == n_cached and same_stream(hit, want)

    # The restored image page never serves another picture with the same ids.
    other = await Conversation(Y).next(target, 0)
    assert other.prompt_ids == first.inputs.prompt_ids
    assert (await drive(target, [Job("y", other, GREEDY_T)]))["y"].num_cached == PAGE_CELLS

    # Negative control: the file's image page with every K/V sign flipped, restored and mapped.
    start, size = len(slot_files.MAGIC) + 8 + n, target.runner.slots.page_bytes()
    page = np.frombuffer(blob[start + size:start + 2 * size], np.uint16) ^ np.uint16(0x8000)
    bad = tmp_path / "image-conv-bad.bin"
    bad.write_bytes(blob[:start + size] + page.tobytes() + blob[start + 2 * size:])
    fresh = make_engine(batch=2, chunk=16)
    await slot_files.restore(fresh, 0, bad)
    wrong = (await drive(fresh, [second]))["b"]
    assert wrong.num_cached == n_cached and not same_stream(wrong, want), "a corrupted image page went unnoticed"
