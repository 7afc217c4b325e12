"""A load run's figures: aggregate tokens/s, TTFT and inter-token latency percentiles, streams equal to solo.

`summarize` gives a JSON-ready dict (also the `--json` output); `format_table`
prints it for people. Percentiles are nearest-rank over every request (TTFT)
or every gap between token-bearing chunks (ITL). Each turn of a conversation
is one stream; conversations also get a row per turn (TTFT, prompt tokens
and how many the server took from its prompt cache). Against a Strata server
the summary also says what its engine did meanwhile (`engine_steps`, from its
/metrics: server_steps.py): decode-only steps and steps with prompt tokens,
how many, their mean time and rows.
"""

from __future__ import annotations

import math

from .runner import LoadRun


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def peak_in_flight(results: list) -> int:
    """The most requests open at once (sent, not yet ended). Clients share one queue of requests, so against a
    server that answers faster than the stagger this stays below the number of clients."""
    events = sorted([(r.start, 1) for r in results] + [(r.end, -1) for r in results])  # an end before a start
    peak = open_now = 0                                                                  # at the same instant
    for _, step in events:
        open_now += step
        peak = max(peak, open_now)
    return peak


def summarize(run: LoadRun) -> dict:
    ok = [r for r in run.concurrent if r.ok]
    tokens = sum(r.num_tokens for r in ok)
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    gaps = [g for r in ok for g in r.gaps]
    summary = {
        "requests": len(run.concurrent),
        "clients": run.num_clients,
        "stagger_ms": round(run.stagger_s * 1000, 3),
        "max_tokens": run.workload.max_tokens,
        "turns": run.workload.turns,
        "cache_prompt": run.workload.cache_prompt,
        "prompt_tokens": list(run.workload.prompt_tokens),
        "sampling": run.workload.sampling,
        "ok": len(ok),
        "errors": len(run.concurrent) - len(ok),
        "wall_s": round(run.wall_s, 4),
        "peak_in_flight": peak_in_flight(run.concurrent),
        "generated_tokens": tokens,
        "tokens_per_s": round(tokens / run.wall_s, 2) if run.wall_s > 0 else None,
        "ttft_p50_ms": _ms(percentile(ttfts, 50)),
        "ttft_p99_ms": _ms(percentile(ttfts, 99)),
        "itl_p50_ms": _ms(percentile(gaps, 50)),
        "itl_p99_ms": _ms(percentile(gaps, 99)),
        "first_errors": [f"request {r.index}{_turn(r)}: {r.error}" for r in run.concurrent if not r.ok][:5],
    }
    if run.workload.turns > 1:
        summary["per_turn"] = [_turn_row(t, [r for r in ok if r.turn == t]) for t in range(run.workload.turns)]
    if run.steps is not None:
        summary["engine_steps"] = run.steps
    summary.update(_solo_comparison(run))
    return summary


def _turn(result) -> str:
    return f" turn {result.turn + 1}" if result.turn else ""


def _turn_row(turn: int, results: list) -> dict:
    reported = [r for r in results if r.cached_tokens is not None]
    return {
        "turn": turn + 1,
        "streams": len(results),
        "ttft_p50_ms": _ms(percentile([r.ttft for r in results if r.ttft is not None], 50)),
        "prompt_tokens": sum(r.prompt_tokens or 0 for r in results),
        "cached_tokens": sum(r.cached_tokens for r in reported) if reported else None,
    }


def _solo_comparison(run: LoadRun) -> dict:
    if run.solo is None:
        return {"solo_checked": False}
    solo = {(r.index, r.turn): r for r in run.solo}
    pairs = [(r, solo[r.index, r.turn]) for r in run.concurrent
             if r.ok and solo.get((r.index, r.turn)) and solo[r.index, r.turn].ok]
    by_ids = bool(pairs) and all(a.token_ids is not None and b.token_ids is not None for a, b in pairs)
    differing = [a for a, b in pairs if not a.same_output(b)]
    differ = sorted({a.index for a in differing})       # requests (conversations) with a differing stream
    return {
        "solo_checked": True,
        "compared": len(pairs),
        "equal_solo": len(pairs) - len(differing),
        "compared_by": "token ids" if by_ids else "text",
        "differ": differ,
        "solo_errors": sum(1 for r in run.solo if not r.ok),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def format_table(summary: dict, title: str = "") -> str:
    rows = [
        ("requests (ok / errors)", f"{summary['ok']} / {summary['errors']}"),
        ("clients, stagger", f"{summary['clients']}, {summary['stagger_ms']} ms"),
        ("prompt tokens (approx.)", ", ".join(map(str, summary["prompt_tokens"]))),
        ("max tokens, sampling", f"{summary['max_tokens']}, {summary['sampling']}"),
        *([("turns, cache_prompt", f"{summary['turns']}, {_cache(summary['cache_prompt'])}")]
          if summary["turns"] > 1 or summary["cache_prompt"] is not None else []),
        ("generated tokens", str(summary["generated_tokens"])),
        ("wall time", f"{summary['wall_s']:.2f} s"),
        ("peak requests in flight", str(summary["peak_in_flight"])),
        ("aggregate tokens/s", _fmt(summary["tokens_per_s"])),
        ("TTFT p50 / p99", f"{_fmt(summary['ttft_p50_ms'])} / {_fmt(summary['ttft_p99_ms'])} ms"),
        ("ITL p50 / p99", f"{_fmt(summary['itl_p50_ms'])} / {_fmt(summary['itl_p99_ms'])} ms"),
    ]
    steps = summary.get("engine_steps")
    if steps:
        rows.append(("decode-only steps", _steps(steps, "decode") + " decoding requests a step"))
        rows.append(("steps with a prompt", _steps(steps, "prompt") + " decoding requests and "
                     f"{_fmt(steps['prompt_tokens_per_prompt_step'])} prompt tokens a step"))
    if steps and "guesses_taken" in steps:
        rows.append(("decode-ahead guesses", f"{steps['guesses_taken']:,} taken, {steps['guesses_reused']:,} reused "
                                             f"by a changed plan, {steps['guesses_dropped']:,} dropped"))
    if "server_cpu_main_us_per_token" in summary:
        rows.append(("server CPU per token", f"{_fmt(summary['server_cpu_main_us_per_token'])} us main thread, "
                                             f"{_fmt(summary['server_cpu_all_us_per_token'])} us all threads"))
    if summary["solo_checked"]:
        rows.append(("streams equal to solo", f"{summary['equal_solo']} / {summary['compared']} "
                                              f"(by {summary['compared_by']})"))
        if summary["differ"]:
            rows.append(("differ from solo", ", ".join(map(str, summary["differ"][:20]))))
        if summary["solo_errors"]:
            rows.append(("solo errors", str(summary["solo_errors"])))
    for error in summary["first_errors"]:
        rows.append(("error", error))
    width = max(len(name) for name, _ in rows)
    lines = [title] if title else []
    lines += [f"{name.ljust(width)}  {value}" for name, value in rows]
    if summary.get("per_turn"):
        lines += ["", "| turn | streams | TTFT p50 (ms) | prompt tokens | cached tokens |",
                  "| ---: | ---: | ---: | ---: | ---: |"]
        lines += [f"| {t['turn']} | {t['streams']} | {_fmt(t['ttft_p50_ms'])} | {t['prompt_tokens']:,} | "
                  f"{'-' if t['cached_tokens'] is None else format(t['cached_tokens'], ',')} |"
                  for t in summary["per_turn"]]
    return "\n".join(lines)


def _steps(steps: dict, kind: str) -> str:
    return f"{steps[f'steps_{kind}']:,}, {_fmt(steps[f'step_ms_{kind}'])} ms each, " \
           f"{_fmt(steps[f'decode_requests_per_{kind}_step'])}"


def _cache(value) -> str:
    return "not sent" if value is None else ("true" if value else "false")


def _fmt(value) -> str:
    return "-" if value is None else f"{value:,.2f}"
