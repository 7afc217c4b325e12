"""Side-by-side table of several sampler versions' `bench/gpu_sample_alone.cu` runs (scripts/gpu_sample_ab.sh).

The input is the runs' output concatenated, each run preceded by a line `== NAME ROUND`. For every setting,
vocabulary and row count it prints each version's µs per call over its rounds, and whether every run drew
the same ids (the hash each line ends with): versions that must draw the same tokens are checked by it.

    python3 bench/sample_ab_table.py runs.txt
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict

LINE = re.compile(r"(?P<setting>.+?)\s+(?P<vocab>\d+)\s+(?P<rows>\d+)\s+(?P<us>[\d.]+)\s+(?P<hash>[0-9a-f]+)$")


def parse(text: str):
    """(times, hashes, versions): times[(setting, vocab, rows, version)] = [µs per round], hashes[(setting,
    vocab, rows)] = the set of id hashes over every version and round, versions in order of appearance."""
    times: dict[tuple, list[float]] = defaultdict(list)
    hashes: dict[tuple, set[str]] = defaultdict(set)
    versions: list[str] = []
    version = None
    for line in text.splitlines():
        if line.startswith("== "):
            version = line.split()[1]
            if version not in versions:
                versions.append(version)
            continue
        m = LINE.match(line.rstrip())
        if m and version is not None:
            key = (m["setting"].strip(), int(m["vocab"]), int(m["rows"]))
            times[key + (version,)].append(float(m["us"]))
            hashes[key].add(m["hash"])
    return times, hashes, versions


def table(text: str) -> str:
    times, hashes, versions = parse(text)
    keys = sorted(hashes, key=lambda k: (k[1], k[2], k[0]))
    cells = {k: [" / ".join(f"{x:.2f}" for x in times.get(k + (v,), [])) for v in versions] for k in keys}
    width = max([len(v) for v in versions] + [len(c) for row in cells.values() for c in row] + [4])
    out = [f"{'setting':<24} {'vocab':>7} {'rows':>5} " + " ".join(f"{v:>{width}}" for v in versions) + "  same ids"]
    for k in keys:
        same = "yes" if len(hashes[k]) == 1 else "NO"
        out.append(f"{k[0]:<24} {k[1]:>7} {k[2]:>5} " + " ".join(f"{c:>{width}}" for c in cells[k]) + f"  {same}")
    return "\n".join(out)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        text = f.read()
    if not parse(text)[1]:
        print(f"sample_ab_table: no timed lines in {argv[0]} (did the runs fail? see the file)", file=sys.stderr)
        return 1
    result = table(text)
    print(result)
    return 1 if "  NO" in result else 0


if __name__ == "__main__":
    sys.exit(main())
