"""Drafters for tests: an oracle that replays the plain output, one that is always wrong, and one
that shares its state between slots (the isolation negative control's deliberate defect)."""

from __future__ import annotations

from strata.engine.drafting.base import Drafter


def ref_key(prompt, params) -> tuple:
    """Which plain output a request replays: its prompt, and its seed when it samples."""
    return tuple(prompt), params.temperature, params.seed if params.temperature > 0 else None


class OracleDrafter(Drafter):
    """Proposes the tokens plain decoding produced (by prompt): every draft must be accepted."""

    source = "oracle"

    def __init__(self, references: dict[tuple, list[int]]):
        self.references = references          # ref_key -> plain output ids

    def propose(self, wants):
        out = {}
        for request, k in wants:
            ref = self.references[ref_key(request.prompt_ids, request.params)]
            done = len(request.output_ids)
            assert request.output_ids == ref[:done], "the oracle's request left the plain output"
            drafts = ref[done: done + k]
            if drafts:
                out[request] = drafts
        return out


class WrongDrafter(Drafter):
    """Proposes a token other than plain decoding's at every position: nothing may be accepted."""

    source = "wrong"

    def __init__(self, references: dict[tuple, list[int]], vocab: int):   # ref_key -> plain output ids
        self.references, self.vocab = references, vocab

    def propose(self, wants):
        out = {}
        for request, k in wants:
            ref = self.references[ref_key(request.prompt_ids, request.params)]
            done = len(request.output_ids)
            out[request] = [(ref[i] + 1 + i) % self.vocab if i < len(ref) else 0 for i in range(done, done + k)]
        return out
