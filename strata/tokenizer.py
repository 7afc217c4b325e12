"""Text ↔ token ids for byte-level BPE models, from a GGUF or a Hugging Face directory.

A GGUF carries its tokenizer as metadata (docs/design.md, "Formats"): the vocabulary in
GPT-2's byte-to-unicode spelling, merges ranked by position, token types, the
special ids, and the name of the pre-tokenizer (see strata.pretokenize). We
rebuild it with the `tokenizers` library. Control tokens (type 3) become
special added tokens, matched whole in text when parse_special is on;
user-defined tokens (type 4) are matched whole always and survive
skip_special, as in llama.cpp.

Decoding goes through one table of raw bytes per id, shared by `decode` and
`StreamDecoder`, so streamed pieces always concatenate to the full decode.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Iterable

from gguf import GGUFReader
from tokenizers import AddedToken, decoders, models
from tokenizers import Tokenizer as Backend

from strata.pretokenize import PreTokenizerRule, UnknownPreTokenizerError, rule_for

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

# Tokens that end a turn in common chat formats; generation stops on any present as a special token.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>")


class TokenizerError(ValueError):
    """A tokenizer that can't be built from the given metadata; the text says why."""


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's spelling of bytes as printable characters: printable Latin-1 bytes stand for
    themselves; the other 68 bytes take code points 256, 257, ... in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    spelling = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in spelling:
            spelling[b] = chr(256 + extra)
            extra += 1
    return spelling


_UNICODE_TO_BYTE = {c: b for b, c in byte_to_unicode().items()}


def token_bytes_of(token: str) -> bytes:
    """The raw bytes a byte-level token stands for; a token outside the byte alphabet
    (an added token such as '<|im_start|>' with a space in it) stands for its own UTF-8."""
    try:
        return bytes(_UNICODE_TO_BYTE[c] for c in token)
    except KeyError:
        return token.encode("utf-8")


class Tokenizer:
    """encode / decode for one model. Build with `from_gguf` or `from_hf_dir`."""

    def __init__(
        self,
        backend: Backend,
        id_to_token: list[str],
        *,
        special_ids: Iterable[int],
        bos_id: int | None,
        eos_id: int | None,
        pad_id: int | None = None,
        unk_id: int | None = None,
        extra_eos_ids: Iterable[int] = (),
        add_bos: bool = False,
        add_eos: bool = False,
        chat_template: str | None = None,
        backend_adds_specials: bool = False,
        token_bytes: list[bytes] | None = None,
    ):
        self._backend = backend
        self._literal_backend: Backend | None = None  # same, but special tokens are plain text
        self._literal_lock = threading.Lock()
        self._id_to_token = id_to_token
        self._token_bytes = token_bytes if token_bytes is not None else [token_bytes_of(t) for t in id_to_token]
        self.special_ids = frozenset(special_ids)
        self.bos_id, self.eos_id, self.pad_id, self.unk_id = bos_id, eos_id, pad_id, unk_id
        self.add_bos, self.add_eos = add_bos, add_eos
        self.chat_template = chat_template
        self._backend_adds_specials = backend_adds_specials
        self.eos_ids = frozenset(self._end_ids(extra_eos_ids))

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_gguf(cls, source: str | os.PathLike[str] | GGUFReader) -> Tokenizer:
        """From a GGUF's tokenizer.* metadata; pass an open GGUFReader to avoid parsing the file twice."""
        reader = source if isinstance(source, GGUFReader) else GGUFReader(source)
        meta = _GGUFMetadata(reader)
        model = meta.string("tokenizer.ggml.model")
        if model == "llama":
            return cls._from_gguf_sentencepiece(meta)
        if model != "gpt2":
            raise TokenizerError(f"tokenizer.ggml.model is {model!r}; Strata supports byte-level BPE ('gpt2') and "
                                 f"SentencePiece ('llama', Gemma-style) vocabularies")
        tokens = meta.strings("tokenizer.ggml.tokens")
        token_types = meta.numbers("tokenizer.ggml.token_type") or [1] * len(tokens)
        try:
            rule = rule_for(meta.string("tokenizer.ggml.pre"))
        except UnknownPreTokenizerError as error:
            raise TokenizerError(str(error)) from None
        backend = _gguf_backend(tokens, meta.strings("tokenizer.ggml.merges"), rule)
        controls = _add_typed_tokens(backend, tokens, token_types)
        return cls(
            backend,
            tokens,
            special_ids=controls,
            bos_id=meta.number("tokenizer.ggml.bos_token_id"),
            eos_id=meta.number("tokenizer.ggml.eos_token_id"),
            pad_id=meta.number("tokenizer.ggml.padding_token_id"),
            unk_id=meta.number("tokenizer.ggml.unknown_token_id"),
            extra_eos_ids=[i for i in (meta.number("tokenizer.ggml.eot_token_id"), meta.number("tokenizer.ggml.eom_token_id")) if i is not None],
            add_bos=_flag(meta.number("tokenizer.ggml.add_bos_token"), rule.adds_bos),
            add_eos=_flag(meta.number("tokenizer.ggml.add_eos_token"), False),
            chat_template=meta.string("tokenizer.chat_template"),
        )

    @classmethod
    def _from_gguf_sentencepiece(cls, meta: _GGUFMetadata) -> Tokenizer:
        """A `llama` (SentencePiece) vocabulary, rebuilt by strata.tokenizer_spm."""
        from strata import tokenizer_spm

        tokens = meta.strings("tokenizer.ggml.tokens")
        token_types = meta.numbers("tokenizer.ggml.token_type") or [1] * len(tokens)
        unk_id = meta.number("tokenizer.ggml.unknown_token_id")
        arch = meta.string("general.architecture")
        try:
            backend = tokenizer_spm.build_backend(tokens, token_types, unk_id,
                                                  _flag(meta.number("tokenizer.ggml.add_space_prefix"), True),
                                                  arch, None if arch in tokenizer_spm.GEMMA_ARCHS
                                                  else meta.floats("tokenizer.ggml.scores"))
        except tokenizer_spm.SentencePieceError as error:
            raise TokenizerError(str(error)) from None
        controls = tokenizer_spm.add_typed_tokens(backend, tokens, token_types, arch)
        return cls(
            backend,
            tokens,
            special_ids=controls,
            bos_id=meta.number("tokenizer.ggml.bos_token_id"),
            eos_id=meta.number("tokenizer.ggml.eos_token_id"),
            pad_id=meta.number("tokenizer.ggml.padding_token_id"),
            unk_id=unk_id,
            extra_eos_ids=[i for i in (meta.number("tokenizer.ggml.eot_token_id"), meta.number("tokenizer.ggml.eom_token_id")) if i is not None],
            add_bos=_flag(meta.number("tokenizer.ggml.add_bos_token"), True),
            add_eos=_flag(meta.number("tokenizer.ggml.add_eos_token"), False),
            chat_template=meta.string("tokenizer.chat_template"),
            token_bytes=tokenizer_spm.token_bytes_table(tokens, token_types),
        )

    @classmethod
    def from_hf_dir(cls, directory: str | os.PathLike[str]) -> Tokenizer:
        """From a Hugging Face checkpoint: tokenizer.json, tokenizer_config.json, generation_config.json."""
        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.is_file():
            raise TokenizerError(f"{directory} has no tokenizer.json")
        backend = Backend.from_file(str(path))
        spec = json.loads(path.read_text(encoding="utf-8"))
        decoder = (spec.get("decoder") or {}).get("type")
        if decoder != "ByteLevel":
            raise TokenizerError(f"{path} uses decoder {decoder!r}; Strata supports byte-level BPE tokenizers only")
        config = _read_json(directory / "tokenizer_config.json")
        vocab = backend.get_vocab(with_added_tokens=True)
        id_to_token = [""] * (max(vocab.values()) + 1)
        for token, index in vocab.items():
            id_to_token[index] = token
        specials = [t["id"] for t in spec.get("added_tokens", []) if t.get("special")]
        bos_id, eos_id, pad_id, unk_id = (_hf_token_id(config.get(f"{name}_token"), vocab) for name in ("bos", "eos", "pad", "unk"))
        # tokenizer.json's post-processor decides what encode(add_special=True) adds.
        prefix = backend.encode("", add_special_tokens=True).ids
        return cls(
            backend,
            id_to_token,
            special_ids=specials,
            bos_id=bos_id,
            eos_id=eos_id,
            pad_id=pad_id,
            unk_id=unk_id,
            extra_eos_ids=_generation_eos_ids(directory),
            add_bos=bos_id is not None and bos_id in prefix,
            chat_template=_hf_chat_template(directory, config),
            backend_adds_specials=True,
        )

    # -- the vocabulary -------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return len(self._id_to_token)

    def id_to_token(self, token_id: int) -> str:
        return self._id_to_token[token_id]

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes a token decodes to (control tokens: their text)."""
        return self._token_bytes[token_id]

    @property
    def bos_token(self) -> str | None:
        return None if self.bos_id is None else self._id_to_token[self.bos_id]

    @property
    def eos_token(self) -> str | None:
        return None if self.eos_id is None else self._id_to_token[self.eos_id]

    def _end_ids(self, extra: Iterable[int]) -> set[int]:
        ends = {self.eos_id, *extra}
        for token in END_OF_TURN_TOKENS:
            token_id = self._backend.token_to_id(token)
            if token_id is not None and token_id in self.special_ids:
                ends.add(token_id)
        return {i for i in ends if i is not None}

    # -- encode / decode ------------------------------------------------------------------

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of text. add_special: BOS/EOS as the model asks; parse_special: control
        tokens written in the text (e.g. '<|im_start|>') become their ids, else plain text."""
        backend = self._backend if parse_special else self._literal()
        ids = backend.encode(text, add_special_tokens=add_special and self._backend_adds_specials).ids
        if add_special and not self._backend_adds_specials:
            if self.add_bos and self.bos_id is not None:
                ids.insert(0, self.bos_id)
            if self.add_eos and self.eos_id is not None:
                ids.append(self.eos_id)
        return ids

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of ids; invalid UTF-8 (a sequence cut mid-character) shows as U+FFFD."""
        return self.decode_bytes(ids, skip_special).decode("utf-8", errors="replace")

    def decode_bytes(self, ids: Iterable[int], skip_special: bool = False) -> bytes:
        ids = list(ids)
        table = self._token_bytes
        if ids and not (0 <= min(ids) and max(ids) < len(table)):
            bad = [i for i in ids if not 0 <= i < len(table)]
            raise TokenizerError(f"token ids {bad[:5]} are outside the vocabulary (0..{len(table) - 1})")
        if skip_special:
            return b"".join(table[i] for i in ids if i not in self.special_ids)
        return b"".join(table[i] for i in ids)

    def stream_decoder(self, skip_special: bool = False) -> StreamDecoder:
        return StreamDecoder(self, skip_special)

    def _literal(self) -> Backend:
        with self._literal_lock:
            if self._literal_backend is None:
                literal = Backend.from_str(self._backend.to_str())
                literal.encode_special_tokens = True
                self._literal_backend = literal
            return self._literal_backend


class StreamDecoder:
    """Turns ids arriving one or a few at a time into text pieces that are always whole UTF-8.

    Bytes of a character split across tokens are held back until it completes;
    `flush()` releases whatever remains at the end. The pieces concatenate to
    `tokenizer.decode(all_ids)`.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False):
        self._tokenizer = tokenizer
        self._skip_special = skip_special
        self._pending = b""

    def push(self, ids: int | Iterable[int]) -> str:
        """Adds ids; returns the text they complete (possibly '')."""
        tokenizer = self._tokenizer
        table = tokenizer._token_bytes
        if isinstance(ids, int):     # one id per decode step: the engine's hot path, no lists
            # A model may sample ids past the tokenizer's table (Qwen pads its embedding rows): no text.
            if 0 <= ids < len(table) and not (self._skip_special and ids in tokenizer.special_ids):
                self._pending += table[ids]
        else:
            ids = [i for i in ids if 0 <= i < len(table)]
            self._pending += tokenizer.decode_bytes(ids, self._skip_special)
        if not self._pending:
            return ""
        cut = _complete_prefix_len(self._pending)
        ready, self._pending = self._pending[:cut], self._pending[cut:]
        return ready.decode("utf-8", errors="replace")

    def flush(self) -> str:
        """The held-back bytes, decoded as they are (an unfinished character becomes U+FFFD)."""
        rest, self._pending = self._pending, b""
        return rest.decode("utf-8", errors="replace")


def _complete_prefix_len(data: bytes) -> int:
    """Length of data without a trailing, still-incomplete UTF-8 sequence."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # the last lead (or ASCII) byte
            needed = _sequence_len(byte)
            return len(data) - back if back < needed else len(data)
    return len(data)  # only continuation bytes: invalid, nothing to wait for


def _sequence_len(lead: int) -> int:
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 1  # ASCII, or a byte that can't start a sequence


# -- GGUF -------------------------------------------------------------------------------------


class _GGUFMetadata:
    """Typed access to a GGUFReader's fields, reading array parts directly (fast for 50k strings)."""

    def __init__(self, reader: GGUFReader):
        self._fields = reader.fields

    def string(self, key: str) -> str | None:
        field = self._fields.get(key)
        return None if field is None else bytes(field.parts[field.data[0]]).decode("utf-8")

    def number(self, key: str) -> int | None:
        field = self._fields.get(key)
        return None if field is None else int(field.parts[field.data[0]][0])

    def strings(self, key: str) -> list[str]:
        field = self._require(key)
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    def floats(self, key: str) -> list[float] | None:
        field = self._fields.get(key)
        return None if field is None else [float(x) for x in field.contents()]

    def numbers(self, key: str) -> list[int] | None:
        field = self._fields.get(key)
        return None if field is None else [int(field.parts[i][0]) for i in field.data]

    def _require(self, key: str):
        field = self._fields.get(key)
        if field is None:
            raise TokenizerError(f"the GGUF has no {key} metadata; it can't be tokenized")
        return field


def _flag(value: int | None, default: bool) -> bool:
    return default if value is None else bool(value)


def _gguf_backend(tokens: list[str], merges: list[str], rule: PreTokenizerRule) -> Backend:
    vocab = {token: index for index, token in enumerate(tokens)}
    pairs = [_merge_pair(m) for m in merges]
    backend = Backend(models.BPE(vocab=vocab, merges=pairs, ignore_merges=rule.ignore_merges, fuse_unk=False, byte_fallback=False))
    normalizer = rule.normalizer()
    if normalizer is not None:
        backend.normalizer = normalizer
    backend.pre_tokenizer = rule.build()
    backend.decoder = decoders.ByteLevel()
    return backend


def _merge_pair(merge: str) -> tuple[str, str]:
    # "a b": the separator is the first space after the first character.
    split = merge.find(" ", 1)
    if split < 0:
        raise TokenizerError(f"malformed merge {merge!r} in tokenizer.ggml.merges")
    return merge[:split], merge[split + 1 :]


def _add_typed_tokens(backend: Backend, tokens: list[str], token_types: list[int]) -> list[int]:
    """Registers control tokens as special and user-defined ones as always-whole; returns control ids."""
    controls = [i for i, t in enumerate(token_types) if t == TOKEN_TYPE_CONTROL]
    user_defined = [i for i, t in enumerate(token_types) if t == TOKEN_TYPE_USER_DEFINED]
    backend.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in controls])
    backend.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i in user_defined])
    misplaced = [tokens[i] for i in controls + user_defined if backend.token_to_id(tokens[i]) != i]
    if misplaced:
        raise TokenizerError(f"the GGUF lists special tokens more than once ({misplaced[:3]}); its vocabulary is inconsistent")
    return controls


# -- Hugging Face directories --------------------------------------------------------------------


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _hf_token_id(token: str | dict | None, vocab: dict[str, int]) -> int | None:
    if isinstance(token, dict):
        token = token.get("content")
    return None if token is None else vocab.get(token)


def _generation_eos_ids(directory: Path) -> list[int]:
    eos = _read_json(directory / "generation_config.json").get("eos_token_id")
    return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)


def _hf_chat_template(directory: Path, config: dict) -> str | None:
    """chat_template.jinja, chat_template.json, or tokenizer_config.json's chat_template (a
    string, or a list of named templates of which 'default' is used)."""
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = _read_json(directory / "chat_template.json").get("chat_template") or config.get("chat_template")
    if isinstance(template, list):
        named = {entry.get("name"): entry.get("template") for entry in template}
        template = named.get("default")
    return template
