#!/usr/bin/env bash
# The side-by-side speed run of bench/RESULTS.md (Strata and llama.cpp on the same GGUFs, one warm
# H200 machine), in back-to-back device calls (/tmp survives while the machine is warm):
#
#   bash scripts/gpu_speed.sh prepare WHEELS_DIR LLAMA_DIR TOKENIZER_GGUF
#       starts llama.cpp's build (LLAMA_DIR from ../shared/gpu/llamacpp.sh pack) and the synthesized
#       models (strata synth, SmolLM2's tokenizer copied from TOKENIZER_GGUF) in the background;
#       installs the wheels, builds libstrata, runs the gpu-marked kernel tests and the matmul table.
#   bash scripts/gpu_speed.sh bench
#       llama-bench and llama-batched-bench, bench/gpu_decode.py and bench/gpu_profile.py, once the build
#       and the models exist; the 8B also at tg128 after a DEPTH-token context (default 4096; -d in
#       llama-bench, --depth in bench/gpu_decode.py).
#   bash scripts/gpu_speed.sh serve
#       bench/serve_load.py (64 clients) and bench/prefix_cache.py (multi-turn chats, cache on/off)
#       against `strata serve` and llama-server on the 8B Q4_0 (SERVE_PREFIX=0: serve_load only).
#   DEADLINE=570 [GPU_TESTS="tests/..."] bash scripts/gpu_speed.sh once WHEELS_DIR LLAMA_DIR TOKENIZER_GGUF
#       for a short device budget, one call: llama.cpp's build and the synthesized models start at once
#       beside `make lib`; then the gpu-marked tests in GPU_TESTS (if any) while they finish, leaving
#       BENCH_S seconds (default 150); then `bench`, all within DEADLINE seconds of the call's start.
#
# Logs go under $OUT; a short summary prints last. See docs/gpu.md.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 STRATA_MODEL_CACHE=/tmp/models
SYN=/tmp/strata-synth
MODELS="8b:Q4_0 1b:Q4_0 135m:Q4_0 8b:Q4_K_M"
LL=/tmp/llama.cpp/build/bin

# The synthesized GGUFs, in the background (strata synth needs the wheels, not the library); TOK's tokenizer.
start_synth() {
  mkdir -p "$SYN" /tmp/models && cp "$1" /tmp/tok.gguf
  setsid nohup bash -c "for m in $MODELS; do s=\${m%%:*} t=\${m##*:}; f=$SYN/synth-\$s-\$t.gguf;
      python3 -m strata.cli synth --shape \$s --dtype \$t --out \$f.part --tokenizer-from /tmp/tok.gguf --quiet \
      && mv \$f.part \$f; done; echo synth-done" > /tmp/synth.txt 2>&1 < /dev/null &
}
# make lib; the library is also kept in /tmp, because a later call that carries the checkout again replaces build/.
build_lib() {
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
  ( time make -j"$(nproc)" lib ) > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  tail -4 "$OUT/build.log"
  mkdir -p /tmp/strata-build && cp build/libstrata.so /tmp/strata-build/
}

case "${1:-}" in
once)
  whl=$2 llama=$3 tok=$4 D=${DEADLINE:-570}
  setsid nohup bash "$llama/llamacpp.sh" build > /tmp/llama-build.txt 2>&1 < /dev/null &
  bash scripts/gpu_wheels.sh "$whl" > "$OUT/pip.log" 2>&1 || tail -5 "$OUT/pip.log"
  start_synth "$tok"
  build_lib
  t=$((D - SECONDS - ${BENCH_S:-150}))
  if [ -n "${GPU_TESTS:-}" ] && [ $t -gt 20 ]; then
    # The engine tests' tiny synthesized models take their tokenizer from here (docs/gpu.md).
    export STRATA_SYNTH_TOKENIZER=${STRATA_SYNTH_TOKENIZER:-/tmp/tok.gguf}
    # shellcheck disable=SC2086  # GPU_TESTS is a list of paths and pytest options
    timeout $t python3 -m pytest -m gpu -q -p no:cacheprovider $GPU_TESTS > "$OUT/gpu_tests.log" 2>&1
    echo "GPU_TESTS rc=$? at ${SECONDS}s: $(tail -1 "$OUT/gpu_tests.log")"
    grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -10
  fi
  t=$((D - SECONDS))
  [ $t -gt 30 ] && timeout $t bash "$0" bench
  echo "once: done at ${SECONDS}s of ${D}s"
  ;;
prepare)
  whl=$2 llama=$3 tok=$4
  setsid nohup bash "$llama/llamacpp.sh" build > /tmp/llama-build.txt 2>&1 < /dev/null &
  bash scripts/gpu_wheels.sh "$whl" \
    > "$OUT/pip.log" 2>&1 || tail -5 "$OUT/pip.log"
  build_lib
  start_synth "$tok"
  # PREPARE_TESTS=0 leaves the kernel tests to a later scripts/gpu_check.sh call; MATMUL_MODELS narrows the table.
  [ "${PREPARE_TESTS:-1}" = 0 ] || \
    python3 -m pytest -m gpu -q -p no:cacheprovider tests/kernels 2>&1 | tee "$OUT/gpu_kernel_tests.log" | tail -4
  python3 bench/gpu_matmul.py --models ${MATMUL_MODELS:-8b 1b 135m} --dtypes Q4_0 Q8_0 Q4_K Q6_K --rows 1 4 16 64 512 --replays 10 \
    > "$OUT/gpu_matmul.log" 2>&1
  grep -E "^(Q4_0 +8b|dtype)" "$OUT/gpu_matmul.log"
  cat /tmp/synth.txt; tail -2 /tmp/llama-build.txt
  ;;
bench)
  for i in $(seq 1 60); do grep -q synth-done /tmp/synth.txt && grep -q "built in" /tmp/llama-build.txt && break; sleep 5; done
  cat /tmp/synth.txt; tail -1 /tmp/llama-build.txt
  export LD_LIBRARY_PATH=$LL
  [ -f build/libstrata.so ] || export STRATA_LIB=/tmp/strata-build/libstrata.so
  # llama.cpp's figures, one file per model, go to bench/gpu_decode.py so its ratios are this run's (llama_peer.py)
  peers=()
  for m in $MODELS; do
    f=$SYN/synth-${m%%:*}-${m##*:}.gguf; n=$(basename "$f" .gguf)
    "$LL/llama-bench" -m "$f" -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o md 2>/dev/null > "$OUT/llama_bench_$n.md"
    # The 8B Q4_0 also after a context of DEPTH tokens (tg128 @ dDEPTH; bench/gpu_decode.py --depth).
    [ "$m" = 8b:Q4_0 ] && "$LL/llama-bench" -m "$f" -ngl 99 -fa 1 -p 0 -n 128 -d "${DEPTH:-4096}" -r 3 -o md \
      2>/dev/null >> "$OUT/llama_bench_$n.md"
    grep -E "pp512|tg128" "$OUT/llama_bench_$n.md"; peers+=(--llama-bench "$f=$OUT/llama_bench_$n.md")
  done
  "$LL/llama-batched-bench" -m "$SYN/synth-8b-Q4_0.gguf" -ngl 99 -fa on -c 40000 -b 2048 -ub 512 -npp 128 -ntg 128 \
    -npl 1,4,16,64 > "$OUT/llama_batched.log" 2>&1
  grep -E "^\|" "$OUT/llama_batched.log" | tail -5
  peers+=(--llama-batched "$SYN/synth-8b-Q4_0.gguf=$OUT/llama_batched.log")
  python3 bench/gpu_decode.py --shapes 8b --types Q4_0 Q4_K_M --depth "${DEPTH:-4096}" "${peers[@]}" \
    --json "$OUT/gpu_decode_8b.json" 2>&1 \
    | grep -v "^loading\|match no model" | tee "$OUT/gpu_decode.log"
  python3 bench/gpu_decode.py --shapes 1b 135m --types Q4_0 --concurrency 1 "${peers[@]}" --json "$OUT/gpu_decode_small.json" 2>&1 \
    | grep -v "^loading\|match no model" | tee -a "$OUT/gpu_decode.log"
  python3 bench/gpu_profile.py --model "$SYN/synth-8b-Q4_0.gguf" --rows 1 2>&1 | grep -v "^loading" > "$OUT/gpu_profile.log"
  python3 bench/gpu_profile.py --model "$SYN/synth-8b-Q4_0.gguf" --rows 64 2>&1 | grep -v "^loading" >> "$OUT/gpu_profile.log"
  ;;
serve)
  export LD_LIBRARY_PATH=$LL
  [ -f build/libstrata.so ] || export STRATA_LIB=/tmp/strata-build/libstrata.so
  if [ -f bench/serve_load.py ]; then
    M8=$SYN/synth-8b-Q4_0.gguf
    python3 -m strata.cli serve --model "$M8" --device cuda:0 --port 18091 --batch 64 --ctx 2048 --log-level warning \
      > "$OUT/strata_serve.log" 2>&1 &
    sp=$!
    "$LL/llama-server" -m "$M8" -ngl 99 -np 64 -c 131072 -fa on --port 18092 > "$OUT/llama_server.log" 2>&1 &
    lp=$!
    python3 - <<'PY'
import time, urllib.request
for _ in range(120):
    try:
        for port in (18091, 18092):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).read()
        break
    except Exception:
        time.sleep(2)
PY
    python3 bench/serve_load.py --url http://127.0.0.1:18091 --clients 64 --max-tokens 128 2>&1 | tee "$OUT/serve_load_strata.log" | tail -14
    [ "${SERVE_PREFIX:-1}" = 0 ] || python3 bench/prefix_cache.py --url http://127.0.0.1:18091 --conversations 8 --turns 6 --max-tokens 64 2>&1 \
      | tee "$OUT/prefix_cache_strata.log" | tail -10
    kill $sp; wait $sp 2>/dev/null
    python3 bench/serve_load.py --url http://127.0.0.1:18092 --clients 64 --max-tokens 128 2>&1 | tee "$OUT/serve_load_llama.log" | tail -14
    [ "${SERVE_PREFIX:-1}" = 0 ] || python3 bench/prefix_cache.py --url http://127.0.0.1:18092 --conversations 8 --turns 6 --max-tokens 64 2>&1 \
      | tee "$OUT/prefix_cache_llama.log" | tail -10
    kill $lp; wait $lp 2>/dev/null
  fi
  ;;
*)
  sed -n 2,21p "$0"; exit 2 ;;
esac
