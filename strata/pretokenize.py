"""How each byte-level BPE vocabulary cuts text into words before merging.

A GGUF names its pre-tokenizer in `tokenizer.ggml.pre`; the merges were learned
on words cut that way, so encoding must cut the same way or ids drift. Each
rule here is written from the model family's own `tokenizer.json` (the
reference) and cross-checked with llama.cpp's pre-tokenizer types:

- `gpt2` / `default`: GPT-2's split (contractions, letters, numbers,
  punctuation, whitespace), each run optionally led by one space.
- `smollm` (also StarCoder's family): every digit is its own word first,
  then GPT-2's split — the Hugging Face SmolLM2 tokenizer.json is
  Digits(individual_digits) + ByteLevel.
- `llama-bpe` (Llama 3): case-insensitive contractions, a word may take one
  leading non-letter, numbers in runs of at most three digits, newlines kept
  apart; a word already in the vocabulary is taken whole (ignore_merges);
  text starts with <|begin_of_text|> unless the GGUF says otherwise.
- `qwen2`: the Llama 3 split with single digits, after NFC normalization.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tokenizers import Regex, normalizers, pre_tokenizers

# Pieces of the Llama 3 / Qwen2 split, in the order the alternatives are tried.
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_WORD_WITH_ONE_LEADING_MARK = r"[^\r\n\p{L}\p{N}]?\p{L}+"
_PUNCTUATION_RUN = r" ?[^\s\p{L}\p{N}]+[\r\n]*"
_NEWLINE_RUN = r"\s*[\r\n]+"
_SPACES_NOT_BEFORE_WORD = r"\s+(?!\S)"
_SPACES = r"\s+"


def _llama3_style_split(numbers: str) -> str:
    parts = [_CONTRACTIONS, _WORD_WITH_ONE_LEADING_MARK, numbers, _PUNCTUATION_RUN, _NEWLINE_RUN, _SPACES_NOT_BEFORE_WORD, _SPACES]
    return "|".join(parts)


LLAMA3_SPLIT = _llama3_style_split(r"\p{N}{1,3}")
QWEN2_SPLIT = _llama3_style_split(r"\p{N}")


def _gpt2() -> pre_tokenizers.PreTokenizer:
    # ByteLevel's built-in regex is GPT-2's split.
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _gpt2()])


def _regex_then_bytes(pattern: str) -> Callable[[], pre_tokenizers.PreTokenizer]:
    def build() -> pre_tokenizers.PreTokenizer:
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )

    return build


@dataclass(frozen=True)
class PreTokenizerRule:
    """What `tokenizer.ggml.pre` implies for the `tokenizers` pipeline."""

    build: Callable[[], pre_tokenizers.PreTokenizer]
    ignore_merges: bool = False  # take a word whole when the vocabulary has it
    nfc: bool = False  # NFC-normalize text first
    adds_bos: bool = False  # prepend BOS when the GGUF has no tokenizer.ggml.add_bos_token

    def normalizer(self) -> normalizers.Normalizer | None:
        return normalizers.NFC() if self.nfc else None


_GPT2 = PreTokenizerRule(_gpt2)
_SMOLLM = PreTokenizerRule(_digits_then_gpt2)
_LLAMA3 = PreTokenizerRule(_regex_then_bytes(LLAMA3_SPLIT), ignore_merges=True, adds_bos=True)
_QWEN2 = PreTokenizerRule(_regex_then_bytes(QWEN2_SPLIT), nfc=True)

RULES: dict[str, PreTokenizerRule] = {
    "default": _GPT2,
    "gpt2": _GPT2,
    "smollm": _SMOLLM,
    "starcoder": _SMOLLM,
    "llama-bpe": _LLAMA3,
    "llama3": _LLAMA3,
    "llama-v3": _LLAMA3,
    "qwen2": _QWEN2,
    "deepseek-r1-qwen": _QWEN2,
}


class UnknownPreTokenizerError(ValueError):
    pass


def rule_for(name: str | None) -> PreTokenizerRule:
    """The rule for a `tokenizer.ggml.pre` value; a missing value means GPT-2's split."""
    if name is None:
        return RULES["default"]
    rule = RULES.get(name)
    if rule is None:
        supported = ", ".join(sorted(RULES))
        raise UnknownPreTokenizerError(f"unsupported tokenizer.ggml.pre {name!r}; Strata supports: {supported}")
    return rule
