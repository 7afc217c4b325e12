"""llama.cpp's figures measured beside Strata's in the same run, read from its benchmark tools' output.

bench/RESULTS.md quotes ratios against llama.cpp run on the same GGUF in the same warm machine. The
benchmark scripts take those figures from the files llama.cpp's tools wrote, one file per model:

- `llama-bench -m GGUF -p 512 -n 128 ...`, in its markdown table (the default) or `-o json` / `-o jsonl`:
  pp512 and tg128, tokens/s and their spread; with `-d N` (a context of N tokens first) the same tests
  are named "tg128@dN" ("tg128 @ dN" in its table);
- `llama-batched-bench -m GGUF -npp 128 -ntg 128 -npl 1,4,16,64 ...`, markdown or `--output-format jsonl`:
  S_TG (generated tokens/s across all sequences) per number of parallel sequences, the rows of 128 prompt and
  128 generated tokens only (what bench/gpu_decode.py runs).

A file that holds none of these, or figures of several models, is refused with a message that says so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

_TEST = re.compile(r"^(pp|tg)(\d+)(?: @ d(\d+))?$")
_TS = re.compile(r"^([0-9.]+)\s*±\s*([0-9.]+)$")
_BATCHED_TOKENS = 128  # gpu_decode.py's concurrent sequences: 128 prompt + 128 generated tokens each


class PeerError(ValueError):
    """A llama.cpp output file that cannot be read as the figures asked for."""


@dataclass
class Peer:
    """llama.cpp's figures for one GGUF: test name ("pp512", "tg128", "tg128@d4096" after a 4,096-token
    context) -> (tokens/s, spread), and S_TG per number of parallel sequences."""

    tests: dict[str, tuple[float, float]] = field(default_factory=dict)
    s_tg: dict[int, float] = field(default_factory=dict)


def json_records(text: str) -> list[dict]:
    """Every JSON object in `text`: one array (`-o json`), arrays one after another (runs appended to one
    file), or one object per line (`jsonl`); lines that are not JSON (a tool's log) are skipped."""
    decoder, records, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        if text[i] not in "[{":
            nl = text.find("\n", i)
            i = len(text) if nl < 0 else nl + 1
            continue
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise PeerError(f"broken JSON at character {exc.pos}: {exc.msg}") from None
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict):
                records.append(item)
    return records


def _md_cells(line: str) -> list[str] | None:
    line = line.strip()
    if not (line.startswith("|") and line.endswith("|")):
        return None
    return [c.strip() for c in line[1:-1].split("|")]


def _put(figures: dict, key, value, what: str) -> None:
    if key in figures and figures[key] != value:
        raise PeerError(f"it holds two different {what} figures (several models or runs in one file?): "
                        "give one file per model")
    figures[key] = value


def read_llama_bench(text: str) -> dict[str, tuple[float, float]]:
    """llama-bench's output (markdown, json or jsonl) -> {"pp512": (t/s, spread), "tg128": ..., "tg128@d4096": ...}."""
    tests: dict[str, tuple[float, float]] = {}
    if text.lstrip().startswith(("[", "{")):
        for rec in json_records(text):
            try:
                n_prompt, n_gen = int(rec["n_prompt"]), int(rec["n_gen"])
                depth = int(rec.get("n_depth", 0) or 0)
                value = (float(rec["avg_ts"]), float(rec.get("stddev_ts", 0.0)))
            except (KeyError, TypeError, ValueError):
                raise PeerError("a JSON record lacks n_prompt / n_gen / avg_ts: not llama-bench's output") from None
            if (n_prompt > 0) == (n_gen > 0):
                continue  # a pp+tg combination (-pg): not a figure the tables quote
            name = (f"pp{n_prompt}" if n_prompt else f"tg{n_gen}") + (f"@d{depth}" if depth > 0 else "")
            _put(tests, name, value, name)
    else:
        for line in text.splitlines():
            cells = _md_cells(line)
            if not cells or len(cells) < 2:
                continue
            test = next((m for m in map(_TEST.match, cells) if m), None)
            ts = _TS.match(cells[-1])
            if test and ts:
                name = test.group(1) + test.group(2) + (f"@d{test.group(3)}" if test.group(3) else "")
                _put(tests, name, (float(ts.group(1)), float(ts.group(2))), name)
    if not tests:
        raise PeerError("no pp / tg figures in it: expected llama-bench's markdown, json or jsonl output")
    return tests


def read_llama_batched(text: str) -> dict[int, float]:
    """llama-batched-bench's output (markdown or jsonl) -> {parallel sequences: S_TG}, 128 + 128-token rows."""
    s_tg: dict[int, float] = {}
    seen = 0
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rec = json.loads(line)
                pp, tg, pl, speed = int(rec["pp"]), int(rec["tg"]), int(rec["pl"]), float(rec["speed_tg"])
            except (ValueError, KeyError, TypeError):
                raise PeerError("a JSON line lacks pp / tg / pl / speed_tg: not llama-batched-bench's output") from None
        else:
            cells = _md_cells(line)
            if not cells or len(cells) != 10:
                continue
            try:
                pp, tg, pl = (int(c) for c in cells[:3])
                speed = float(cells[7])
            except ValueError:
                continue  # the header and its rule
        seen += 1
        if pp == _BATCHED_TOKENS and tg == _BATCHED_TOKENS:
            _put(s_tg, pl, speed, f"S_TG at {pl} sequences")
    if not seen:
        raise PeerError("no rows in it: expected llama-batched-bench's markdown or jsonl output")
    if not s_tg:
        raise PeerError(f"no rows of {_BATCHED_TOKENS} prompt + {_BATCHED_TOKENS} generated tokens "
                        f"(run it with -npp {_BATCHED_TOKENS} -ntg {_BATCHED_TOKENS})")
    return s_tg


def _split(spec: str, option: str) -> tuple[str, Path]:
    gguf, sep, name = spec.rpartition("=")
    if not sep or not gguf or not name:
        raise PeerError(f"{option} {spec!r}: expected GGUF=FILE (the model llama.cpp read, then its output)")
    return str(Path(gguf).expanduser().resolve()), Path(name).expanduser()


def load_peers(bench_specs: list[str], batched_specs: list[str]) -> dict[str, Peer]:
    """`--llama-bench GGUF=FILE` and `--llama-batched GGUF=FILE` options -> {resolved GGUF path: Peer}."""
    peers: dict[str, Peer] = {}
    for option, specs, reader in (("--llama-bench", bench_specs, read_llama_bench),
                                  ("--llama-batched", batched_specs, read_llama_batched)):
        for spec in specs:
            gguf, path = _split(spec, option)
            try:
                figures = reader(path.read_text(encoding="utf-8", errors="replace"))
            except OSError as exc:
                raise PeerError(f"{option} {path}: {exc.strerror or exc}") from None
            except PeerError as exc:
                raise PeerError(f"{option} {path}: {exc}") from None
            peer = peers.setdefault(gguf, Peer())
            (peer.tests if option == "--llama-bench" else peer.s_tg).update(figures)
    return peers
