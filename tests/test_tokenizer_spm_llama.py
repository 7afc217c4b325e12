"""Llama 2 / Mistral-style SentencePiece vocabularies (`llama` model, add_space_prefix) against transformers.

A small SentencePiece vocabulary (byte tokens, pieces with '▁' for spaces and
falling scores, control and user-defined tokens) is written to a GGUF with
the gguf package's writer; transformers' tokenizer from that GGUF
(LlamaTokenizer: Metaspace with a prefix space, merges ranked by score, byte
fallback) and Strata's must give the same ids on a corpus, specials included.
"""

from collections import Counter

import pytest

from gguf_tokenizers import assert_ids_equal, transformers_tokenizer

transformers = pytest.importorskip("transformers")

TRAIN = ("the quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs far away. "
         "Numbers like 12, 345 and 6789 appear too, and so do questions? Yes! Mistral models use this vocabulary. "
         "[INST] instructions [/INST] answers follow the instructions closely. ") * 3
CORPUS = ["Hello world", "the fox and the dog", "  two leading spaces", "tabs\tnew\nlines\n\nend", "[INST] hi [/INST] ok",
          "unseen: Ωμέγα 日本 🤗", "<s>literal</s>", "", "questions? yes!", "x" * 50]


def spm_vocab():
    text = "\u2581" + TRAIN.replace(" ", "\u2581")
    counts = Counter(text[i:i + n] for n in range(2, 7) for i in range(len(text) - n + 1))
    pieces = sorted(set(text)) + [p for p, _ in counts.most_common(600)]
    tokens, types = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"], [2, 3, 3, 3, 3]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [6] * 256
    seen = set(tokens)
    for p in pieces:
        if p not in seen:
            seen.add(p)
            tokens.append(p)
            types.append(1)
    tokens.append("<|tool|>")
    types.append(4)
    scores = [0.0] * 261 + [-float(i) for i in range(len(tokens) - 262)] + [0.0]
    return tokens, scores, types


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory):
    import gguf

    tokens, scores, types = spm_vocab()
    path = tmp_path_factory.mktemp("spm") / "mistral-vocab.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def ours(gguf_path):
    from strata.tokenizer import Tokenizer

    return Tokenizer.from_gguf(str(gguf_path))


@pytest.fixture(scope="module")
def theirs(gguf_path):
    return transformers_tokenizer(gguf_path)


@pytest.mark.parametrize("text", CORPUS, ids=range(len(CORPUS)))
def test_ids_equal_transformers(ours, theirs, text):
    assert_ids_equal(ours, theirs, text)


def test_pieces_decode_with_the_prefix_space(ours):
    ids = ours.encode("the fox", add_special=False)
    assert ours.decode(ids) == " the fox"        # the prefix '▁' decodes as a space, token by token
    assert ours.encode("[INST]", add_special=False) == [3]
