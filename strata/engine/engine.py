"""Engine: the anyio loop that owns the device and serves requests through streams.

One loop task schedules steps; each step's device work runs in the engine's
device thread (device_thread.py; cffi releases the GIL), so the event loop
keeps serving clients while the device computes. Requests come in through
`submit`, which validates them first (docs/design.md, invariant 3), and their
tokens leave through one event channel per request (event_channel.py), as soon
as each token exists.
"""

from __future__ import annotations

import logging
import time

import anyio

from .. import _ffi
from ..config import PAGE_CELLS, EngineConfig, backend_of, default_device
from ..grammar.compiler import GrammarCompiler, GrammarError
from .logit_rules import LogitRules
from .device_thread import DeviceThread
from .drafting.factory import make_speculator
from .drafting.speculator import draft_state
from .event_channel import open_event_channel
from .host_cache import HostCache
from .kv_pool import KvPool
from .page_salt import rope_axes
from .sizing import fit_pool
from .metrics import EngineMetrics
from .output import Event, OutputProcessor
from .request import Request
from .runner import ModelRunner
from .sampling import InvalidRequest, SamplingParams
from .scheduler import QueueFull, Scheduler, StepPlan
from .stream import RequestStream

log = logging.getLogger("strata.engine")

__all__ = ["Engine", "InvalidRequest", "QueueFull"]


class Engine:
    def __init__(self, ctx: _ffi.Context, model, config: EngineConfig, drafter=None):
        """drafter: a draft source (strata.engine.drafting); None builds the one config.draft names."""
        self.ctx, self.model, self.config = ctx, model, config
        self.tokenizer = model.tokenizer
        self.metrics = EngineMetrics()
        speculator = make_speculator(ctx, model, config, drafter, self.metrics.drafts)
        self.runner = ModelRunner(ctx, model, config, speculator)
        # The MTP head fills its own cache from the main model's prefill rows, which a cached prefix skips.
        extra = config.draft_max if speculator is not None else 0
        cache = config.prefix_cache and config.draft != "mtp"
        host = HostCache(ctx, self.runner.slots, int(config.host_cache * (1 << 30))) \
            if cache and config.host_cache > 0 else None      # evicted cached pages spill there
        self.pool = KvPool(self.runner.slots.n_pages, config.ctx, extra, cache=cache, host=host,
                           axes=rope_axes(model.spec))
        self.scheduler = Scheduler(config.batch, config.chunk, config.max_queue, self.pool)
        self.step_observers: list = []          # callables(plan, result); tests watch interleaving with them
        self._outputs: dict[Request, tuple] = {}
        self._wake: anyio.Event | None = None
        self._device = DeviceThread()           # where steps and run_on_device calls run, one at a time
        self._running = False
        self._check_images = model.submission_check(config.ctx)   # None for a text-only model
        self.last_tokens: dict[int, list[int]] = {}   # slot -> the computed tokens of its last request (slot files)
        self.last_salts: dict[int, list] = {}         # slot -> the salts of those tokens' full pages (page_salt.py)
        self.grammars = GrammarCompiler(self.tokenizer, model.spec.vocab)

    @classmethod
    def create(cls, config: EngineConfig) -> "Engine":
        """Opens the device, loads the model and sizes the slots (blocking; seconds)."""
        from ..models.loader import load_model

        device = config.device or (config.devices[0] if config.devices else default_device())
        backend = backend_of(device)
        ctx = _ffi.Context(device, config.num_threads)
        if config.devices:            # the layer split: stage 0 on ctx, one context per further device
            from ..models.layer_split import load_split_model

            model = load_split_model(config.model, ctx, tuple(config.devices[1:]), config.layer_split,
                                     config.num_threads)
        else:
            model = load_model(config.model, ctx)
        explicit = frozenset(k for k in ("ctx", "kv_pages") if getattr(config, k) is not None)
        try:
            config = config.resolve(backend, model.spec.ctx_train)
            config = type(config)(**{**config.__dict__, "device": device})
            # A split's pool is mirrored on every stage: the device whose share of it fits least decides.
            fit = getattr(model.decoder, "pool_fit", None)
            spec, free = fit() if fit is not None else (model.spec, ctx.info().free_bytes)
            config, line = fit_pool(config, spec, free, explicit)
        except BaseException:
            model.close()
            ctx.close()
            raise
        log.info("%s", line)
        return cls(ctx, model, config)

    # ------------------------------------------------------------ requests

    def check_prompt(self, prompt_ids) -> None:
        """Raises InvalidRequest unless the prompt is 1 to ctx-1 token ids of this model's vocabulary.
        The input pipeline runs it before any work; submit runs it again for whoever submits directly."""
        if not isinstance(prompt_ids, (list, tuple)) or not prompt_ids:
            raise InvalidRequest("the prompt must contain at least one token", "prompt")
        ctx = self.config.ctx
        if len(prompt_ids) >= ctx:
            raise InvalidRequest(f"the prompt has {len(prompt_ids)} tokens but a slot holds {ctx}: send at most "
                                 f"{ctx - 1} prompt tokens", "prompt", code="context_length_exceeded")
        vocab = self.model.spec.vocab
        for t in prompt_ids:
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab:
                raise InvalidRequest(f"token id {t!r} is out of range: ids must be integers in [0, {vocab})", "prompt")

    def validate(self, prompt_ids, params: SamplingParams) -> SamplingParams:
        self.check_prompt(prompt_ids)
        params = params.validated()
        self.pool.check_fits(len(prompt_ids), params.max_tokens)
        return params

    def submit(self, prompt_ids, params: SamplingParams, *, positions=None, rope_delta: int = 0,
               vision=None, events=None) -> RequestStream:
        """Validates and queues a request; raises InvalidRequest (VisionRecordError for a vision model's
        images) or QueueFull, changing nothing.

        events: a (send, receive) pair of open_event_channel() that several requests share (the n
        choices of one API request); each request sends on its own clone, and its Events carry
        its params.choice_index."""
        params = self.validate(list(prompt_ids), params)
        if self._check_images is not None:
            self._check_images(list(prompt_ids), positions, rope_delta, vision)
        elif vision is not None:
            raise InvalidRequest("this model reads text only; it has no vision tower to take images",
                                 "messages", code="images_not_supported")
        eos = frozenset() if params.ignore_eos else frozenset(self.tokenizer.eos_ids)
        request = Request(list(prompt_ids), params, positions=positions, rope_delta=rope_delta, vision=vision,
                          rules=self._rules(list(prompt_ids), params, eos))
        if events is None:
            send, receive = open_event_channel()
        else:
            send, receive = events[0].clone(), events[1]
        processor = OutputProcessor(self.tokenizer, params.stop, eos, params.stop_token_ids)
        try:
            self.scheduler.submit(request)
        except QueueFull:
            self.metrics.count_outcome("rejected")
            if events is not None:
                send.close()
            raise
        self._outputs[request] = (send, processor)
        self._notify()
        return RequestStream(self, request, receive)

    def compile_grammar(self, spec) -> str:
        """The compiled grammar of a GrammarSpec (cached); InvalidRequest if it does not compile. The
        first call builds the tokenizer map (about a second): callers on an event loop run it in a thread."""
        try:
            return self.grammars.compile(spec)
        except GrammarError as exc:
            raise InvalidRequest(str(exc), exc.param) from None

    def _rules(self, prompt_ids: list[int], params: SamplingParams, eos: frozenset[int]) -> LogitRules | None:
        """The request's logit adjustments (None for a plain request); InvalidRequest for a bad grammar."""
        if not params.adjusts_logits:
            return None
        mask = None
        if params.grammar is not None:
            try:
                mask = self.grammars.matcher(self.compile_grammar(params.grammar))
            except GrammarError as exc:
                raise InvalidRequest(str(exc), exc.param) from None
        return LogitRules(params, prompt_ids, self.model.spec.vocab, eos | frozenset(params.stop_token_ids), mask)

    async def run_on_device(self, fn, *args):
        """fn(*args) on the device thread, never beside an engine step (the vision encoder shares the device)."""
        return await self._device.run(fn, *args)

    def cancel(self, request: Request) -> None:
        if not request.finished:
            request.cancelled = True
            self._notify()

    def _notify(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # ------------------------------------------------------------ the loop

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        """Serves until cancelled; on the way out, every open stream gets a final event."""
        self._wake = anyio.Event()
        self._device.choose()
        self._running = True
        task_status.started()
        try:
            while True:
                if not self.scheduler.has_work():
                    await self._wake.wait()
                    self._wake = anyio.Event()
                    continue
                await self._step()
        finally:
            self._running = False
            self._abort_all("cancelled", "the server is shutting down")
            self._device.stop()

    async def _step(self) -> None:
        started = time.monotonic()
        plan = self.scheduler.schedule()
        for request in list(self._outputs):
            if request.finished:
                self._close(request)
        released = self.scheduler.take_released()
        try:
            result = await self._device.run(self.runner.step, released, plan)
        except Exception as exc:   # a device or library failure: fail this step's requests, keep serving
            log.exception("engine step failed")
            for request in {*plan.decode, *(c.request for c in plan.prefill), *plan.admitted}:
                self._finish(request, "error", Event(error=f"internal error: {exc}"))
            self.scheduler.return_slots(self._reset_quietly(released + self.scheduler.take_released()))
            return
        self.scheduler.return_slots(released)
        self._postprocess(plan, result)
        self.metrics.count_step(time.monotonic() - started, len(plan.decode), sum(c.length for c in plan.prefill))
        for observer in self.step_observers:
            observer(plan, result)

    def _reset_quietly(self, slots: list[int]) -> list[int]:
        try:
            self.runner.release(slots)
        except Exception:
            log.exception("resetting slots %s failed", slots)
        return slots

    def _postprocess(self, plan: StepPlan, result) -> None:
        now = time.monotonic()
        for chunk in plan.prefill:
            chunk.request.num_computed += chunk.length
            chunk.request.num_prefill_steps += 1
            self.pool.share_prompt(chunk.request)
        for request, tokens in zip(plan.decode, result.tokens):
            request.num_computed += len(tokens)      # the row's token and every accepted draft
        logprobs = result.logprobs
        sampled = plan.sampled_requests() if plan.prefill else plan.decode
        for i, (request, tokens) in enumerate(zip(sampled, result.tokens)):
            lps = logprobs[i] if logprobs else None
            try:
                for j, token in enumerate(tokens):   # an accepted run: one token at a time, as plain decoding
                    if request.finished or request.cancelled:
                        break
                    self._accept_token(request, token, lps[j] if lps is not None else None, now)
            except Exception as exc:   # one request's output failed: end it, keep serving the others
                log.exception("processing the output of %s failed", request.request_id)
                self._finish(request, "error", Event(error=f"internal error: {exc}"))

    def _accept_token(self, request: Request, token: int, logprob, now: float) -> None:
        first = request.first_token_time is None
        request.record_token(token, now)
        grammar_done = False
        rules = request.rules
        if rules is not None:
            refused = rules.accept(token)
            if refused:
                self._finish(request, "error", Event(error=f"internal error: {refused}"))
                return
            grammar_done = rules.mask is not None and rules.mask.done
        m = self.metrics
        m.generated_tokens += 1
        if first:
            m.prompt_tokens += request.num_prompt
            m.cached_prompt_tokens += request.num_cached
            m.ttft.observe(request.ttft)
        else:
            times = request.token_times
            m.itl.observe(times[-1] - times[-2])
        send, processor = self._outputs[request]
        text, reason = processor.push(token)
        if reason is None and grammar_done:        # the grammar ended (with ignore_eos the end token is text)
            reason = "stop"
            text += processor.finish()
        if reason is None and (len(request.output_ids) >= request.params.max_tokens
                               or request.num_tokens > self.config.ctx):
            reason = "length"
            text += processor.finish()
        event = Event([token], text, [logprob] if logprob is not None else None)
        if reason is None:
            self._deliver(request, send, event)
        else:
            self._finish(request, reason, event)

    def _send(self, request: Request, event: Event) -> None:
        send, _ = self._outputs.get(request, (None, None))
        if send is not None:
            self._deliver(request, send, event)

    def _deliver(self, request: Request, send, event: Event) -> None:
        event.choice = request.params.choice_index
        try:
            send.send_nowait(event)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.cancel(request)          # the client went away

    def _finish(self, request: Request, reason: str, event: Event | None = None) -> None:
        if request.slot is not None and reason != "error":
            done = (request.prompt_ids + request.output_ids)[:request.num_computed]
            self.last_tokens[request.slot] = done
            self.last_salts[request.slot] = self.pool.salts(request, len(done) // PAGE_CELLS)
        self.scheduler.finish(request, reason)
        self.metrics.count_outcome(reason)
        self.metrics.e2e.observe(time.monotonic() - request.arrival_time)
        event = event or Event()
        event.finish_reason = reason
        request.error = request.error or event.error     # _close then sends no second final event
        event.prompt_tokens = request.num_prompt
        event.cached_tokens = request.num_cached
        event.completion_tokens = len(request.output_ids)
        self._send(request, event)
        self._close(request)
        self._notify()

    def _close(self, request: Request) -> None:
        send, _ = self._outputs.pop(request, (None, None))
        if send is not None:
            if request.finish_reason == "cancelled" and not request.error:
                try:
                    send.send_nowait(Event(finish_reason="cancelled", prompt_tokens=request.num_prompt,
                                           completion_tokens=len(request.output_ids),
                                           choice=request.params.choice_index))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.WouldBlock):
                    pass
                self.metrics.count_outcome("cancelled")
            send.close()

    def _abort_all(self, reason: str, message: str) -> None:
        for request in list(self._outputs):
            if not request.finished:
                self._finish(request, reason, Event(error=message))

    # ------------------------------------------------------------ state for /slots and /metrics

    def slot_states(self) -> list[dict]:
        out = []
        for slot in range(self.config.batch):
            request = self.scheduler.running.get(slot)
            if request is None:
                out.append({"id": slot, "state": "idle"})
            else:
                out.append({"id": slot, "state": "prefill" if request.in_prefill else "decode",
                             "request_id": request.request_id, "prompt_tokens": request.num_prompt,
                             "generated_tokens": len(request.output_ids), "cached_tokens": request.num_computed,
                             "prefix_cached_tokens": request.num_cached, "kv_pages": len(request.kv_pages or ()),
                             "tokens_per_s": request.tokens_per_s, **draft_state(request)})
        return out

    def close(self) -> None:
        self._device.stop()
        if self.pool.host is not None:
            self.pool.host.close()
        self.runner.close()
        self.model.close()
        self.ctx.close()
