#!/usr/bin/env bash
# On the GPU machine, one call with no model: build, find any memory fault with compute-sanitizer,
# run the gpu-marked kernel tests, and time the matmul and small kernels. Logs under $OUT.
set -uo pipefail
bash scripts/gpu_wheels.sh
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
make -j"$(nproc)" lib > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
timeout 150 compute-sanitizer --tool memcheck --print-limit 5 python3 -m pytest -q -x -m gpu -p no:cacheprovider \
  tests/kernels/test_graphs.py tests/kernels/test_matmul_ex.py -k "graph_equals_eager or (batch_invariant and Q4_1)" \
  > "$OUT/sanitizer.log" 2>&1; echo "sanitizer rc=$?"; grep -m 12 -E "Invalid|Misaligned|at 0x|by thread|in .*kernel|passed|failed" "$OUT/sanitizer.log"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels > "$OUT/kernels.log" 2>&1
grep -E "^FAILED|^ERROR|passed|failed" "$OUT/kernels.log" | head -15
timeout 90 python3 bench/gpu_matmul.py "$@" 2>&1 | tee "$OUT/gpu_matmul.log" | tail -25
timeout 60 python3 bench/gpu_kernels.py --shapes 135M,8B --rows 1,64 --contexts 128,1024 2>&1 | tee "$OUT/gpu_kernels.log" | tail -30
