#!/usr/bin/env bash
# On the GPU machine, one call with no model: build libstrata, then rebuild the tensor-core matmul
# with each variant's tuning knobs (-D flags, see the top of cuda_mma_matmul.cu) into its own
# library, check each variant's results against the default build bit for bit, and time the
# matmul shapes with every library. Logs under $OUT.
#   bash scripts/gpu_variants.sh "NAME:-DKNOB=V -DKNOB=V" ... [-- gpu_matmul.py args]
# A variant "NAME:@path/to/cuda_mma_matmul.cu -D..." compiles that file instead (e.g. an older
# version, to check that a change keeps every bit), or another kernel file with its own knobs:
# "t3:@libstrata/src/cuda/cuda_int_mma_tiles.cu -DSTRATA_INT_TILES_STAGES=3" replaces that file's object.
set -uo pipefail
bash scripts/gpu_wheels.sh
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
variants=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do variants+=("$1"); shift; done; [ "${1:-}" = "--" ] && shift
bench_args=("$@"); [ ${#bench_args[@]} -gt 0 ] || bench_args=(--models 8b 135m --dtypes Q4_0 --rows 1 64)
make -j"$(nproc)" lib > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
flags=$(make -s -p lib 2>/dev/null | sed -n 's/^NVCCFLAGS := //p' | head -1)
arch=$(make -s -p lib 2>/dev/null | sed -n 's/^NVCC_ARCH := //p' | head -1)
arch90a=$(make -s -p lib 2>/dev/null | sed -n 's/^NVCC_ARCH_SM90A := //p' | head -1)  # the wgmma file's (Makefile)
ldlibs=$(make -s -p lib 2>/dev/null | sed -n 's/^LDLIBS := //p' | head -1)
for v in "${variants[@]}"; do
  name=${v%%:*}; defs=${v#*:}; d=build/var_$name; mkdir -p "$d"; cp build/strata.h "$d/"
  src=libstrata/src/cuda/cuda_mma_matmul.cu; case "$defs" in @*) src=${defs%% *}; src=${src#@}; defs=${defs#"@$src"};; esac
  objs=$(ls build/obj/*/*.o | grep -v "/$(basename "$src")\.o$")  # the default build minus the rebuilt file
  a=$arch; case "$src" in *cuda_int_wgmma.cu) a=$arch90a;; esac
  ( nvcc $a $flags -Ilibstrata/include -Ilibstrata/src $defs -c "$src" -o "$d/mma.o" \
      && g++ -shared -Wl,--version-script=libstrata/strata.map -o "$d/libstrata.so" $objs "$d/mma.o" $ldlibs \
      && echo "built $name" ) > "$d/build.log" 2>&1 &
done
wait
for v in "${variants[@]}"; do name=${v%%:*}; tail -1 build/var_$name/build.log; done
python3 scripts/variant_check.py build/libstrata.so build/var_*/libstrata.so 2>&1 | tee "$OUT/variant_check.log"
echo "== default"
timeout 120 python3 bench/gpu_matmul.py "${bench_args[@]}" 2>&1 | tee "$OUT/matmul_default.log" | grep -v "^#"
for v in "${variants[@]}"; do
  name=${v%%:*}; echo "== $v"
  STRATA_LIB=$PWD/build/var_$name/libstrata.so timeout 120 python3 bench/gpu_matmul.py "${bench_args[@]}" 2>&1 \
    | tee "$OUT/matmul_$name.log" | grep -v "^#\|dtype"
done
