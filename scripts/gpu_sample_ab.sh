#!/usr/bin/env bash
# On the GPU machine, no library build: time several versions of the CUDA sampler side by side with
# bench/gpu_sample_alone.cu (docs/gpu.md). Each version is NAME=DIR, DIR holding its cuda_sample_cluster.cu
# and cuda_sample_select.cuh (carry them in an ignored folder), or NAME=. for this tree's. The versions run
# alternately ROUNDS times (default 2); the table (bench/sample_ab_table.py) shows each one's µs per call
# and whether all drew the same ids. Then the last version's phase timeline (-DSAMPLE_PHASES; a version
# without the SAMPLE_PHASE hooks prints none). Logs under $OUT.
#   bash scripts/gpu_sample_ab.sh old=.carry-run/v_old new=.      [VOCABS=49152,128256,151936 ROWS=1,64]
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ $# -ge 1 ] || { echo "usage: gpu_sample_ab.sh NAME=DIR ..." >&2; exit 2; }
nvidia-smi -L 2>/dev/null
fl=(-O3 -std=c++17 -gencode arch=compute_90,code=sm_90)
names=()
for spec in "$@"; do
  name=${spec%%=*}; dir=${spec#*=}
  [ "$dir" = . ] && dir=libstrata/src/cuda
  [ -f "$dir/cuda_sample_cluster.cu" ] || { echo "gpu_sample_ab.sh: no $dir/cuda_sample_cluster.cu" >&2; exit 2; }
  names+=("$name")
  inc=(-I"$dir" -Ilibstrata/src/cuda -Ilibstrata/include -Ilibstrata/src)
  nvcc "${fl[@]}" "${inc[@]}" bench/gpu_sample_alone.cu -o "/tmp/sample_$name" > "$OUT/build_$name.log" 2>&1 &
done
nvcc "${fl[@]}" "${inc[@]}" -DSAMPLE_PHASES bench/gpu_sample_alone.cu -o /tmp/sample_phases > "$OUT/build_phases.log" 2>&1 &
wait
for name in "${names[@]}"; do
  [ -x "/tmp/sample_$name" ] || { echo "build of $name failed:"; tail -20 "$OUT/build_$name.log"; exit 1; }
done
for ((i = 1; i <= ${ROUNDS:-2}; i++)); do
  for name in "${names[@]}"; do
    echo "== $name $i" >> "$OUT/sample_runs.txt"
    timeout 120 "/tmp/sample_$name" "${VOCABS:-49152,128256,151936}" "${ROWS:-1,64}" >> "$OUT/sample_runs.txt" 2>&1
  done
done
python3 bench/sample_ab_table.py "$OUT/sample_runs.txt" | tee "$OUT/sample_table.txt"
rc=${PIPESTATUS[0]}
[ -x /tmp/sample_phases ] && timeout 60 /tmp/sample_phases 49152 64 > "$OUT/sample_phases.txt" 2>&1 && cat "$OUT/sample_phases.txt"
exit $rc
