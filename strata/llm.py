"""LLM: the synchronous Python API — load a model, generate or chat, stream text.

    from strata import LLM, SamplingParams
    llm = LLM()                                   # the default model, the GPU when present
    print(llm.chat([{"role": "user", "content": "Hi!"}], SamplingParams(temperature=0))[0].text)

It runs the same Engine as `strata serve`, in an event loop on a background
thread (an anyio blocking portal), so batched calls here are exact in the same
way: every prompt gets the tokens it would get alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import anyio
from anyio.from_thread import start_blocking_portal

from .config import EngineConfig
from .engine.engine import Engine
from .engine.sampling import SamplingParams
from .engine.stream import Completion

Prompt = str | Sequence[int]


class LLM:
    def __init__(self, model: str | None = None, **settings):
        """settings: EngineConfig fields (device, batch, ctx, chunk, max_queue, num_threads, graphs)."""
        config = EngineConfig(model=model or EngineConfig.model, **settings)
        self.engine = Engine.create(config)
        self.tokenizer = self.engine.tokenizer
        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        self._loop_future = self._portal.start_task_soon(self.engine.run)

    @property
    def config(self) -> EngineConfig:
        return self.engine.config

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        return self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        text = self.engine.model.chat_template.render(messages, add_generation_prompt=add_generation_prompt)
        return self.tokenizer.encode(text, add_special=False)

    def generate(self, prompts: Prompt | list[Prompt], params: SamplingParams | list[SamplingParams] | None = None
                 ) -> list[Completion]:
        """Generates for every prompt concurrently; results in prompt order."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        ids = [self.encode_prompt(p) for p in prompts]
        return self._run_all(ids, params)

    def chat(self, conversations: list[dict] | list[list[dict]], params=None) -> list[Completion]:
        """One conversation (a list of messages) or several; returns one Completion each."""
        if conversations and isinstance(conversations[0], dict):
            conversations = [conversations]
        return self._run_all([self.render_chat(c) for c in conversations], params)

    def stream(self, prompt_ids: list[int], params: SamplingParams | None = None) -> Iterator:
        """Yields Events (text deltas and token ids) as the engine produces them."""
        stream = self._portal.call(self._submit, prompt_ids, params or SamplingParams())
        try:
            while True:
                try:
                    yield self._portal.call(stream.__anext__)
                except StopAsyncIteration:
                    return
        finally:
            self._portal.call(stream.aclose)

    def _run_all(self, ids: list[list[int]], params) -> list[Completion]:
        if not isinstance(params, list):
            params = [params or SamplingParams()] * len(ids)
        if len(params) != len(ids):
            raise ValueError(f"{len(ids)} prompts but {len(params)} SamplingParams")
        return self._portal.call(self._collect_all, ids, params)

    async def _submit(self, prompt_ids, params):
        return self.engine.submit(prompt_ids, params)

    async def _collect_all(self, ids, params) -> list[Completion]:
        streams = [self.engine.submit(p, sp) for p, sp in zip(ids, params)]
        results: list[Completion | None] = [None] * len(streams)

        async def collect(i, stream):
            results[i] = await stream.collect()

        async with anyio.create_task_group() as tg:
            for i, stream in enumerate(streams):
                tg.start_soon(collect, i, stream)
        return results

    def close(self) -> None:
        if self._portal_cm is not None:
            self._loop_future.cancel()
            try:
                self._portal_cm.__exit__(None, None, None)
            finally:
                self._portal_cm = None
            self.engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
