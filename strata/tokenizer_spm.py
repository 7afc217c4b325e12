"""SentencePiece-style (`tokenizer.ggml.model = llama`) vocabularies rebuilt with `tokenizers`.

Two flavours, chosen by architecture as transformers chooses them: Gemma's
(below) and Llama 2 / Mistral's (build_llama_backend: merges ranked by score,
a prefix space when `add_space_prefix`).

A GGUF stores such a vocabulary as tokens (spaces spelled '▁', bytes as
'<0xAB>' tokens of type 6), scores and types, without merges. We rebuild the
BPE that transformers builds from the same file (its GGUF tokenizer mapping
for Gemma), so ids match it exactly:

- tokens made only of spaces are stored with real spaces ('  '); they are
  looked up spelled with '▁', so they are respelled first;
- merges come from the vocabulary: every token, best first, is cut into two
  tokens of the vocabulary at every point, longest left part first. Gemma's
  scores do not follow its merge order; the order of the tokens in the file
  does, so that is the rank;
- text is normalized ' ' → '▁' with no prefix space (Gemma's
  `add_space_prefix` is false) and not split further; unknown characters fall
  back to byte tokens;
- control tokens (type 3) are special added tokens and user-defined ones
  (type 4, e.g. '\\n\\n') are always matched whole, as in tokenizer.py.

Decoding maps '▁' back to a space and byte tokens to their byte.
"""

from __future__ import annotations

import re

from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as Backend

TOKEN_TYPE_BYTE = 6
_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


class SentencePieceError(ValueError):
    """A SentencePiece vocabulary Strata can't rebuild; the text says why."""


def respell(tokens: list[str]) -> list[str]:
    """Tokens of spaces only are looked up as '▁' runs."""
    return ["\u2581" * len(t) if t and not t.strip(" ") else t for t in tokens]


def derive_merges(tokens: list[str], scores: list[float] | None = None) -> list[tuple[str, str]]:
    """Every split of each token into two vocabulary tokens, best token first (by `scores`, or by file
    order when None), then longer left parts first; ties keep the vocabulary's order."""
    vocab = {token: index for index, token in enumerate(tokens)}
    rank = {t: -i for t, i in vocab.items()} if scores is None else dict(zip(tokens, scores))
    found = []
    for token, score in rank.items():
        local = [(token[:cut], token[cut:]) for cut in range(1, len(token))
                 if token[:cut] in vocab and token[cut:] in vocab]
        local.sort(key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
        found.extend((left, right, score) for left, right in local)
    found.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)   # stable, as transformers sorts
    return [(left, right) for left, right, _ in found]


def token_bytes_table(tokens: list[str], token_types: list[int]) -> list[bytes]:
    """The bytes each id decodes to: byte tokens their byte, others their text with '▁' as a space."""
    table = []
    for token, kind in zip(tokens, token_types):
        match = _BYTE_TOKEN.match(token) if kind == TOKEN_TYPE_BYTE else None
        table.append(bytes([int(match.group(1), 16)]) if match else token.replace("\u2581", " ").encode("utf-8"))
    return table


GEMMA_ARCHS = ("gemma", "gemma2", "gemma3")


def build_backend(tokens: list[str], token_types: list[int], unk_id: int | None, add_space_prefix: bool,
                  arch: str | None = "gemma3", scores: list[float] | None = None) -> Backend:
    """The tokenizers BPE of a `llama` vocabulary (added tokens registered by the caller): Gemma's
    for the Gemma architectures, else Llama 2 / Mistral's (see build_llama_backend)."""
    if not any(kind == TOKEN_TYPE_BYTE for kind in token_types):
        raise SentencePieceError("the SentencePiece vocabulary has no byte tokens (<0x00>..<0xFF>); "
                                 "Strata supports byte-fallback vocabularies only")
    if arch not in GEMMA_ARCHS:
        return build_llama_backend(tokens, scores, add_space_prefix)
    if add_space_prefix:
        raise SentencePieceError("a Gemma vocabulary with tokenizer.ggml.add_space_prefix = true is not supported")
    spelled = respell(tokens)
    vocab = {token: index for index, token in enumerate(spelled)}
    unk = tokens[unk_id] if unk_id is not None and 0 <= unk_id < len(tokens) else None
    backend = Backend(models.BPE(vocab=vocab, merges=derive_merges(spelled), unk_token=unk, fuse_unk=True,
                                 byte_fallback=True))
    backend.normalizer = normalizers.Replace(" ", "\u2581")
    # transformers splits on ' ' after the normalizer has replaced every space: no split at all.
    backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    backend.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    return backend


def build_llama_backend(tokens: list[str], scores: list[float] | None, add_space_prefix: bool) -> Backend:
    """Llama 2 / Mistral SentencePiece (transformers' LlamaTokenizer from a GGUF): merges ranked by the
    tokens' scores, '▁' for spaces with one prefixed to the text when add_space_prefix (Metaspace,
    prepend 'first'), byte fallback. Decoding keeps that prefix space: ids decode token by token."""
    if scores is None:
        raise SentencePieceError("the SentencePiece vocabulary has no tokenizer.ggml.scores")
    vocab = {token: index for index, token in enumerate(tokens)}
    backend = Backend(models.BPE(vocab=vocab, merges=derive_merges(tokens, scores), fuse_unk=True, byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first" if add_space_prefix
                                                     else "never", split=False)
    backend.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    return backend


def add_typed_tokens(backend: Backend, tokens: list[str], token_types: list[int], arch: str | None = "gemma3") -> list[int]:
    """Control tokens as special added tokens, user-defined ones as whole added tokens; returns control ids."""
    spelled = respell(tokens) if arch in GEMMA_ARCHS else tokens
    controls = [i for i, kind in enumerate(token_types) if kind == 3]
    backend.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in controls])
    # Like transformers, user-defined tokens are added under their looked-up spelling only when that
    # spelling is unchanged ('\n\n' is; '  ' became '▁▁' and is left to the BPE).
    user = [i for i, kind in enumerate(token_types) if kind == 4 and spelled[i] == tokens[i]]
    backend.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i in user])
    return controls
