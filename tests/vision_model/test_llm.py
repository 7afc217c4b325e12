"""strata.LLM serves a Qwen2.5-VL checkpoint directory: chat with image parts, batched, exact."""

from __future__ import annotations

import pytest

from strata import LLM
from strata.vision.errors import MediaError
from strata.vision.media import MediaLimits

from .harness import GREEDY, Job, drive, encode, picture, user

CAT = picture(170, 140, 1)
CONVERSATIONS = [[user("what is in ", CAT, " this picture?")], [user("only text here")]]


async def engine_tokens(make_engine) -> list[list[int]]:
    engine = make_engine(batch=1)
    out = []
    for i, messages in enumerate(CONVERSATIONS):
        inputs = await encode(engine, messages)
        out.append((await drive(engine, [Job(str(i), inputs)]))[str(i)].tokens)
    return out


async def test_llm_chat_with_images_equals_the_engine(checkpoint, make_engine, device):
    if device != "cpu":
        pytest.skip("LLM opens its own context; one backend is enough")
    want = await engine_tokens(make_engine)
    with LLM(str(checkpoint), device="cpu", batch=2, ctx=512, chunk=8,
             media=MediaLimits(max_images_per_request=1)) as llm:
        got = llm.chat(CONVERSATIONS, GREEDY)
        assert [c.token_ids for c in got] == want
        with pytest.raises(MediaError, match="at most 1 are allowed"):
            llm.chat([user(CAT, CAT)], GREEDY)
