#!/bin/sh
# run.sh — builds and runs the host emulation checks of the CUDA kernels
# (no GPU needed): libstrata/cuda_emu/run.sh [quant|sample|mma|int|int_tiles|int_rows|int_gemv|matmul|attention|fused|prompt|dense|rope|misc]
# (attention also runs test_attention_prompt: the prompt kernel, and the fused rope_kv_store + attention; prompt and fused run only theirs)
# Takes a few minutes in all (one OS thread per emulated CUDA thread).
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
out=$root/build/cuda_emu
python3 "$here/mk.py" "$root/libstrata/src/cuda" "$out/src"
CXX=${CXX:-g++}
flags="-std=c++20 -O2 -ffp-contract=off -pthread -I$here -I$out/src -I$root/libstrata/include -I$root/libstrata/src"
what=${1:-all}
for t in quant sample mma int int_tiles int_rows int_gemv kernels attention_prompt; do
    case "$what" in
        all) ;;
        quant|sample|mma|int|int_tiles|int_rows|int_gemv) [ "$t" = "$what" ] || continue ;;
        prompt) [ "$t" = attention_prompt ] || continue ;;
        attention) [ "$t" = kernels ] || [ "$t" = attention_prompt ] || continue ;;
        *) [ "$t" = kernels ] || continue ;;
    esac
    $CXX $flags "$here/test_$t.cpp" -o "$out/test_$t"
    if [ "$t" = kernels ] && [ "$what" != all ] && [ "$what" != prompt ]; then "$out/test_$t" "$what"; else "$out/test_$t"; fi
done
