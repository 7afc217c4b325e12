"""A/B of serving switches: serve_load against a fresh `strata serve` per setting, the settings alternating.

    python bench/serve_ab.py --model M.gguf --device cuda:0 - STRATA_PREFILL_HOLD_MS=50
    python bench/serve_ab.py --model M.gguf --device cuda:0 --rounds 2 --llama-server /path/llama-server \\
        STRATA_DECODE_BUCKET_48=1 STRATA_DECODE_BUCKET_48=0

Each SETTING is `-` (nothing set) or one or more `STRATA_NAME=VALUE` joined by commas; every name must be
declared in strata/env.py, so a typo stops the run before a server starts instead of timing the default
twice. The settings run in turn, `--rounds` times (ABAB, not AABB: a drift of the machine lands on both),
each against its own server on a free loopback port, with `bench/serve_load.py`'s workload (`--clients`,
`--max-tokens`; the last Strata run also reruns each request alone and counts the streams equal to their
solo runs, unless `--no-solo`). With `--llama-server`, llama-server on the same GGUF runs first and last
(`-np CLIENTS -c CTX*CLIENTS -fa on`; its shared libraries on LD_LIBRARY_PATH, as a llama.cpp build leaves
them in build/bin), so the peer is in the same run. Prints one table row per run (the
engine-step and decode-ahead rows come from Strata's /metrics), then each setting's mean tokens/s and its ratio
to llama-server's mean; `--json FILE` also writes every run's
serve_load summary. bench/RESULTS.md, 2026-12-06, was measured this way (then by a script kept out of git).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))   # run from a checkout without installing
sys.path.insert(0, str(ROOT / "bench"))

from server_process import free_port, stop, wait_ready  # noqa: E402  (bench/)
from strata import env  # noqa: E402

SERVE_LOAD = ROOT / "bench" / "serve_load.py"


def parse_setting(text: str) -> dict[str, str]:
    """`-` -> {}; `A=1,B=2` -> {A: 1, B: 2}, every name a declared STRATA_* variable; else ValueError."""
    if text == "-":
        return {}
    out = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep or not name:
            raise ValueError(f"setting {text!r}: expected '-' or NAME=VALUE[,NAME=VALUE...]")
        if name not in env.REGISTRY:
            raise ValueError(f"setting {text!r}: {name} is not a declared STRATA_* variable (see strata/env.py)")
        out[name] = value
    return out


def run_one(command: list[str], extra_env: dict[str, str], args, log: Path, solo: bool) -> dict:
    """Start the server, run serve_load against it (--json), stop it; its summary."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    base = {k: v for k, v in os.environ.items() if k != "STRATA_API_KEY"}
    # `python -m strata.cli` from this checkout, installed or not
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    with open(log, "wb") as out:
        proc = subprocess.Popen(command + ["--port", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                env={**base, **extra_env}, cwd=ROOT)
    try:
        if not wait_ready(proc, url, args.startup_timeout, path="/v1/models", poll_s=0.5):
            what = f"exited with {proc.returncode}" if proc.poll() is not None else \
                f"did not answer within {args.startup_timeout:.0f} s"
            raise RuntimeError(f"the server {what}:\n{log.read_text(errors='replace')[-2000:]}")
        load = [sys.executable, str(SERVE_LOAD), "--url", url, "--clients", str(args.clients),
                "--max-tokens", str(args.max_tokens), "--json"]
        load += ["--server-pid", str(proc.pid)] if solo else ["--no-solo"]
        done = subprocess.run(load, capture_output=True, text=True, env=base)
        if done.returncode not in (0, 1, 3) or not done.stdout.strip():
            raise RuntimeError(f"serve_load exited with {done.returncode}: {done.stderr.strip()[-2000:]}")
        return json.loads(done.stdout)
    finally:
        stop(proc)


def _num(value, digits=2) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def row(name: str, s: dict) -> str:
    st = s.get("engine_steps") or {}

    def steps(kind: str) -> str:
        if not st.get(f"steps_{kind}"):
            return ""
        text = f"{st[f'steps_{kind}']} x {_num(st[f'step_ms_{kind}'])} ms, {_num(st[f'decode_requests_per_{kind}_step'])}"
        return text + (f" + {_num(st['prompt_tokens_per_prompt_step'], 1)}" if kind == "prompt" else "")

    guesses = "/".join(str(st[f"guesses_{o}"]) for o in ("taken", "reused", "dropped")) if "guesses_taken" in st else ""
    equal = f"{s['equal_solo']} / {s['compared']}" if s.get("solo_checked") else ""
    errors = f" ({s['errors']} errors)" if s.get("errors") else ""
    return (f"| {name} | {_num(s.get('tokens_per_s'))}{errors} | {_num(s.get('wall_s'))} s | "
            f"{_num(s.get('ttft_p50_ms'))} / {_num(s.get('ttft_p99_ms'))} | "
            f"{_num(s.get('itl_p50_ms'))} / {_num(s.get('itl_p99_ms'))} | {steps('decode')} | {steps('prompt')} | "
            f"{guesses} | {equal} |")


def means(results: list[dict]) -> str:
    """Per setting (and llama-server): its runs' mean tokens/s, and the ratio to llama-server's mean where it ran."""
    order, by = [], {}
    for r in results:
        if r["setting"] not in by:
            order.append(r["setting"])
        by.setdefault(r["setting"], []).append(r.get("tokens_per_s") or 0.0)
    mean = {k: sum(v) / len(v) for k, v in by.items()}
    peer = mean.get("llama-server")
    lines = ["| setting | runs | mean tok/s | x llama-server |", "| --- | ---: | ---: | ---: |"]
    for k in order:
        ratio = f"{mean[k] / peer:.2f}x" if peer and k != "llama-server" else ""
        lines.append(f"| {k} | {len(by[k])} | {mean[k]:,.2f} | {ratio} |")
    return "\n".join(lines)


HEADER = ("| run | tok/s | wall | TTFT p50 / p99 ms | ITL p50 / p99 ms | decode-only steps (n x ms, rows) | "
          "steps with a prompt (n x ms, rows + prompt tokens) | guesses taken/reused/dropped | equal to solo |\n"
          "| --- | ---: | ---: | ---: | ---: | --- | --- | --- | ---: |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/serve_ab.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("settings", nargs="+", metavar="SETTING",
                        help="'-' (nothing set) or STRATA_NAME=VALUE[,STRATA_NAME=VALUE...], declared in strata/env.py")
    parser.add_argument("--model", required=True, help="the GGUF both servers load")
    parser.add_argument("--device", default="cuda:0", help="strata serve --device (default: cuda:0)")
    parser.add_argument("--batch", type=int, default=64, help="strata serve --batch (default: 64)")
    parser.add_argument("--ctx", type=int, default=2048, help="strata serve --ctx, and llama-server's per slot (default: 2048)")
    parser.add_argument("--rounds", type=int, default=2, help="times each setting runs, alternating (default: 2)")
    parser.add_argument("--clients", type=int, default=64, help="serve_load --clients (default: 64)")
    parser.add_argument("--max-tokens", type=int, default=128, help="serve_load --max-tokens (default: 128)")
    parser.add_argument("--no-solo", action="store_true", help="no solo reruns, not even in the last Strata run")
    parser.add_argument("--llama-server", default=None, metavar="PATH",
                        help="llama-server binary: run it on the same GGUF first and last")
    parser.add_argument("--startup-timeout", type=float, default=600.0, help="seconds a server may take to answer")
    parser.add_argument("--logs", default=os.environ.get("OUT", "."), help="folder for the servers' logs (default: $OUT or .)")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write every run's serve_load summary here")
    args = parser.parse_args(argv)
    try:
        settings = [(text, parse_setting(text)) for text in args.settings]
    except ValueError as exc:
        parser.error(str(exc))
    if args.rounds < 1 or args.clients < 1 or args.max_tokens < 1:
        parser.error("--rounds, --clients and --max-tokens must be at least 1")
    if not Path(args.model).is_file():
        parser.error(f"--model {args.model}: no such file")
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)

    strata_cmd = [sys.executable, "-m", "strata.cli", "serve", "--model", args.model, "--device", args.device,
                  "--batch", str(args.batch), "--ctx", str(args.ctx), "--log-level", "warning"]
    plan = [(f"{text} #{r + 1}", strata_cmd, extra) for r in range(args.rounds) for text, extra in settings]
    if args.llama_server:
        llama = [args.llama_server, "-m", args.model, "-ngl", "99", "-np", str(args.clients),
                 "-c", str(args.ctx * args.clients), "-fa", "on", "--host", "127.0.0.1"]
        plan = [("llama-server #1", llama, {})] + plan + [("llama-server #2", llama, {})]
    last_strata = max(i for i, p in enumerate(plan) if p[1] is strata_cmd)
    print(HEADER, flush=True)
    results = []
    for i, (name, command, extra) in enumerate(plan):
        log = logs / f"serve_ab_{i + 1}.log"
        try:
            summary = run_one(command, extra, args, log, solo=(i == last_strata and not args.no_solo))
        except (RuntimeError, OSError, ValueError) as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            return 2
        results.append({"run": name, "setting": name.rsplit(" #", 1)[0], "settings": extra, **summary})
        print(row(name, summary), flush=True)
    print()
    print(means(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if any(r.get("errors") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
