#!/usr/bin/env bash
# On the GPU machine (the device tool): one decode step of each synthesized model, kernel by kernel, under
# Nsight Compute — where a captured step's time goes (docs/gpu.md). Builds libstrata, synthesizes the Q4_0
# files it needs into /tmp/strata-synth (in the background, beside the build), then for each SHAPE:ROWS
#   - bench/gpu_profile.py: the captured graph's time and the synchronized per-call sums;
#   - the same step replayed once inside the profiler's window (--ncu-window) under
#     `ncu --profile-from-start off` (durations, DRAM bytes read, grid sizes; clocks and caches left alone);
#   - bench/ncu_step.py: the per-layer table (mean duration, share, GB/s and % of the roofline a kernel: the
#     card's device-to-device copy rate as gpu_profile.py measured it, or ROOFLINE_TBS), written to
#     $OUT/step_SHAPE_ROWS.md;
# then the warp states of the decode attention kernel at the first SHAPE (ATT_NCU=0 skips it).
#   bash scripts/gpu_step_ncu.sh [SHAPE:ROWS ...]     (default: 8b:1 1b:1 135m:1 8b:64; carry .whl, .carry-tok)
# REBUILD=0 keeps a build/libstrata.so already there (a warm machine's earlier call).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
SYN=/tmp/strata-synth; mkdir -p "$SYN"
specs=("$@"); [ ${#specs[@]} -gt 0 ] || specs=(8b:1 1b:1 135m:1 8b:64)
shapes=$(printf '%s\n' "${specs[@]}" | cut -d: -f1 | awk '!seen[$0]++' | tr '\n' ' ')
bash scripts/gpu_wheels.sh .whl > "$OUT/pip.log" 2>&1 || tail -3 "$OUT/pip.log"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
setsid nohup bash -c "for s in $shapes; do f=$SYN/synth-\$s-Q4_0.gguf; [ -f \$f ] || \
  python3 -m strata.cli synth --shape \$s --dtype Q4_0 --out \$f.part --tokenizer-from .carry-tok/tok.gguf --quiet \
  && mv \$f.part \$f; done; echo synth-done" > /tmp/synth.txt 2>&1 < /dev/null &
if [ ! -f build/libstrata.so ] || [ "${REBUILD:-1}" = 1 ]; then
  ( time make -j"$(nproc)" lib ) > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
  grep real "$OUT/build.log"
fi
for i in $(seq 1 150); do grep -q synth-done /tmp/synth.txt && break; sleep 2; done; cat /tmp/synth.txt
command -v ncu > /dev/null || { echo "gpu_step_ncu.sh: no ncu on the PATH"; exit 1; }
MET=gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size
for spec in "${specs[@]}"; do
  m=${spec%%:*} r=${spec##*:} tag=${spec/:/_}
  f=$SYN/synth-$m-Q4_0.gguf
  # the captured graph's time from a run of its own (ncu slows graph launches even outside its window)
  timeout 120 python3 bench/gpu_profile.py --model "$f" --rows "$r" > "$OUT/profile_$tag.log" 2>&1
  g=$(grep -o "captured graph: [0-9.]*" "$OUT/profile_$tag.log" | awk '{print $3}')
  # the card's own copy rate, as gpu_profile.py measured it ("weights at X TB/s"; ROOFLINE_TBS overrides)
  tbs=${ROOFLINE_TBS:-$(grep -o "weights at [0-9.]* TB/s" "$OUT/profile_$tag.log" | awk '{print $3}' | head -1)}
  timeout 200 ncu --profile-from-start off --clock-control none --cache-control none --metrics $MET -f -o "/tmp/r_$tag" \
    python3 bench/gpu_profile.py --model "$f" --rows "$r" --repeat 1 --ncu-window > "$OUT/ncu_run_$tag.log" 2>&1 \
    || tail -5 "$OUT/ncu_run_$tag.log"
  ncu --import "/tmp/r_$tag.ncu-rep" --csv --page raw > "$OUT/ncu_$tag.csv" 2>/dev/null
  python3 bench/ncu_step.py "$OUT/ncu_$tag.csv" ${g:+--graph-ms "$g"} --roofline-tbs "${tbs:-4.27}" \
    > "$OUT/step_$tag.md" 2>&1
  echo "== $spec: captured graph ${g:-?} ms"; sed -n 1,30p "$OUT/step_$tag.md"
done
if [ "${ATT_NCU:-1}" = 1 ]; then
  m=${specs[0]%%:*}
  timeout 150 ncu --profile-from-start off --clock-control none --cache-control none -k regex:attention_decode \
    --launch-count 1 --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy \
    --section SchedulerStats python3 bench/gpu_profile.py --model "$SYN/synth-$m-Q4_0.gguf" --rows 1 --repeat 1 \
    --ncu-window > "$OUT/ncu_attention_$m.txt" 2>&1
  grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Achieved Occupancy|Registers Per" \
    "$OUT/ncu_attention_$m.txt" | head -12
fi
