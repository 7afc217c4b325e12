"""The output processor alone, on a small real byte-level tokenizer (no model): stop strings held back
until certain, stop and EOS ids, special tokens hidden, and text that never splits a UTF-8 character."""

from __future__ import annotations

import pytest

from strata.engine.output import OutputProcessor


def byte_ids(text: str) -> list[int]:
    """The byte tokens (ids 0..255) that spell `text` in UTF-8."""
    return list(text.encode("utf-8"))


def run(processor: OutputProcessor, ids: list[int]) -> tuple[list[str], str | None]:
    """Pushes ids until one ends the request; returns every emitted piece and the reason."""
    pieces = []
    for token in ids:
        text, reason = processor.push(token)
        pieces.append(text)
        if reason is not None:
            return pieces, reason
    pieces.append(processor.finish())
    return pieces, None


@pytest.fixture
def make(byte_tokenizer):
    def make(stop=(), stop_ids=(), eos=True):
        eos_ids = frozenset(byte_tokenizer.eos_ids) if eos else frozenset()
        return OutputProcessor(byte_tokenizer, tuple(stop), eos_ids, stop_ids)
    return make


def test_without_stops_every_token_is_emitted_at_once(make, byte_tokenizer):
    ids = [256, 257, 257]                         # "hello", " world", " world"
    pieces, reason = run(make(), ids)
    assert pieces == ["hello", " world", " world", ""] and reason is None


def test_a_character_split_across_tokens_is_emitted_whole(make):
    ids = byte_ids("a😀é")                         # 1 + 4 + 2 bytes
    pieces, reason = run(make(), ids)
    assert pieces == ["a", "", "", "", "😀", "", "é", ""] and reason is None


def test_an_unfinished_character_at_the_end_becomes_a_replacement_character(make):
    pieces, _ = run(make(), byte_ids("ok") + byte_ids("😀")[:2])
    assert "".join(pieces) == "ok\ufffd"


def test_text_that_may_start_a_stop_string_is_held_back_until_certain(make):
    processor = make(stop=["END!"])
    assert processor.push(ord("a")) == ("", None)  # 3 characters are always held (len("END!") - 1)
    assert processor.push(ord("E")) == ("", None)
    assert processor.push(ord("N")) == ("", None)
    assert processor.push(ord("x")) == ("a", None)  # "ENx" can no longer be "END!": released in order
    assert processor.finish() == "ENx"


def test_a_stop_string_ends_the_request_and_is_not_shown(make):
    pieces, reason = run(make(stop=["STOP"]), [256] + byte_ids(", then") + [258] + byte_ids(" more"))
    assert reason == "stop" and "".join(pieces) == "hello, then "


def test_a_stop_string_split_over_tokens_and_inside_one_token(make):
    for ids in (byte_ids("xxSTOPyy"), byte_ids("xx") + [258]):
        pieces, reason = run(make(stop=["STOP"]), ids)
        assert reason == "stop" and "".join(pieces).rstrip() == "xx", ids


def test_the_earliest_of_several_stop_strings_wins(make):
    pieces, reason = run(make(stop=["world", "lo w"]), [256, 257])
    assert reason == "stop" and "".join(pieces) == "hel"


def test_a_stop_string_made_of_multibyte_characters(make):
    pieces, reason = run(make(stop=["é😀"]), byte_ids("café😀!"))
    assert reason == "stop" and "".join(pieces) == "caf"


def test_eos_and_stop_ids_end_the_request_releasing_held_text(make):
    processor = make(stop=["zzzz"])
    for c in b"abc":
        processor.push(c)
    assert processor.push(259) == ("abc", "stop")             # <|im_end|>, the EOS: not shown
    processor = make(stop_ids=[ord("!")], eos=False)
    assert run(processor, byte_ids("hi!x")) == (["h", "i", ""], "stop")


def test_special_tokens_are_not_shown_when_they_do_not_end_the_request(make):
    pieces, reason = run(make(eos=False), [256, 259, 257])
    assert "".join(pieces) == "hello world" and reason is None


def test_ids_past_the_vocabulary_give_no_text(make):
    assert run(make(), [256, 10_000, 257]) == (["hello", "", " world", ""], None)
