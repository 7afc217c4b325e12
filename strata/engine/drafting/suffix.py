"""SuffixDrafter (`--draft suffix`): prompt-lookup drafting from the request's own tokens.

Each slot keeps a SuffixIndex over its request's prompt and output, extended
with the tokens that arrived since the last step. The draft is what followed
the first earlier occurrence of the longest repeated suffix: large wins when
the output quotes, edits or continues its prompt (rewrites, code), nothing
extra to load, and no device work.
"""

from __future__ import annotations

from .base import Drafter, SlotStates
from .suffix_index import SuffixIndex

MIN_MATCH = 2      # a one-token match predicts too little to be worth the verification rows


class SuffixDrafter(Drafter):
    source = "suffix"

    def __init__(self, min_match: int = MIN_MATCH):
        self.min_match = min_match
        self._index = SlotStates(lambda request: SuffixIndex())

    def propose(self, wants):
        out = {}
        for request, k in wants:
            index = self._index.get(request)
            n = request.num_tokens
            if len(index) < n:
                index.extend(request.prompt_ids[len(index):] if len(index) < request.num_prompt else ())
                index.extend(request.output_ids[len(index) - request.num_prompt:])
            drafts = index.draft(k, self.min_match)
            if drafts:
                out[request] = drafts
        return out

    def release(self, slot: int) -> None:
        self._index.drop(slot)
