#!/usr/bin/env bash
# On the GPU machine, after scripts/gpu_check.sh joined the model: the benchmark table and the
# per-kernel profiles. Arguments go to bench/gpu_decode.py (default: the full grid of benchmark shapes).
set -uo pipefail
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 STRATA_MODEL_CACHE=/tmp/models
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 bench/gpu_decode.py --json "$OUT/gpu_decode.json" "$@" 2>&1 | grep -v "^loading" | tee "$OUT/gpu_decode.log"
for m in /tmp/strata-synth/synth-8b-Q4_0.gguf /tmp/models/SmolLM2-135M-Instruct.Q4_1.gguf; do
  [ -f "$m" ] || continue
  for rows in 1 64; do
    python3 bench/gpu_profile.py --model "$m" --rows "$rows" 2>&1 | grep -v "^loading" | tee -a "$OUT/gpu_profile.log"
  done
done
