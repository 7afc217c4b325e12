"""The verification rule: which sampled tokens a slot keeps from its 1 + k rows.

Row j of a drafting slot holds the j-th token of the run (row 0: the slot's
last token; row j >= 1: draft j) and samples the token that follows it.
Plain decoding would have sampled row 0's token; row j's sample is plain
decoding's next token exactly when drafts 1..j were all equal to the samples
before them, because then row j's sequence is plain decoding's sequence.
"""

from __future__ import annotations


def accepted_run(drafts: list[int], sampled: list[int]) -> list[int]:
    """The tokens plain decoding would produce next: samples up to and including the first one
    that differs from its draft, or all k + 1 samples (the last is the bonus token)."""
    if len(sampled) != len(drafts) + 1:
        raise ValueError(f"{len(drafts)} drafts need {len(drafts) + 1} samples, got {len(sampled)}")
    for j, draft in enumerate(drafts):
        if sampled[j] != draft:
            return sampled[: j + 1]
    return list(sampled)
