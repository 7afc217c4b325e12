#!/usr/bin/env bash
# On the GPU machine: run one benchmark command under several environment settings, back to back in
# one warm process tree, to A/B a runtime switch (STRATA_PDL, STRATA_ATTENTION, STRATA_INT_MATMUL, ...).
#   bash scripts/gpu_ab.sh "STRATA_PDL=0" "STRATA_PDL=1" -- python3 bench/gpu_decode.py --shapes 8b --types Q4_0
# Each setting's output goes to $OUT/ab_<tag>_<n>.log (tag: AB_TAG, else the start time, so a second A/B in the
# same call keeps the first one's logs) and is printed under a header; "-" is the unset setting.
# Needs a built library (scripts/gpu_prepare.sh or gpu_speed.sh prepare). See docs/gpu.md.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 STRATA_MODEL_CACHE=${STRATA_MODEL_CACHE:-/tmp/models}
settings=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do settings+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] && [ ${#settings[@]} -gt 0 ] || { echo "usage: gpu_ab.sh SETTING... -- COMMAND..." >&2; exit 2; }
tag=${AB_TAG:-$(date +%H%M%S)}
n=0
for s in "${settings[@]}"; do
  n=$((n + 1))
  echo "== [$n] ${s}"
  if [ "$s" = "-" ]; then "$@" > "$OUT/ab_${tag}_$n.log" 2>&1; else env $s "$@" > "$OUT/ab_${tag}_$n.log" 2>&1; fi
  echo "   rc=$?"; grep -v "^loading" "$OUT/ab_${tag}_$n.log" | tail -40
done
