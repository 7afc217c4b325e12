"""Prompts for the engine tests: chat and raw, short to several-chunk long."""

CHAT_QUESTIONS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about the sea.",
    "List three prime numbers and explain why they are prime.",
    "Translate 'good morning' into Spanish and German.",
    "What does a CPU cache do?",
    "Give me a short recipe for pancakes.",
    "Why is the sky blue?",
    "Summarize the plot of Romeo and Juliet in two sentences.",
    "What is 17 times 23?",
]

LONG_TEXT = (
    "The history of computing is a story of abstraction layered on abstraction. Early machines were "
    "programmed by rewiring plugboards; then came stored programs, assemblers, compilers, operating "
    "systems, and networks. Each layer hid the details of the one beneath it, and each made new kinds "
    "of software possible. Today a single request to a web service may pass through dozens of such "
    "layers, from the browser's rendering engine down to the transistors switching in a datacenter. "
)


def chat_prompt(tokenizer, template, question: str, repeat_context: int = 0) -> list[int]:
    content = (LONG_TEXT * repeat_context + "\n\n" + question) if repeat_context else question
    text = template.render([{"role": "user", "content": content}], add_generation_prompt=True)
    return tokenizer.encode(text, add_special=False)
