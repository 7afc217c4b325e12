"""Agreement with an independent implementation: transformers on the same GGUF.

transformers dequantizes the default model's GGUF to float32 and runs its own
Llama. Strata keeps the Q4_1/Q8_0 blocks and dequantizes inside its float32
kernels (no activation quantization); the one rounding step transformers does
not have is the F16 KV cache. So the two agree closely: last-position logits
within MAX_LOGIT_ERROR with the same top-20, and greedy continuations
identical token for token. A divergence is accepted only at a near-tie
visible in the reference logits (top-1/top-2 gap below NEAR_TIE), and the
test prints it.

Measured on the CPU backend (2026-11-29): max |logit error| over the 12
prompts 1.2e-2 (from the F16 KV cache), top-20 overlap >= 19/20 everywhere,
12 of 12 greedy continuations of 40 tokens identical.
"""

import numpy as np
import pytest

from strata.engine.sampling import SamplingParams

from reference_prompts import CHAT, RAW

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

NEAR_TIE = 0.02
MAX_LOGIT_ERROR = 5e-2
CONTINUATION = 40



@pytest.fixture(scope="module")
def llm(model_path):
    from strata import LLM

    with LLM(str(model_path), device="cpu", batch=1, ctx=512) as engine:
        yield engine


@pytest.fixture(scope="module")
def reference(model_path):
    torch.set_num_threads(2)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(model_path.parent), gguf_file=model_path.name, dtype=torch.float32)
    model.eval()
    return model


def prompt_ids(llm) -> list[tuple[str, list[int]]]:
    chats = [(q, llm.render_chat([{"role": "user", "content": q}])) for q in CHAT]
    raws = [(t, llm.encode_prompt(t)) for t in RAW]
    return chats + raws


def strata_logits(llm, ids: list[int]) -> np.ndarray:
    llm.generate([ids], SamplingParams(temperature=0, max_tokens=1))
    runner = llm.engine.runner
    return runner.act.buffer.to_numpy(np.float32, (llm.engine.model.spec.vocab,), runner.act.logits)


def reference_logits(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        out = model(torch.tensor([ids]))
    return out.logits[0, -1].double().numpy()


def reference_greedy(model, ids: list[int], n: int) -> tuple[list[int], list[np.ndarray]]:
    """transformers' greedy continuation, EOS not special (as with ignore_eos), and each step's logits."""
    tokens, scores, past = [], [], None
    feed = torch.tensor([ids])
    with torch.no_grad():
        for _ in range(n):
            out = model(feed, past_key_values=past, use_cache=True)  # noqa: the 5.x name still works
            past = out.past_key_values
            logits = out.logits[0, -1].double().numpy()
            scores.append(logits)
            tokens.append(int(np.argmax(logits)))
            feed = torch.tensor([[tokens[-1]]])
    return tokens, scores


def test_last_position_logits_agree(llm, reference):
    worst = 0.0
    for text, ids in prompt_ids(llm):
        ours = strata_logits(llm, ids).astype(np.float64)
        ref = reference_logits(reference, ids)
        error = float(np.abs(ours - ref).max())
        worst = max(worst, error)
        top_ours = set(np.argsort(-ours)[:20])
        top_ref = set(np.argsort(-ref)[:20])
        assert error < MAX_LOGIT_ERROR, f"{text!r}: max |logit error| {error:.2e}"
        assert len(top_ours & top_ref) >= 19, f"{text!r}: top-20 overlap {len(top_ours & top_ref)}"
    print(f"max |logit error| over {len(CHAT) + len(RAW)} prompts: {worst:.2e}")


def test_greedy_continuations_match(llm, reference):
    near_ties = []
    for text, ids in prompt_ids(llm):
        ours = llm.generate([ids], SamplingParams(temperature=0, max_tokens=CONTINUATION, ignore_eos=True))[0]
        theirs, scores = reference_greedy(reference, ids, CONTINUATION)
        if ours.token_ids == theirs:
            continue
        at = next(i for i, (a, b) in enumerate(zip(ours.token_ids, theirs)) if a != b)
        top2 = np.sort(scores[at])[-2:]
        gap = float(top2[1] - top2[0])
        assert gap < NEAR_TIE, (f"{text!r}: greedy tokens diverge at step {at} "
                                f"({ours.token_ids[at]} vs {theirs[at]}) with a top-1/top-2 gap of {gap:.4f}")
        near_ties.append((text, at, gap))
    for text, at, gap in near_ties:
        print(f"near-tie divergence on {text!r} at token {at}: reference gap {gap:.4f}")
    assert len(near_ties) <= 2, f"too many divergences, even if each is a near-tie: {near_ties}"
