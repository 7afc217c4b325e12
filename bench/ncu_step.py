"""One decode step, kernel by kernel, from Nsight Compute's CSV (where a captured step's time goes).

`bench/gpu_profile.py --ncu-window` replays its captured step once inside the
profiler's window; Nsight Compute, started with `--profile-from-start off`,
then measures each of that step's kernels on its own (serialized: no
programmatic-launch overlap, no launch cost). This script reads the raw CSV
(`ncu --import R.ncu-rep --csv --page raw`) and prints:

  - the sum of the kernels' durations (against the captured graph's time, the
    difference is what the step spends between and across kernels);
  - the repeating per-layer sequence (found as the shortest period of kernel
    names), each position's mean duration over the layers, its DRAM bytes and
    the bandwidth they imply where the CSV has `dram__bytes_read.sum`;
  - totals per kernel name.

    python bench/ncu_step.py step.csv [--graph-ms 2.298] [--roofline-tbs 4.27]
"""

from __future__ import annotations

import argparse
import collections
import csv
import re
import sys

_UNIT_SCALE = {"ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "nsecond": 1e-3,
               "second": 1e6, "s": 1e6}
_BYTES_SCALE = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9, "B": 1.0}


def short_name(full: str) -> str:
    """`void ns::(anonymous namespace)::int_gemv_kernel<2, 1>(Params)` -> `int_gemv_kernel<2, 1>`."""
    s = full.strip()
    if s.startswith("void "):
        s = s[5:]
    # anonymous namespaces: the demangler's spelling, and ncu's Kernel Name column's (`unnamed>::`)
    s = re.sub(r"\(anonymous namespace\)::|<unnamed>::|unnamed>::", "", s)
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):  # drop the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    s = s[:cut]
    s = re.sub(r"^(\w+::)+", "", s)
    return s


def read_rows(path: str) -> list[dict]:
    """The kernel rows of a raw-page CSV, in launch order, with durations in us and DRAM bytes."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own log lines are unquoted
    reader = csv.reader(lines)
    header = next(reader)
    units = next(reader)
    col = {name: i for i, name in enumerate(header)}
    if "Kernel Name" not in col or "gpu__time_duration.sum" not in col:
        raise SystemExit(f"{path}: no 'Kernel Name' / 'gpu__time_duration.sum' columns (ncu --csv --page raw)")
    t_i = col["gpu__time_duration.sum"]
    t_scale = _UNIT_SCALE.get(units[t_i], None)
    if t_scale is None:
        raise SystemExit(f"{path}: unknown duration unit {units[t_i]!r}")
    d_i = col.get("dram__bytes_read.sum")
    d_scale = _BYTES_SCALE.get(units[d_i], None) if d_i is not None else None
    g_i = col.get("launch__grid_size")
    out = []
    for row in reader:
        if len(row) <= t_i or not row[t_i].strip():
            continue
        rec = {"name": short_name(row[col["Kernel Name"]]),
               "us": float(row[t_i].replace(",", "")) * t_scale}
        if d_i is not None and d_scale is not None and row[d_i].strip():
            rec["bytes"] = float(row[d_i].replace(",", "")) * d_scale
        if g_i is not None and row[g_i].strip():
            rec["grid"] = int(float(row[g_i].replace(",", "")))
        out.append(rec)
    return out


def layer_period(names: list[str], lo: int = 3, hi: int = 24) -> tuple[int, int, int]:
    """(period, start, repeats) of the longest run of kernel names repeating with the shortest period."""
    best = (0, 0, 0)  # (repeats, period, start)
    for p in range(lo, hi + 1):
        for start in range(0, min(p + 12, len(names))):
            n = 0
            while start + (n + 2) * p <= len(names) and names[start + n * p:start + (n + 1) * p] == \
                    names[start + (n + 1) * p:start + (n + 2) * p]:
                n += 1
            if n + 1 > best[0] or (n + 1 == best[0] and p < best[1]):
                best = (n + 1, p, start)
    return best[1], best[2], best[0]


def report(rows: list[dict], graph_ms: float | None, roofline_tbs: float | None) -> str:
    total = sum(r["us"] for r in rows)
    lines = [f"{len(rows)} kernels, durations summed: {total:,.1f} us"]
    if graph_ms:
        g = graph_ms * 1e3
        if total <= g:
            lines.append(f"captured graph: {g:,.1f} us; between and across kernels: {g - total:,.1f} us "
                         f"({100 * (1 - total / g):.1f} %)")
        else:  # each kernel measured alone: in the graph their starts and ends overlap (programmatic launch)
            lines.append(f"captured graph: {g:,.1f} us; the kernels alone add up to {total - g:,.1f} us more "
                         f"({100 * (total / g - 1):.1f} %): in the graph each one's start overlaps the previous one's end")
    names = [r["name"] for r in rows]
    period, start, n_layers = layer_period(names)
    if period:
        lines.append(f"\nper layer: {period} kernels repeated {n_layers} times from kernel {start}")
        has_bytes = all("bytes" in rows[start + i] for i in range(period))
        head = "| # | kernel | grid | mean us | share of step |"
        if has_bytes:
            head += " DRAM MB | GB/s |" + (" % of roofline |" if roofline_tbs else "")
        lines.append(head)
        lines.append("|" + " --- |" * (head.count("|") - 1))
        for i in range(period):
            sel = [rows[start + j * period + i] for j in range(n_layers)]
            us = sum(r["us"] for r in sel) / n_layers
            cells = [str(i), f"`{names[start + i]}`", str(sel[0].get("grid", "")), f"{us:.2f}",
                     f"{100 * us * n_layers / total:.1f} %"]
            if has_bytes:
                mb = sum(r["bytes"] for r in sel) / n_layers / 1e6
                gbs = mb * 1e6 / (us * 1e-6) / 1e9 if us > 0 else 0.0
                cells += [f"{mb:.2f}", f"{gbs:,.0f}"]
                if roofline_tbs:
                    cells.append(f"{100 * gbs / (roofline_tbs * 1e3):.0f} %")
            lines.append("| " + " | ".join(cells) + " |")
        layer_us = sum(r["us"] for r in rows[start:start + n_layers * period]) / n_layers
        lines.append(f"one layer: {layer_us:.2f} us; outside the layers: "
                     f"{total - layer_us * n_layers:.1f} us over {len(rows) - n_layers * period} kernels")
    by = collections.OrderedDict()
    for r in rows:
        c = by.setdefault(r["name"], [0, 0.0])
        c[0] += 1
        c[1] += r["us"]
    lines.append("\n| kernel | calls | us | share |")
    lines.append("| --- | ---: | ---: | ---: |")
    for name, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| `{name}` | {n} | {us:,.1f} | {100 * us / total:.1f} % |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --import R.ncu-rep --csv --page raw > this file")
    ap.add_argument("--graph-ms", type=float, default=None, help="the captured step's time (bench/gpu_profile.py)")
    ap.add_argument("--roofline-tbs", type=float, default=None, help="DRAM roofline in TB/s for the % column")
    args = ap.parse_args(argv)
    rows = read_rows(args.csv)
    if not rows:
        print(f"{args.csv}: no kernel rows", file=sys.stderr)
        return 1
    print(report(rows, args.graph_ms, args.roofline_tbs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
