"""Slot files (strata/engine/slot_files.py): a slot's cached prefix saved by one engine and restored
into another gives the follow-up turn exactly the tokens of a run without any cache, mapping the
restored pages; a file whose K/V were negated (negative control) is caught by the same
comparison; names, other models' files, missing and truncated files are refused."""

import json
import struct

import numpy as np
import pytest

from strata.config import PAGE_CELLS
from strata.engine import slot_files
from strata.engine.sampling import SamplingParams

from .harness import solo
from .prompts import CHAT_QUESTIONS, chat_prompt

pytestmark = pytest.mark.exactness

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


async def test_save_restore_follow_up_is_exact(make_engine, loaded, tmp_path):
    _, model = loaded
    first = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[1], repeat_context=1)
    a = make_engine(batch=2, chunk=64)
    done = await solo(a, first, GREEDY)
    path = slot_files.resolve(tmp_path, "conv-1.bin")
    saved = await slot_files.save(a, done.request.slot, path)
    n_cached = PAGE_CELLS * ((len(first) + len(done.token_ids) - 1) // PAGE_CELLS)
    assert saved["n_saved"] == n_cached and saved["n_written"] == path.stat().st_size

    follow = first + done.token_ids + model.tokenizer.encode("<|im_end|>\n<|im_start|>user\nMore?<|im_end|>\n"
                                                             "<|im_start|>assistant\n", add_special=False)
    want = (await solo(make_engine(batch=1, chunk=512, prefix_cache=False), follow, GREEDY)).token_ids

    b = make_engine(batch=2, chunk=32)
    restored = await slot_files.restore(b, 1, path)
    assert restored == {"n_restored": n_cached, "n_read": path.stat().st_size}
    got = await solo(b, follow, GREEDY)
    assert got.request.num_cached == n_cached and got.token_ids == want

    # Negative control: every K and V of the file negated (swapping pages would not do: attention
    # is blind to the order of keys whose rotation is already applied). Restored and mapped, the answer changes.
    blob = bytearray(path.read_bytes())
    (n,) = struct.unpack("<Q", blob[len(slot_files.MAGIC):len(slot_files.MAGIC) + 8])
    start = len(slot_files.MAGIC) + 8 + n
    size = b.runner.slots.page_bytes()
    halves = np.frombuffer(bytes(blob[start:start + 2 * size]), np.uint16) ^ np.uint16(0x8000)   # K, V negated
    blob[start:start + 2 * size] = halves.tobytes()
    bad = tmp_path / "conv-bad.bin"
    bad.write_bytes(bytes(blob))
    c = make_engine(batch=2, chunk=32)
    await slot_files.restore(c, 0, bad)
    wrong = await solo(c, follow, GREEDY)
    assert wrong.request.num_cached == n_cached and wrong.token_ids != want, "swapped pages went unnoticed"


async def test_refusals(make_engine, loaded, tmp_path, device):
    _, model = loaded
    engine = make_engine(batch=2, chunk=64)
    for name in ("", "../x", "a/b", ".hidden", "a..b", "x" * 129, "name with space"):
        with pytest.raises(slot_files.SlotFileError):
            slot_files.resolve(tmp_path, name)
    with pytest.raises(slot_files.SlotFileError) as e:
        slot_files.resolve(None, "ok.bin")
    assert "--slot-save-path" in str(e.value)
    with pytest.raises(slot_files.SlotFileError) as e:
        await slot_files.save(engine, 0, tmp_path / "empty.bin")      # nothing cached in slot 0 yet
    assert e.value.param == "id_slot"
    with pytest.raises(slot_files.SlotFileError):
        await slot_files.save(engine, 2, tmp_path / "x.bin")          # no slot 2
    with pytest.raises(slot_files.SlotFileError) as e:
        await slot_files.restore(engine, 0, tmp_path / "missing.bin")
    assert e.value.status == 404

    prompt = chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[4], repeat_context=1)
    done = await solo(engine, prompt, GREEDY)
    good = tmp_path / "good.bin"
    await slot_files.save(engine, done.request.slot, good)
    blob = good.read_bytes()
    (n,) = struct.unpack("<Q", blob[len(slot_files.MAGIC):len(slot_files.MAGIC) + 8])
    header = json.loads(blob[len(slot_files.MAGIC) + 8:len(slot_files.MAGIC) + 8 + n])
    header["n_layers"] += 1
    other = json.dumps(header).encode()
    (tmp_path / "other.bin").write_bytes(slot_files.MAGIC + struct.pack("<Q", len(other)) + other
                                         + blob[len(slot_files.MAGIC) + 8 + n:])
    with pytest.raises(slot_files.SlotFileError) as e:
        await slot_files.restore(engine, 0, tmp_path / "other.bin")
    assert "another model" in str(e.value) and "n_layers" in str(e.value)
    (tmp_path / "short.bin").write_bytes(blob[:-10])
    with pytest.raises(slot_files.SlotFileError) as e:
        await slot_files.restore(engine, 0, tmp_path / "short.bin")
    assert "truncated" in str(e.value)
    (tmp_path / "junk.bin").write_bytes(b"hello")
    with pytest.raises(slot_files.SlotFileError):
        await slot_files.restore(engine, 0, tmp_path / "junk.bin")
    free = engine.pool.num_free
    restored = await slot_files.restore(engine, 0, good)               # already cached: nothing rewritten
    assert restored["n_restored"] == len(header["tokens"]) and engine.pool.num_free == free

    header = json.loads(blob[len(slot_files.MAGIC) + 8:len(slot_files.MAGIC) + 8 + n])     # as saved
    pages = blob[len(slot_files.MAGIC) + 8 + n:]
    assert header["salts"] == [None] * (len(header["tokens"]) // PAGE_CELLS)       # text pages: unsalted
    assert header["backend"] == ("CPU" if device == "cpu" else "CUDA")
    for name, magic, changed in (("salts.bin", slot_files.MAGIC, {**header, "salts": ["zz"]}),
                                 ("backend.bin", slot_files.MAGIC, {**header, "backend": "ELSEWHERE"})):
        raw = json.dumps(changed).encode()
        (tmp_path / name).write_bytes(magic + struct.pack("<Q", len(raw)) + raw + pages)
        with pytest.raises(slot_files.SlotFileError) as e:
            await slot_files.restore(engine, 0, tmp_path / name)
        assert e.value.status == 400, name
    # A file of the previous format (no salts, no backend) is still read.
    v1 = json.dumps({k: v for k, v in header.items() if k not in ("salts", "backend")}).encode()
    (tmp_path / "v1.bin").write_bytes(slot_files.MAGIC_V1 + struct.pack("<Q", len(v1)) + v1 + pages)
    fresh = make_engine(batch=2, chunk=64)
    assert (await slot_files.restore(fresh, 0, tmp_path / "v1.bin"))["n_restored"] == len(header["tokens"])
    assert (await solo(fresh, prompt, GREEDY)).request.num_cached > 0


def test_llm_save_and_restore(device, tmp_path, model_path):
    """The Python API's save_slot / restore_slot: a fresh LLM serves the prefix from the file, same tokens.
    (model_path: the LLM loads the default model; skipped, as its neighbours are, where it is not cached.)"""
    from strata.llm import LLM

    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    prompt = list(range(300, 450))
    with LLM(device=device, batch=1, ctx=512) as a:
        want = a.generate([prompt], params)[0].token_ids
        assert a.save_slot(0, tmp_path / "p.bin")["n_saved"] == 128
    with LLM(device=device, batch=1, ctx=512) as b:
        assert b.restore_slot(tmp_path / "p.bin")["n_restored"] == 128
        assert b.generate([prompt], params)[0].token_ids == want
        assert b.engine.metrics.cached_prompt_tokens == 128
