"""llguidance against xgrammar on Strata's workload: the default model's
tokenizer, the schema corpus of the structured-output tests, one request's
mask per generated token on the host.

Prints per engine: tokenizer set-up time, grammar compile time (median over
the corpus, cold cache), and the mean time of one token's mask computation
plus its advance along a valid instance of each schema. Run from the
repository root:  python bench/grammar_engines.py [model]
(xgrammar is not a Strata dependency: `pip install xgrammar` to compare.)
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strata.model_store import resolve_model  # noqa: E402
from strata.tokenizer import Tokenizer  # noqa: E402
from tests.server.schema_corpus import CORPUS  # noqa: E402


def bench_llguidance(tok: Tokenizer, vocab: int) -> dict:
    import llguidance

    t0 = time.perf_counter()
    ll = llguidance.LLTokenizer(tok._backend.to_str(), n_vocab=vocab, eos_token=sorted(tok.eos_ids))
    setup = time.perf_counter() - t0
    compile_s, mask_s = [], []
    for schema, instance in CORPUS.values():
        t0 = time.perf_counter()
        m = llguidance.LLMatcher(ll, llguidance.LLMatcher.grammar_from_json_schema(schema))
        m.compute_bitmask()                 # the first mask finishes the lazy compilation
        compile_s.append(time.perf_counter() - t0)
        assert not m.is_error(), m.get_error()
        for t in tok.encode(json.dumps(instance, separators=(",", ":")), add_special=False):
            t0 = time.perf_counter()
            m.compute_bitmask()
            assert m.consume_token(t), m.get_error()
            mask_s.append(time.perf_counter() - t0)
    return {"setup": setup, "compile": compile_s, "mask": mask_s, "refused": []}


def bench_xgrammar(tok: Tokenizer, vocab: int) -> dict:
    import xgrammar as xgr

    t0 = time.perf_counter()
    words = [tok.token_bytes(i) for i in range(tok.vocab_size)]
    info = xgr.TokenizerInfo(words, xgr.VocabType.RAW, vocab_size=vocab, stop_token_ids=sorted(tok.eos_ids))
    compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    setup = time.perf_counter() - t0
    bitmask = xgr.allocate_token_bitmask(1, vocab)
    compile_s, mask_s, refused = [], [], []
    for key, (schema, instance) in CORPUS.items():
        t0 = time.perf_counter()
        m = xgr.GrammarMatcher(compiler.compile_json_schema(json.dumps(schema), any_whitespace=False,
                                                                separators=(",", ":")))
        compile_s.append(time.perf_counter() - t0)
        for t in tok.encode(json.dumps(instance, separators=(",", ":")), add_special=False):
            t0 = time.perf_counter()
            m.fill_next_token_bitmask(bitmask)
            if not m.accept_token(t):
                refused.append(f"{key}@{tok.decode([t])!r}")
                break
            mask_s.append(time.perf_counter() - t0)
    return {"setup": setup, "compile": compile_s, "mask": mask_s, "refused": refused}


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m"
    tok = Tokenizer.from_gguf(resolve_model(model))
    vocab = tok.vocab_size
    print(f"model {model}, vocab {vocab}, {len(CORPUS)} schemas")
    print(f"{'engine':<12} {'setup s':>8} {'compile ms (median)':>20} {'compile ms (max)':>17} {'mask+advance us':>16}  valid instance refused at")
    for name, fn in (("llguidance", bench_llguidance), ("xgrammar", bench_xgrammar)):
        try:
            r = fn(tok, vocab)
        except ImportError:
            print(f"{name:<12} not installed (pip install {name})")
            continue
        print(f"{name:<12} {r['setup']:8.2f} {1e3 * statistics.median(r['compile']):20.2f} "
              f"{1e3 * max(r['compile']):17.2f} {1e6 * float(np.mean(r['mask'])):16.1f}  "
              f"{', '.join(r['refused']) or '-'}")


if __name__ == "__main__":
    main()
