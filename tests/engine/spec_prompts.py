"""Prompts where drafting has something to find: rewrite a paragraph, continue a code file, plain
chat questions. Shared by the speculative-decoding tests and bench/spec_decode.py."""

from __future__ import annotations

PARAGRAPH = (
    "The history of computing is a story of abstraction layered on abstraction. Early machines were "
    "programmed by rewiring plugboards; then came stored programs, assemblers, compilers, operating "
    "systems, and networks. Each layer hid the details of the one beneath it, and each made new kinds "
    "of software possible."
)

CODE = '''def mean(values):
    """The arithmetic mean of a non-empty list."""
    total = 0
    for value in values:
        total += value
    return total / len(values)


def variance(values):
    """The population variance of a non-empty list."""
    m = mean(values)
    total = 0
    for value in values:
        total += (value - m) ** 2
    return total / len(values)


def standard_deviation(values):
'''


def rewrite_prompt(tokenizer, template, paragraph: str = PARAGRAPH) -> list[int]:
    """Rewrite a given paragraph with one change: most of the answer quotes the prompt."""
    content = ("Rewrite the following paragraph, replacing the word 'computing' with 'software' and "
               "changing nothing else:\n\n" + paragraph)
    text = template.render([{"role": "user", "content": content}], add_generation_prompt=True)
    return tokenizer.encode(text, add_special=False)


def code_prompt(tokenizer) -> list[int]:
    """Continue a code file: the continuation repeats the file's own lines."""
    return tokenizer.encode(CODE, add_special=False)
