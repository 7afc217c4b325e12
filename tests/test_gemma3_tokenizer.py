"""The Gemma 3 SentencePiece vocabulary (the real gemma3-270m GGUF) against transformers.

transformers builds its tokenizer from the same GGUF (AutoTokenizer with
gguf_file); Strata rebuilds it in strata/tokenizer_spm.py. On a corpus of
prose, code, whitespace runs, newlines, several scripts, emoji, characters
only byte fallback can spell, and the turn tokens written as text, the ids
must be equal, specials included; decoding must give the text back, and
streamed pieces must join to the whole decode. Also the built-in chat
template's text and ids for a conversation.
"""

import pytest

from gguf_tokenizers import assert_ids_equal, gemma3_path, transformers_tokenizer

transformers = pytest.importorskip("transformers")

CORPUS = [
    "Hello world",
    "What is the capital of France? Answer in one sentence.",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\t\ttabs, new\nlines\n\n\nand\r\nwindows lines",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "<bos>literal bos and <eos> and <pad> in text",
    "Grüße aus Köln, café naïve façade — “quotes” and ‘single’ … ellipsis",
    "日本語のテキストと中文文本，还有한국어 텍스트.",
    "Русский текст и ελληνικά και עברית ועربية",
    "emoji 🤗🚀👩‍👩‍👧 and flags 🇫🇷",
    "rare: \x01\x02 control bytes, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and \U0001F9EC and ꙮ",
    "1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987",
    "x" * 300,
    "   \n  \n\t ",
    "",
]


@pytest.fixture(scope="module")
def model_path():
    return gemma3_path()


@pytest.fixture(scope="module")
def ours(model_path):
    from strata.models.gguf_spec import open_reader
    from strata.tokenizer import Tokenizer

    return Tokenizer.from_gguf(open_reader(model_path))


@pytest.fixture(scope="module")
def theirs(model_path):
    return transformers_tokenizer(model_path)


@pytest.mark.parametrize("text", CORPUS, ids=range(len(CORPUS)))
def test_ids_equal_transformers(ours, theirs, text):
    assert_ids_equal(ours, theirs, text)


@pytest.mark.parametrize("text", CORPUS, ids=range(len(CORPUS)))
def test_decode_round_trips(ours, text):
    ids = ours.encode(text, add_special=False)
    assert ours.decode(ids) == text
    stream = ours.stream_decoder()
    assert "".join(stream.push(i) for i in ids) + stream.flush() == text


def test_specials_and_ends(ours):
    assert ours.encode("<start_of_turn>", add_special=False) == [105]
    assert ours.encode("<start_of_turn>", add_special=False, parse_special=False) != [105]
    assert (ours.bos_id, ours.eos_id, ours.add_bos) == (2, 1, True)
    assert {1, 106} <= set(ours.eos_ids)     # <eos> and <end_of_turn> end generation
    assert ours.decode([105, 2364, 107], skip_special=True) == "user\n"


def test_builtin_chat_template(ours, theirs):
    from strata.chat_template import ChatTemplate

    template = ChatTemplate.for_tokenizer(ours, arch="gemma3")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi! "},
                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
    text = template.render(messages)
    assert text == ("<bos><start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                    "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")
    ids = ours.encode(text, add_special=False)
    assert ids == theirs(text, add_special_tokens=False).input_ids
    assert ids[:3] == [2, 105, 2364] and ids.count(2) == 1
