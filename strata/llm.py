"""LLM: the synchronous Python API — load a model, generate or chat, stream text.

    from strata import LLM, SamplingParams
    llm = LLM()                                   # the default model, the GPU when present
    print(llm.chat([{"role": "user", "content": "Hi!"}], SamplingParams(temperature=0))[0].text)

It runs the same Engine as `strata serve`, in an event loop on a background
thread (an anyio blocking portal), so batched calls here are exact in the same
way: every prompt gets the tokens it would get alone. `chat` takes OpenAI
content parts, images included (`{"type": "image_url", "image_url": {"url":
"data:image/png;base64,..."}}`) for a model with a vision tower.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import anyio
from anyio.from_thread import start_blocking_portal

from .config import EngineConfig
from .engine.engine import Engine
from .engine.sampling import SamplingParams
from .engine.stream import Completion
from .inputs import EngineInput, chat_ids, chat_input, completion_ids, completion_input
from .vision.media import MediaLimits

Prompt = str | Sequence[int]


class LLM:
    def __init__(self, model: str | None = None, *, media: MediaLimits | None = None, **settings):
        """settings: EngineConfig fields (device, batch, ctx, chunk, max_queue, num_threads, graphs, kv_pages,
        prefix_cache, host_cache);
        media: where chat images may come from and how large they may be (default: data: URLs only)."""
        config = EngineConfig(model=model or EngineConfig.model, **settings)
        self.media = media or MediaLimits()
        self.engine = Engine.create(config)
        self.tokenizer = self.engine.tokenizer
        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        self._loop_future = self._portal.start_task_soon(self.engine.run)

    @property
    def config(self) -> EngineConfig:
        return self.engine.config

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        return completion_ids(self.tokenizer, prompt)

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        return chat_ids(self.engine.model, self.tokenizer, messages, add_generation_prompt=add_generation_prompt)

    def generate(self, prompts: Prompt | list[Prompt], params: SamplingParams | list[SamplingParams] | None = None
                 ) -> list[Completion]:
        """Generates for every prompt concurrently; results in prompt order."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        return self._run_all([completion_input(self.engine, p) for p in prompts], params)

    def chat(self, conversations: list[dict] | list[list[dict]], params=None) -> list[Completion]:
        """One conversation (a list of messages) or several; returns one Completion each.
        Images in content parts are loaded under `media`, encoded and validated before anything is queued."""
        if conversations and isinstance(conversations[0], dict):
            conversations = [conversations]
        inputs = [self._portal.call(chat_input, self.engine, c, self.media) for c in conversations]
        return self._run_all(inputs, params)

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

    def _run_all(self, inputs: list[EngineInput], params) -> list[Completion]:
        if not isinstance(params, list):
            params = [params or SamplingParams()] * len(inputs)
        if len(params) != len(inputs):
            raise ValueError(f"{len(inputs)} prompts but {len(params)} SamplingParams")
        return self._portal.call(self._collect_all, inputs, params)

    async def _submit(self, prompt_ids, params):
        return self.engine.submit(prompt_ids, params)

    async def _collect_all(self, inputs: list[EngineInput], params) -> list[Completion]:
        streams = [self.engine.submit(i.prompt_ids, sp, **i.submit_kwargs()) for i, sp in zip(inputs, params)]
        results: list[Completion | None] = [None] * len(streams)

        async def collect(i, stream):
            results[i] = await stream.collect()

        async with anyio.create_task_group() as tg:
            for i, stream in enumerate(streams):
                tg.start_soon(collect, i, stream)
        return results

    def save_slot(self, slot: int, path) -> dict:
        """Writes the cached prefix of the slot's last request (tokens and KV pages) to `path`: the
        `POST /slots/{id}?action=save` of the server (docs/kv_pool.md). {"n_saved", "n_written"}."""
        from pathlib import Path

        from .engine import slot_files

        return self._portal.call(slot_files.save, self.engine, slot, Path(path))

    def restore_slot(self, path, slot: int = 0) -> dict:
        """Loads a file written by save_slot into the prefix cache; the next prompt that starts with its
        tokens maps those pages. {"n_restored", "n_read"}."""
        from pathlib import Path

        from .engine import slot_files

        return self._portal.call(slot_files.restore, self.engine, slot, Path(path))

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
