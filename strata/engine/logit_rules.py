"""LogitRules: one request's logit adjustments, as the two rows strata_logits_adjust reads.

Every rule is a pure function of this request's own tokens, so its rows (and
so its tokens) never depend on who else is served:

  additive row   logit_bias[v]
                 - presence_penalty * (v was generated) - frequency_penalty * count(v in output)
                 -inf where min_tokens is not reached yet and v would end the request (eos, stop ids)
                 -inf where the grammar does not allow v next
  factor row     repetition_penalty where v occurs in the prompt or the output, else 1

(OpenAI's presence/frequency penalties count generated tokens only, as
vLLM's; the repetition penalty is vLLM's/transformers': a positive logit is
divided by it, a negative one multiplied.) The kernel applies the factor
first, then adds (strata.h). The rows change only when a token is accepted;
`version` counts those changes so the runner uploads a slot's rows only when
they are new. A request with a bias alone is `static`: its rows never change
and decode-ahead (which guesses the next step on the device) may continue it.
"""

from __future__ import annotations

import numpy as np

from .sampling import InvalidRequest, SamplingParams


class LogitRules:
    def __init__(self, params: SamplingParams, prompt_ids: list[int], n_vocab: int, end_ids: frozenset[int],
                 mask=None):
        self.n_vocab = n_vocab
        self.params = params
        self.mask = mask                                     # strata.grammar.compiler.TokenMask or None
        self.bias = np.zeros(n_vocab, np.float32)            # [vocab]
        for token, value in params.logit_bias:
            if token >= n_vocab:
                raise InvalidRequest(f"logit_bias names token {token}, but the vocabulary has {n_vocab} ids "
                                     f"(0 to {n_vocab - 1})", "logit_bias")
            self.bias[token] = value
        self.counts = np.zeros(n_vocab, np.int32) if params.presence_penalty or params.frequency_penalty else None
        self.seen = None
        if params.repetition_penalty != 1.0:
            self.seen = np.zeros(n_vocab, bool)
            self.seen[np.asarray(prompt_ids, np.int64)] = True
        self.end_ids = np.array(sorted(t for t in end_ids if 0 <= t < n_vocab), np.int64)
        self.num_output = 0
        self.version = 0
        self.static = self.counts is None and self.seen is None and mask is None and not params.min_tokens

    def accept(self, token_id: int) -> str | None:
        """Records a sampled token; returns an error text if the grammar refuses it (it never should)."""
        self.num_output += 1
        if self.counts is not None:
            self.counts[token_id] += 1
        if self.seen is not None:
            self.seen[token_id] = True
        if not self.static:
            self.version += 1
        if self.mask is not None and not self.mask.accept(token_id):
            return f"the grammar refused token {token_id}: {self.mask.error}"
        return None

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(additive, factor): float32 [vocab] each, for the next sampled token."""
        p = self.params
        add = self.bias.copy()
        if self.counts is not None:
            counts = self.counts.astype(np.float32)
            add -= np.float32(p.presence_penalty) * (counts > 0).astype(np.float32)
            add -= np.float32(p.frequency_penalty) * counts
        if self.mask is not None:
            add[~self.mask.allowed()] = -np.inf
        if self.num_output < p.min_tokens and len(self.end_ids):
            kept = add[self.end_ids].copy()
            add[self.end_ids] = -np.inf
            if not np.isfinite(add).any():         # the grammar allows only an end: it wins over min_tokens
                add[self.end_ids] = kept
        factor = np.ones(self.n_vocab, np.float32)
        if self.seen is not None:
            factor[self.seen] = np.float32(p.repetition_penalty)
        return add, factor
