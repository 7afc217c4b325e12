"""GrammarCompiler: GrammarSpecs → llguidance grammars checked against the model's tokenizer,
and a TokenMask per request.

Why llguidance (README, "Structured output"): it reads JSON schema, Lark and
GBNF, compiles a schema in about a millisecond (xgrammar: tens of ms on the
same corpus, bench/grammar_engines.py), and is one small wheel with no
dependencies (xgrammar needs torch at run time). Its per-token mask costs
more host time than xgrammar's precomputed masks; that time is spent only on
rows that carry a grammar.

The llguidance tokenizer is built once per model (about a second: it walks
the whole vocabulary), on first use, from the same tokenizers JSON the
server tokenizes with, sized to the model's logit rows (padded embedding
rows beyond the tokenizer's vocabulary are never allowed).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from .spec import GrammarSpec

CACHE_SIZE = 256


class GrammarError(ValueError):
    """A grammar that does not compile; `param` names the request field it came from."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


# JSON is written on one line with json.dumps' separators: no free whitespace for a small model to loop in,
# and fewer tokens. A schema may override it with llguidance's "x-guidance" options.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class GrammarCompiler:
    def __init__(self, tokenizer, n_vocab: int):
        self.tokenizer = tokenizer
        self.n_vocab = n_vocab
        self._ll = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[GrammarSpec, str] = OrderedDict()

    def llg_tokenizer(self):
        with self._lock:
            if self._ll is None:
                import llguidance

                backend = self.tokenizer._backend
                n_vocab, eos = max(self.n_vocab, self.tokenizer.vocab_size), sorted(self.tokenizer.eos_ids)
                try:
                    self._ll = llguidance.LLTokenizer(backend.to_str(), n_vocab=n_vocab, eos_token=eos)
                except TypeError:   # llguidance before list support (1.6 takes one id): the lowest end token
                    self._ll = llguidance.LLTokenizer(backend.to_str(), n_vocab=n_vocab, eos_token=eos[0])
            return self._ll

    def compile(self, spec: GrammarSpec) -> str:
        """The llguidance grammar of `spec`, or GrammarError naming what is wrong with it (param: spec.param)."""
        param = spec.param
        with self._lock:
            grammar = self._cache.get(spec)
            if grammar is not None:
                self._cache.move_to_end(spec)
                return grammar
        import llguidance

        ll = self.llg_tokenizer()
        try:
            grammar = _grammar_text(spec)
        except ValueError as exc:
            raise GrammarError(f"the {spec.kind} grammar is not valid: {exc}", param) from None
        error = llguidance.LLMatcher.validate_grammar(grammar, ll)
        if error and not error.startswith("WARNING"):
            raise GrammarError(f"the {spec.kind} grammar is not valid: {error.strip()}", param)
        with self._lock:
            self._cache[spec] = grammar
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return grammar

    def matcher(self, grammar: str) -> "TokenMask":
        return TokenMask(self.llg_tokenizer(), grammar, self.n_vocab)


class TokenMask:
    """One request's grammar state: which tokens may come next; advanced by each sampled token."""

    def __init__(self, ll, grammar: str, n_vocab: int):
        import llguidance

        self._m = llguidance.LLMatcher(ll, grammar, log_level=0)
        self.n_vocab = n_vocab
        if self._m.is_error():
            raise GrammarError(f"the grammar is not valid: {self._m.get_error()}", "response_format")

    def allowed(self) -> np.ndarray:
        """bool [n_vocab]: the tokens the grammar allows next (end-of-sequence ids once it is complete)."""
        bits = np.frombuffer(self._m.compute_bitmask(), dtype=np.uint8)
        return np.unpackbits(bits, bitorder="little")[: self.n_vocab].astype(bool)

    def accept(self, token_id: int) -> bool:
        return self._m.consume_token(token_id)

    @property
    def error(self) -> str | None:
        return self._m.get_error() if self._m.is_error() else None

    @property
    def done(self) -> bool:
        return self._m.is_stopped()


def _grammar_text(spec: GrammarSpec) -> str:
    import llguidance

    M = llguidance.LLMatcher
    if spec.kind == "json_schema":
        return M.grammar_from_json_schema(spec.source, defaults=JSON_OPTIONS)
    if spec.kind == "json_object":
        return M.grammar_from_json_schema('{"type": "object"}', defaults=JSON_OPTIONS)
    if spec.kind == "lark":
        return M.grammar_from_lark(spec.source)
    if spec.kind == "gbnf":
        return llguidance.grammar_from("gbnf", spec.source)
    if spec.kind == "regex":
        return M.grammar_from_regex(spec.source)
    if spec.kind == "llguidance":
        return spec.source
    raise ValueError(f"unknown grammar kind {spec.kind!r}")
