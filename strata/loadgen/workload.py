"""The requests a load run sends: prompts of chosen lengths and a mix of sampling settings.

Everything is derived from the request's index and the run's seed, so two
runs (or two servers) get exactly the same bodies. Prompt lengths are given
in approximate tokens (English words from a fixed list, ~1.3 tokens each);
the server's tokenizer decides the exact count.

With `turns` > 1 each request is a conversation: turn t sends the whole
conversation so far (the replies the server gave in earlier turns) plus a
follow-up question, the way a chat client does, so a server's prompt cache
can serve the earlier turns. `cache_prompt` (None: not sent) is the field
Strata and llama-server both read to turn that cache on or off per request.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Short, common words: tokenize to about 1.3 tokens each with byte-level BPE vocabularies.
WORDS = (
    "the of and to in is was for on that with as by at from his her they this are had not be but which have "
    "one you were all we when there can an their been has more if will would who so no other out about up "
    "time some them into only its could new then these two may first any like now my such make over our "
    "even most after also made many before must well back through years where much your way down should "
    "because long each just people state good very still own see men work world under last never house "
    "might while year great old off come since against go came right used take three small large water "
    "light river mountain city garden window letter music story morning evening winter summer market "
    "bridge forest island engine number question answer table paper road field bird stone cloud"
).split()

SHORT_QUESTIONS = (
    "What is the capital of France?",
    "Name three colours.",
    "What is 17 times 23?",
    "Say hello in Spanish.",
    "Why is the sky blue?",
    "Write a haiku about rain.",
)

FOLLOW_UPS = (
    "Tell me more about that.",
    "Can you give an example?",
    "Summarize your answer in one sentence.",
    "What is a common mistake here?",
    "Why does that matter?",
    "Explain it to a child.",
)

SAMPLING_MODES = ("mix", "greedy", "seeded")


@dataclass(frozen=True)
class Workload:
    """What every request of a run looks like; `body(i)` is request i's JSON body."""

    model: str
    num_requests: int
    prompt_tokens: tuple[int, ...] = (8, 64, 384, 1200)   # cycled over requests
    max_tokens: int = 64
    sampling: str = "mix"          # mix: greedy, then seeded temperature/top-p/top-k variants, in turn
    seed: int = 1234
    ignore_eos: bool = True        # every request generates max_tokens (fair throughput across servers)
    token_ids: bool = True         # ask for Strata's return_token_ids (other servers ignore it)
    turns: int = 1                 # turns per conversation (1: single requests)
    cache_prompt: bool | None = None   # sent as "cache_prompt" when set

    def __post_init__(self):
        if self.num_requests < 1:
            raise ValueError("the number of requests must be at least 1")
        if not self.prompt_tokens or min(self.prompt_tokens) < 1:
            raise ValueError("prompt lengths must be positive token counts")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if self.turns < 1:
            raise ValueError("turns must be at least 1")
        if self.sampling not in SAMPLING_MODES:
            raise ValueError(f"sampling must be one of {', '.join(SAMPLING_MODES)}, got {self.sampling!r}")

    def body(self, index: int, replies: tuple[str, ...] = ()) -> dict:
        """Request `index`'s body; with `replies` (the server's answers to its earlier turns), the body
        of turn len(replies): the conversation so far plus the next follow-up question."""
        if len(replies) >= self.turns:
            raise ValueError(f"request {index} has {self.turns} turn(s), asked for turn {len(replies) + 1}")
        messages = [{"role": "user", "content": self.prompt(index)}]
        for turn, reply in enumerate(replies, start=1):
            messages.append({"role": "assistant", "content": reply})
            messages.append({"role": "user", "content": FOLLOW_UPS[(index + turn) % len(FOLLOW_UPS)]})
        body = {
            "model": self.model,
            "messages": messages,
            "max_tokens": self.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            **self.sampling_fields(index),
        }
        if self.ignore_eos:
            body["ignore_eos"] = True
        if self.token_ids:
            body["return_token_ids"] = True
        if self.cache_prompt is not None:
            body["cache_prompt"] = self.cache_prompt
        return body

    def prompt(self, index: int) -> str:
        target = self.prompt_tokens[index % len(self.prompt_tokens)]
        question = SHORT_QUESTIONS[index % len(SHORT_QUESTIONS)]
        if target <= 16:
            return question
        rng = random.Random(self.seed * 1_000_003 + index)
        num_words = max(1, round((target - 12) / 1.3))
        notes = " ".join(rng.choice(WORDS) for _ in range(num_words))
        return f"Here are some notes: {notes}.\nRead them, then answer: {question}"

    def sampling_fields(self, index: int) -> dict:
        """Greedy, or a seeded draw: temperature alone, with top-p, with top-k, with both."""
        mode = self.sampling
        if mode == "mix":
            mode = "greedy" if index % 2 == 0 else "seeded"
        if mode == "greedy":
            return {"temperature": 0.0}
        variant = (index // 2) % 4
        fields = {"temperature": (0.7, 0.9, 1.0, 0.8)[variant], "seed": self.seed + index}
        if variant in (1, 3):
            fields["top_p"] = 0.9
        if variant in (2, 3):
            fields["top_k"] = 40
        return fields

    def describe(self, index: int) -> str:
        """A short label of request i's sampling, for tables."""
        fields = self.sampling_fields(index)
        if fields["temperature"] == 0.0:
            return "greedy"
        extra = "".join(f" {k}={fields[k]}" for k in ("top_p", "top_k") if k in fields)
        return f"T={fields['temperature']} seed={fields['seed']}{extra}"
