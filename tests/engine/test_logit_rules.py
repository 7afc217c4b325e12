"""Masks, bias and penalties on the real default model: each request with a JSON
schema, a grammar, penalties, logit bias, min_tokens or a choice index,
mixed with plain requests under staggered admission, equals its solo run bit
for bit; each rule really changes the output (it is not a no-op), and the
grammar's output parses and validates."""

import json

import pytest

from strata.engine.sampling import InvalidRequest, SamplingParams
from strata.grammar.spec import GrammarSpec

from .harness import Job, run_script, solo
from .prompts import CHAT_QUESTIONS, chat_prompt

pytestmark = pytest.mark.exactness

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "rank": {"type": "integer"},
                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
          "required": ["city", "rank", "tags"], "additionalProperties": False}


def params(**kw) -> SamplingParams:
    base = dict(temperature=0.8, top_p=0.95, seed=5, max_tokens=20)
    base.update(kw)
    return SamplingParams(**base)


def variants():
    return {
        "plain": params(),
        "greedy": params(temperature=0),
        "schema": params(grammar=GrammarSpec.json_schema(SCHEMA), max_tokens=48),
        "json_object": params(grammar=GrammarSpec.json_object(), temperature=0, max_tokens=64),
        "lark": params(grammar=GrammarSpec("lark", 'start: "yes" | "no" | "maybe"'), max_tokens=8, ignore_eos=True),
        "penalties": params(presence_penalty=1.5, frequency_penalty=1.0, ignore_eos=True),
        "repetition": params(repetition_penalty=1.8, temperature=0, ignore_eos=True),
        "bias": params(logit_bias=((28, 5.0), (30, -100.0)), temperature=0),
        "min_tokens": params(min_tokens=18, temperature=0),
        "choice2": params(choice_index=2),
    }


def prompt(model, i: int) -> list[int]:
    return chat_prompt(model.tokenizer, model.chat_template, CHAT_QUESTIONS[i % len(CHAT_QUESTIONS)] +
                       " Reply in JSON.", repeat_context=2 if i % 4 == 1 else 0)


async def test_rules_exact_under_staggered_load(make_engine, loaded):
    _, model = loaded
    names = list(variants())
    jobs = [Job(prompt(model, i), variants()[name], at_step=(i * 3) % 11, name=name) for i, name in enumerate(names)]
    solo_engine = make_engine(batch=1, chunk=512)
    expected = [await solo(solo_engine, job.prompt, job.params) for job in jobs]
    engine = make_engine(batch=4, chunk=16)
    results, steps = await run_script(engine, jobs)
    assert max(len(s.decode) for s in steps) >= 3
    for job, result, want in zip(jobs, results, expected):
        assert result.token_ids == want.token_ids, f"{job.name} diverged from its solo run"
    by_name = dict(zip(names, results))
    for name in ("schema", "lark"):
        assert by_name[name].finish_reason == "stop", f"{name}: {by_name[name].text!r}"
    data = json.loads(by_name["schema"].text)
    assert set(data) == {"city", "rank", "tags"} and isinstance(data["rank"], int)
    obj = by_name["json_object"]      # greedy SmolLM2 may nest objects past max_tokens: then it is cut
    assert obj.text.lstrip().startswith("{")
    if obj.finish_reason == "stop":
        assert isinstance(json.loads(obj.text), dict)
    assert by_name["lark"].text in ("yes", "no", "maybe")
    assert by_name["min_tokens"].finish_reason == "length" or len(by_name["min_tokens"].token_ids) > 18


async def test_each_rule_changes_the_output(make_engine, loaded):
    """Negative control: with the rule off, the same request gives other tokens."""
    _, model = loaded
    engine = make_engine(batch=1, chunk=512)
    p = prompt(model, 0)
    plain = await solo(engine, p, params(temperature=0, ignore_eos=True, max_tokens=20))
    first = plain.token_ids[0]
    biased = await solo(engine, p, params(temperature=0, ignore_eos=True, max_tokens=20,
                                         logit_bias=((first, -100.0),)))
    assert biased.token_ids[0] != first
    forced = await solo(engine, p, params(temperature=0, max_tokens=3, logit_bias=((28, 100.0),)))
    assert forced.token_ids == [28, 28, 28]
    repeated = await solo(engine, p, params(temperature=0, ignore_eos=True, max_tokens=20, repetition_penalty=2.0))
    assert repeated.token_ids != plain.token_ids
    assert len(set(repeated.token_ids)) >= len(set(plain.token_ids))
    seeded = [await solo(engine, p, params(choice_index=i, max_tokens=12)) for i in (0, 1)]
    assert seeded[0].token_ids != seeded[1].token_ids
    assert seeded[0].token_ids == (await solo(engine, p, params(max_tokens=12))).token_ids


async def test_bad_rules_refused_then_exact(make_engine, loaded):
    _, model = loaded
    engine = make_engine(batch=2, chunk=64)
    p = prompt(model, 3)
    for bad, param in [(params(logit_bias=((10 ** 6, 1.0),)), "logit_bias"),
                       (params(logit_bias=((5, 101.0),)), "logit_bias"),
                       (params(presence_penalty=2.5), "presence_penalty"),
                       (params(repetition_penalty=0.0), "repetition_penalty"),
                       (params(min_tokens=30, max_tokens=20), "min_tokens"),
                       (params(grammar=GrammarSpec("lark", "start: undefined_rule")), "response_format"),
                       (params(grammar=GrammarSpec.json_schema({"type": "nonsense"})), "response_format")]:
        with pytest.raises(InvalidRequest) as info:
            engine.submit(p, bad)
        assert info.value.param == param, str(info.value)
    assert not engine.scheduler.has_work()
    want = await solo(make_engine(batch=1, chunk=512), p, params(grammar=GrammarSpec.json_object(), max_tokens=30))
    got = await solo(engine, p, params(grammar=GrammarSpec.json_object(), max_tokens=30))
    assert got.token_ids == want.token_ids


async def test_shared_table_row_negative_control(make_engine, loaded, monkeypatch):
    """Isolation is the point: if every sampled row read the first rule-carrying request's table rows
    (a shared adjustment row instead of one per slot), the plain request beside it would diverge from
    its solo run — so the exactness test above would catch such a bug."""
    from strata.engine.runner import ModelRunner

    _, model = loaded
    jobs = [Job(prompt(model, 0), params(temperature=0, max_tokens=12, ignore_eos=True,
                                         logit_bias=((28, 100.0),)), name="biased"),
            Job(prompt(model, 2), params(temperature=0, max_tokens=12, ignore_eos=True), at_step=1, name="plain")]
    want = await solo(make_engine(batch=1, chunk=512), jobs[1].prompt, jobs[1].params)
    original = ModelRunner._fill_inputs

    def shared_row(self, plan, *args):
        out = original(self, plan, *args)
        n_logits = out[-2]
        slots = [int(s) for s in self.io.adjust[:n_logits] if s >= 0]
        if slots:
            self.io.adjust[:n_logits] = slots[0]
        return out

    monkeypatch.setattr(ModelRunner, "_fill_inputs", shared_row)
    results, _ = await run_script(make_engine(batch=2, chunk=64, graphs=False), jobs)
    # Both streams ran to their length (a failing step would end them early and pass vacuously).
    assert [r.finish_reason for r in results] == ["length", "length"]
    assert len(results[1].token_ids) == len(want.token_ids) == 12
    assert results[1].token_ids != want.token_ids


async def test_rules_never_draft(make_engine, loaded):
    """A slot has one adjustment row, right for its next token only: a request with rules must not be
    verified over drafted rows. On an engine that drafts (suffix drafter), such requests still equal
    their solo runs on an engine without drafting, and no draft is ever verified for them."""
    _, model = loaded
    p = chat_prompt(model.tokenizer, model.chat_template, "Repeat after me: one two three one two three one two")
    rules = [params(temperature=0, max_tokens=16, ignore_eos=True, repetition_penalty=1.3),
             params(temperature=0, max_tokens=16, ignore_eos=True, logit_bias=((28, 2.0),))]
    assert all(not r.validated().speculative for r in rules)
    assert params().validated().speculative
    plain_engine = make_engine(batch=1, chunk=512)
    want = [await solo(plain_engine, p, r) for r in rules]
    drafting = make_engine(batch=2, chunk=64, draft="suffix")
    got = [await solo(drafting, p, r) for r in rules]
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    assert sum(drafting.metrics.drafts.drafted.values()) == 0
    plain = await solo(drafting, p, params(temperature=0, max_tokens=16, ignore_eos=True))
    assert plain.token_ids and sum(drafting.metrics.drafts.drafted.values()) > 0   # the drafter does draft
