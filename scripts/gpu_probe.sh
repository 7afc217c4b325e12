#!/usr/bin/env bash
# On the GPU machine, one short call that answers "where does the matmul time go" before kernel work:
# builds libstrata with -lineinfo, synthesizes the 135m/1b/8b Q4_0 files in the background, reads the
# hardware counters (ncu) of the integer matmul kernels on the 8B decode and prompt shapes, then A/Bs
# runtime switches on whole decode runs.
#   bash scripts/gpu_probe.sh WHEELS_DIR TOKENIZER_GGUF ["SETTING" ...]
# SETTINGs as for scripts/gpu_ab.sh ("-" is the default); NCU_SHAPES ("DTYPE N_OUT K ROWS;...") replaces
# the shapes and PROBE_DECODE=0 skips the decode A/B. Logs under $OUT; a summary prints last. docs/gpu.md.
set -uo pipefail
whl=$1 tok=$2; shift 2
settings=("$@"); [ ${#settings[@]} -gt 0 ] || settings=("-")
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 STRATA_MODEL_CACHE=/tmp/models
SYN=/tmp/strata-synth; mkdir -p "$SYN" /tmp/models
bash scripts/gpu_wheels.sh "$whl" \
  > "$OUT/pip.log" 2>&1 || tail -5 "$OUT/pip.log"
( time make -j"$(nproc)" lib EXTRA_NVCCFLAGS=-lineinfo ) > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
tail -3 "$OUT/build.log"
cp "$tok" /tmp/tok.gguf
setsid nohup bash -c "for m in 135m:Q4_0 1b:Q4_0 8b:Q4_0; do s=\${m%%:*} t=\${m##*:}; f=$SYN/synth-\$s-\$t.gguf;
    [ -f \$f ] || python3 -m strata.cli synth --shape \$s --dtype \$t --out \$f.part --tokenizer-from /tmp/tok.gguf \
    --quiet && mv \$f.part \$f; done; echo synth-done" > /tmp/synth.txt 2>&1 < /dev/null &
IFS=';' read -r -a shapes <<< "${NCU_SHAPES:-Q4_0 28672 4096 1;Q4_0 4096 14336 1;Q4_0 6144 4096 1;Q4_0 28672 4096 8;Q4_0 28672 4096 64;Q4_0 28672 4096 512;Q4_0 4096 14336 512}"
for s in "${shapes[@]}"; do
  set -- $s
  name="ncu_$1_$2x$3_r$4"
  timeout 150 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section InstructionStats --section SourceCounters \
    -k "regex:int_(dot|mma|rows|tiles|gemv)_kernel" --launch-skip 2 --launch-count 1 \
    python3 scripts/ncu_matmul.py --dtype "$1" --n-out "$2" --k "$3" --rows "$4" > "$OUT/$name.txt" 2>&1
  echo "== $s (rc=$?)"
  grep -E "int_[a-z]+_kernel|Duration|DRAM Throughput|Compute \(SM\) Thr|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|No Eligible" "$OUT/$name.txt" | head -12
done
[ "${PROBE_DECODE:-1}" = 0 ] && exit 0
for i in $(seq 1 90); do grep -q synth-done /tmp/synth.txt && break; sleep 2; done
cat /tmp/synth.txt
bash scripts/gpu_ab.sh "${settings[@]}" -- python3 bench/gpu_decode.py --shapes 135m 1b 8b --types Q4_0 --concurrency 1
