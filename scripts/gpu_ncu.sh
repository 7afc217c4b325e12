#!/usr/bin/env bash
# On the GPU machine, one call with no model: build, then read the hardware counters (ncu) of the
# tensor-core matmul on the shapes that dominate decode. Reports under $OUT; a summary prints last.
#   bash scripts/gpu_ncu.sh ["DTYPE N_OUT K ROWS" ...]
set -uo pipefail
bash scripts/gpu_wheels.sh
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
make -j"$(nproc)" lib > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
shapes=("$@"); [ ${#shapes[@]} -gt 0 ] || shapes=("Q4_0 28672 4096 1" "Q4_0 4096 4096 1" "Q4_1 960 576 1" "Q4_0 28672 4096 64")
for s in "${shapes[@]}"; do
  set -- $s
  name="ncu_$1_$2x$3_r$4"
  timeout 120 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    -k regex:mma --launch-skip 2 --launch-count 1 \
    python3 scripts/ncu_matmul.py --dtype "$1" --n-out "$2" --k "$3" --rows "$4" > "$OUT/$name.txt" 2>&1
  echo "== $s (rc=$?)"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Dynamic Shared|Block Limit|Warp Cycles Per Issued|Issued Warp|No Eligible|Stall|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Compute \(SM\)" "$OUT/$name.txt" | head -40
done
