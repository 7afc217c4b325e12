"""The one registry of STRATA_* environment variables.

Every environment variable Strata reads is declared here, with its meaning,
so `strata --help` and the README can list them all. Code reads them only
through `get()`; reading os.environ for a STRATA_* name elsewhere is a bug.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class EnvVar:
    name: str
    help: str
    default: str | None = None


REGISTRY: dict[str, EnvVar] = {}


def declare(name: str, help: str, default: str | None = None) -> EnvVar:
    """Registers a variable; declaring the same name twice is an error."""
    if not name.startswith("STRATA_"):
        raise ValueError(f"environment variable {name!r} must start with STRATA_")
    if name in REGISTRY:
        raise ValueError(f"environment variable {name} declared twice")
    var = EnvVar(name, help, default)
    REGISTRY[name] = var
    return var


def get(name: str) -> str | None:
    """The variable's value, or its default when unset or empty."""
    var = REGISTRY.get(name)
    if var is None:
        raise KeyError(f"{name} is not a declared STRATA_* variable (see strata/env.py)")
    value = os.environ.get(name)
    return value if value else var.default


def number(name: str, convert, low, high, unit: str = ""):
    """The variable as `convert(value)` (int or float) within [low, high], or its default when unset or
    empty; anything else is a ValueError that names the variable and the accepted range."""
    raw = (get(name) or "").strip() or "0"
    what = f"{'a whole' if convert is int else 'a'} number{' of ' + unit if unit else ''}"
    try:
        value = convert(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected {what}, {low} to {high}") from None
    if not low <= value <= high:          # NaN fails this too
        raise ValueError(f"{name}={raw!r}: expected {what}, {low} to {high}")
    return value


def switch(name: str) -> bool:
    """A 0 / 1 variable as a bool, its default when unset or empty; anything else is a ValueError that names
    the variable and both values."""
    raw = (get(name) or "").strip()
    if raw not in ("0", "1"):
        raise ValueError(f"{name}={raw!r}: expected 0 or 1 (default {REGISTRY[name].default})")
    return raw == "1"


def describe() -> str:
    """One line per variable, for --help epilogs and the README."""
    width = max(len(n) for n in REGISTRY) if REGISTRY else 0
    return "\n".join(f"  {v.name.ljust(width)}  {v.help}" for v in sorted(REGISTRY.values(), key=lambda v: v.name))


declare("STRATA_LIB", "path of libstrata.so to load (default: build/libstrata.so of the checkout)")
declare("STRATA_MODEL_CACHE", "directory of downloaded models (default: ~/.cache/strata/models)")
declare("STRATA_DECODE_AHEAD_DEPTH", "decode steps the runner keeps queued ahead on CUDA in steady decoding, read when the engine is built: 1 (the default) or 2 (the device has two steps of work when the host comes back, so a host round trip of up to two device steps leaves no gap; a miss drops two guessed steps). The same tokens either way (strata/engine/decode_ahead.py)", "1")
declare("STRATA_DECODE_AHEAD_REUSE", "1 (the default): where a step's plan is not the guessed one because a prompt chunk joined or requests were admitted or left, the decode rows' tokens are read from the queued guess (which the device computes anyway) and the step computes only the rest; 0: such a guess is dropped and every row computed again (the behaviour before 2026-12-05). The same tokens either way; an A/B switch for serving throughput (strata/engine/decode_ahead.py)", "1")
declare("STRATA_DECODE_BUCKET_48", "1 (the default): a decode-only step of 33 to 48 rows replays a 48-row captured graph (the CUDA tile kernel's 48-row route); 0: the next power of two (64), as before 2026-12-05. Read when the engine is built. The same tokens either way; an A/B switch for serving throughput (strata/engine/runner.py)", "1")
declare("STRATA_DEVICE_THREAD", "how the engine hands its steps to a worker thread, read when the engine loop starts: own (the engine's own device thread, a queue put and a call_soon_threadsafe per step on asyncio) or anyio (anyio.to_thread.run_sync with a limiter of one, the hand-off before 2026-12-02; what trio always uses). An A/B switch for timing the host loop (bench/host_step.py)", "own")
declare("STRATA_PREFILL_HOLD_MS", "milliseconds a step that decodes may leave fresh prompts for a later step while their tokens would not fill its prompt budget (0, the default: never); waiting for more arrivals can read more prompt per GPU step. The same tokens either way; an A/B switch for serving throughput (strata/engine/scheduler.py)", "0")
declare("STRATA_PREFILL_ALIGN", "1 (the default): a step's prompt tokens are cut so that its rows (decode rows + prompt tokens) end on a multiple of --chunk, unless that leaves prompts under a quarter chunk; 0: every step may take a whole chunk of prompt tokens besides its decode rows. The same tokens either way; an A/B switch for serving throughput (strata/engine/scheduler.py)", "1")
declare("STRATA_SYNTH_TOKENIZER", "strata synth (and the tests that synthesize tiny models): the GGUF whose tokenizer.* keys a synthesized file copies when --tokenizer-from is not given; unset = the default model (SmolLM2-135M) from the model store. Any GGUF with SmolLM2's tokenizer works, a tokenizer-only one included", "")
declare("STRATA_API_KEY", "API key `strata serve` requires from clients (same as --api-key)")
declare("STRATA_DEVICE", "default device for generate/serve: cpu, cuda or cuda:N (default: the GPU when present)")
declare("STRATA_LOG_LEVEL", "log level for `strata serve` (debug, info, warning, error)", "info")
declare("STRATA_NUM_THREADS", "CPU backend worker threads (default: one per core)")
declare("STRATA_MEDIA_DIR", "directory whose files clients may send as images (file:// or relative paths); unset: local files refused")
declare("STRATA_ALLOW_REMOTE_MEDIA", "1 lets clients send http(s) image URLs for the server to fetch (default: 0, refused)", "0")
declare("STRATA_ALLOW_PRIVATE_MEDIA", "1 lets those fetches reach loopback, private, link-local and other non-public addresses (default: 0, refused)", "0")
declare("STRATA_ATTENTION", "CUDA causal attention kernel: unset (decode-sized calls with head_dim 64 or 128 take the lean decode kernel; launches with few rows spread each KV head's query heads over several blocks; calls of 128+ rows with head_dim 64 or 128 take the prompt kernel, which shares each staged K/V tile among a block of consecutive rows of one slot, and the rows of blocks that read several slots, e.g. a mixed step's decode rows, go on to the decode kernel), wide (the lean kernel, each block taking all the query heads of its KV head), noprompt (no prompt kernel: 256+-row calls on the general kernel, smaller ones on the decode kernel, as before) or legacy (every call takes the general kernel); any other value is an error; same bits for every choice, for bit-identity tests and benchmarks, read by libstrata at each call")
declare("STRATA_FUSE_MIXED", "layers whose q/k/v (or gate/up) matrices differ in type, as in llama-quantize's Q4_K_M (attn_v Q6_K in half the layers): 1 (default) = stack each run of one type (attn_q + attn_k) and produce the [q | k | v] row by one strata_matmul_ex per run with the norm fused in, each writing its columns (y_row_stride), then the fused rope + KV store; 0 = the earlier rule, those layers take the long way (rmsnorm, three matmuls, two ropes, kv_store: ~5 kernels more per layer). For A/B timing; CPU tokens are the same either way; read when a model is loaded", "1")
declare("STRATA_HANDOFF", "the activation hand-off between a decoder layer's matmuls (o -> gate_up -> down -> the next layer's qkv; strata.h, docs/cuda_backend.md): local (default) = each matmul prepares the next one's int8 activations and the next one skips its own pre-pass: on CUDA's integer path at one row the producing kernel rounds whole blocks of its own outputs in its epilogue (RMSNORM and plain inputs; SILU_MUL's in CTAs that hold both halves, STRATA_HANDOFF_PAIR; longer matmuls and every other case by a pre-pass launch after it); off = each matmul rounds its own input; 1 = the same chain, the one-row kernel's emission counted per chunk (the CTA completing a chunk rounds it; measured slower); prepass = the same chain, every preparation a pre-pass launch. Same bits in every mode; read by the decoder when a model is loaded and by libstrata at each call (an emission asked for without the variable set is local)", "local")
declare("STRATA_HANDOFF_ATTENTION", "with the hand-off on (STRATA_HANDOFF not off): 1 (default) = the attention call also prepares the o projection's int8 activations (strata_attention_handoff: on CUDA the decode attention kernel rounds its own output for rows of up to 2,048 values, wider rows and other launches are followed by a pre-pass), so o runs no pre-pass of its own; 0 = o rounds its own input. Same bits either way; an A/B switch, read by the decoder when a model is loaded", "1")
declare("STRATA_HANDOFF_PAIR", "CUDA integer matmul, the local hand-off emission (STRATA_HANDOFF=local) of SILU_MUL's input: 1 (default) = a one-row gate_up of at most STRATA_HANDOFF_LOCAL_PARTS x 1,024 values of k (parts of 4 slices; the 135M and 1B, not the 8B, where these CTAs measured 13 % slower a step) runs CTAs of 64 outputs that hold the gate and up outputs of the same 32 elements and round down's int8 input themselves (no pre-pass launch before down); 0 = the pre-pass launch after gate_up. Same bits either way; an A/B switch, read by libstrata at each call", "1")
declare("STRATA_HANDOFF_LOCAL_PARTS", "CUDA integer matmul, the local hand-off emission (STRATA_HANDOFF=local): the most staged parts (8 slices of 256 values each) a producing one-row matmul may have at the emission's 32-output CTA shape; longer matmuls emit by a pre-pass launch; 0 = never locally. Default 2: o at 8B and 1B (k 4,096 / 2,048) and every producer at 135M; down at 8B / 1B loses more at the 32-output shape than the launch saves (bench/RESULTS.md). Same bits either way; an A/B switch, read by libstrata at each call", "2")
declare("STRATA_MATMUL_CHAIN", "one-row decode steps on the hand-off path run matmuls between strata_matmul_chain_begin and _end, so CUDA may run them as one kernel with grid barriers where they pass their activations by hand-off, local emissions and pre-pass emissions alike (docs/cuda_backend.md): 1 = each layer's o, gate_up and down, 2 = also the next layer's qkv, 0 (default: =2 measured 41-48 % slower on an H100, a grid barrier costing more than a PDL kernel boundary, bench/RESULTS.md 2026-12-07) = a launch each; same bits either way; ignored while STRATA_L2_PREFETCH_MB is set; read when a step is recorded", "0")
declare("STRATA_FUSED_ATTENTION", "decode steps whose rows are of distinct slots (no prompt chunk, no draft rows) run rope, the KV store and attention as one call (strata_rope_kv_store_attention; on CUDA one kernel for head_dim 64 and 128): 1 = on, 0 (default: the fused kernel measured slower on the H200) = the separate rope_kv_store and attention calls; same bits either way, for A/B and bit-identity tests, read when a step is recorded (a captured decode graph keeps the choice it was captured with)", "0")
declare("STRATA_MATMUL_ROPE", "CUDA, strata_matmul_rope_kv_store (the decoder's qkv projection when one matrix covers [q | k | v]): 1 = one-row calls on the integer path (F16 pool, llama-style adjacent rotation) rotate q and k and store k and v in the matmul kernel's epilogue, with no rope_kv_store launch; 0 (default: on the H200 the one kernel measured no faster, bench/RESULTS.md) = the matmul, then the rope_kv_store launch. Same bits either way (tests/kernels/test_matmul_rope_kv_store.py); any other value is an error; an A/B switch, read by libstrata at each call", "0")
declare("STRATA_INT_FUSE_ROUNDS", "CUDA integer matmul (Q4_0/Q8_0, 1-8 row tiles): the dot kernel rounds its own rows, with no pre-pass launch, when that takes a CTA at most this many rounds (rows x k / 2048); 0 (default) never: slower on the H200 at 8B shapes; anything but a whole number >= 0 is an error. Same bits either way; for benchmarks and tests, read by libstrata at each call", "0")
declare("STRATA_L2_PREFETCH_MB", "CUDA decode: each one-row integer matmul of the Llama-style decoder asks the GPU's L2 cache, as it ends, for up to this many MB of the next matmul's weights (strata_matmul_prefetch), so they stream while the kernels in between wait on their inputs; 0 (default) = off: on the H200 it made decode slower (8B tg128 392 -> 365 at 16 MB). A hint: the same bits either way. Read when a step is recorded", "0")
declare("STRATA_INT_DOT_SHAPE", "CUDA integer matmul, the one-row dot kernel's CTA shape: auto (default) = the rule measured on the H200 (docs/cuda_backend.md: at least 8 outputs per CTA where k >= 2048, 16 outputs x 16 slices for Q4_0/Q4_K at long k, all of k in one part where two stages would leave an SM one CTA); legacy = the choice before 2026-12-02 evening; NO:PS = NO outputs per CTA (1-64) and PS slices of 256 values per staged part (1-64), NO x PS <= 256. Same bits either way; an A/B switch for bench/gpu_matmul.py, read by libstrata at each call", "auto")
declare("STRATA_INT_FUSE_CTAS", "CUDA integer matmul, the fused dot kernel (STRATA_INT_FUSE_ROUNDS): at most this many CTAs per SM, each rounding its rows once and then walking several output tiles; 0 (default) = as many as fit (each CTA rounds the rows again, so the rounding's cost grows with the grid). Same bits either way; for benchmarks and tests, read by libstrata at each call", "0")
declare("STRATA_INT_GEMV", "CUDA integer matmul (Q4_0/Q8_0/Q4_K/Q6_K), the memory-bound gemv kernel (persistent grid, coalesced weight stages per warp): auto (default) = matmuls of 2 to 8 rows of Q4_0/Q8_0 at k >= 2048 and n_out >= 2048 (where it measured faster on the H200; one row stays on the dot kernel); N in 1..8 = every matmul of 1 to N rows; 0 = never; an explicit STRATA_INT_MATMUL kernel choice (legacy, rows*, tiles*) or STRATA_INT_FUSE_ROUNDS still wins. Same bits either way; for benchmarks and bit-identity tests, read by libstrata at each call", "auto")
declare("STRATA_INT_GEMV_FUSE", "CUDA integer matmul, gemv kernel (STRATA_INT_GEMV): 1 = the kernel quantizes its rows of x itself (no activation pre-pass launch before each matmul), 0 (default) = after the pre-pass launch. Same bits either way; for benchmarks and bit-identity tests, read by libstrata at each call", "0")
declare("STRATA_INT_Q4_1", "CUDA: 1 (the default) runs Q4_1 matmuls (the default model's type) on the integer path with int8 activations, as Q4_0 / Q8_0 / Q4_K / Q6_K; 0 keeps them on the f16 tensor-core path (the route before 2026-12-04); any other value is an error. Read by libstrata at each call; an A/B switch (bench/RESULTS.md)", "1")
declare("STRATA_INT_MATMUL", "CUDA integer matmul kernel (Q4_0/Q8_0): auto (the few-row kernel at 2-32 rows on matrices of at most 4096 outputs at k > 1024, the many-row tile kernel from 64 rows, at 9-32 rows in its 16- and 32-row tiles and at 33-48 rows in its 48-row tiles where those give every SM a CTA, from 17 rows as at 64 where the few-row kernel does not run, the K-quants from 9 rows at k > 8192 and Q4_K where the int8 mma 8-row tiles would run, and where it measured faster: routing v9), auto:v1 to auto:v9 (the same, one routing; auto:v6 = before the 16- and 32-row tiles, auto:v7 = 33-63 rows on the tile kernel only where 128-output tiles give every SM a CTA, auto:v8 = before the 48-row tiles), tiles (the tile kernel at every row count, routing v9), tiles:v1 to tiles:v9 (one routing at every row count), tiles:128, tiles:64 or tiles:32 (one 64-row shape, 2 stages), tiles:NOxROWSdD[o] (one configuration, e.g. tiles:32x64d2, tiles:128x128d2o, tiles:128x16d0o, tiles:128x48d0o), tiles:32x64d2k, tiles:32x64d2ok, tiles:64x64d2k or tiles:64x64d2ok (the K split: two warp groups on alternate slices of k), rows (the few-row kernel at every row count; rows:16, rows:32 or rows:64 also pick its outputs per CTA), norows (auto without the few-row kernel) or legacy (neither); same bits for every choice; for bit-identity tests and benchmarks, read by libstrata at each call", "auto")
declare("STRATA_SAMPLE_ROUTE", "CUDA seeded sampling, the top-k / top-p machinery: early (default: the bin routes with top-k's histogram keyed on the logit itself, 32 bins per octave of |l| up to 2^11, built in the load pass and published by the first cluster barrier: one pass and one cluster barrier fewer for top-k; top-p's listing pass also forms every chunk's kept mass, so the draw needs no recount pass), bins (top-k and top-p each by one histogram pass over bins of the logit's distance to the max or of the weight, then an exact select among the listed elements of the one bin that holds the k-th logit or w*; radix when a bin overflows), legacy (top-k for k <= 256 over candidates bounded by the threads' maxima, top-p by an 8-bit radix select: the machinery before the bins) or radix (radix selects only); the same tokens for every choice, for A/B timing (bench/gpu_sample.py) and bit-identity tests, read by libstrata at each call", "early")
declare("STRATA_SAMPLE_FENCE", "CUDA seeded sampling, the form of the cluster barriers that only publish a CTA's own shared memory (after the load pass, after the weights pass, after the bins route's top-k histogram, the gathers of the candidate lists): cluster (default: a release fence restricted to the CTA's shared memory, then a relaxed arrive: MEMBAR.ALL.CTA in SASS; a gathered list of up to 640 candidates goes beside the histogram words the other CTAs read) or membar (the full release barrier those barriers used before: MEMBAR.ALL.GPU); the exit and radix barriers are full either way (docs/cuda_backend.md, \"Cluster barriers\"); the same tokens for both, for A/B timing (bench/gpu_sample.py) and bit-identity tests, read by libstrata at each call", "cluster")
declare("STRATA_INT_TILES_KSPLIT", "CUDA integer matmul, the many-row tile kernel, routings v8 and v9 / auto: 1 (default: measured on the H200, bench/RESULTS.md 2026-12-05) = launches that give one 32-output x 64-row CTA per SM at depth 2 (the 8B's q/o, k/v and down at 33-64 rows) and one-row-tile launches at 17-64 rows whose 64 x 64 tiles give more than half the SMs one CTA and none two (the 8B's qkv, 6,144 outputs, on the H200's 132 SMs) run the K split (CTAs of two 8-warp groups on alternate slices, group 1's slice totals added by group 0 in slice order: twice the warps per SM, the same bits); 0 = not; read by libstrata at each routed call (docs/cuda_backend.md, \"The K split\")", "1")
declare("STRATA_INT_TILES_SKIP_DEAD", "CUDA integer matmul, the many-row tile kernel: 1 (default) = a warp none of whose rows is below the launch's last (in the last row tile of a launch whose rows are not a multiple of the tile's: e.g. 12 of 16 warps of the last 128-row tile at 400 rows) skips its products and folds, still staging and handing over slices like the others (the default since the H100 A/B of 2026-12-06, bench/RESULTS.md: 8B gate_up -6 % and lm_head -12 % at 400 rows, qkv +3 %); 0 = every warp computes every row (the kernel before); the same bits either way; read by libstrata at each call (docs/cuda_backend.md, \"Idle warps of a partial row tile\")", "1")
declare("STRATA_INT_TILES_TAIL", "CUDA integer matmul, the many-row tile kernel: N in 1..127 = where a routed call's rows leave a partial last row tile of at most N rows (e.g. 3 of serve_load's 387-row prompt steps on 128-row tiles), the tile kernel takes the whole row tiles and those last rows run on the route their own count takes (gemv, the few-row kernel, the dot kernel), reading the same prepared blocks: one launch more in place of a partial row tile that costs about a whole one; 0 (default: on an H100 =32 sped the 8B's gate_up and lm_head up 6-25 % but slowed o, k/v and down 10-17 % at 387-400 rows, bench/RESULTS.md 2026-12-07) = no split. A configuration forced by STRATA_INT_MATMUL is never split. The same bits either way; read by libstrata at each call (docs/cuda_backend.md, \"The tail split\")", "0")
declare("STRATA_INT_WGMMA", "CUDA integer matmul on Hopper's warpgroup MMA (libstrata/src/cuda/cuda_int_wgmma.cu: A from registers, B from shared memory through wgmma's descriptor, the next block's product in flight while the lanes fold the last; the same bits as every integer kernel): 0 (default: exact on the H200 but slower there than the tile kernel, bench/RESULTS.md 2026-12-05) = never; N in 1..1000000 = Q4_0 / Q8_0 / Q4_1 / Q4_K matmuls of at least N rows whose 128-output x 64-row tiles give every SM a CTA (narrower launches keep the tile kernel's narrow tiles and K split); all = every such matmul at every row count (bit-identity tests); other types (Q6_K, the float types) keep their kernels; STRATA_INT_MATMUL=legacy still wins; an error on a GPU that is not sm_90 (the kernel is built for sm_90a only); read by libstrata at each call (docs/cuda_backend.md, \"The wgmma kernel\")", "0")
declare("STRATA_INT_WGMMA_BANKS", "CUDA integer wgmma matmul (STRATA_INT_WGMMA): 2 (default) = two D register banks, the next block's wgmma in flight while the lanes fold the last, one CTA of 8 warps per SM with up to 4 slices staged; 1 = one bank, each block's product waited for before its fold, 128 registers so two Q4_0 CTAs share an SM; same bits; read at each call", "2")
declare("STRATA_INT_ROWS_WARPS", "CUDA integer matmul, the few-row kernel (libstrata/src/cuda/cuda_int_rows.cu): unset (default) = CTAs of 8 warps (two per SM where shared memory allows), except auto's one wide case below (16 warps); 8 = 8 warps everywhere; 16 = CTAs of 16 warps (one per SM, two warps sharing each unit's rows at 16-32 rows; on the H200 no faster than 8 on the 4096-output matrices at 16 rows) wherever that kernel runs (auto or STRATA_INT_MATMUL=rows*); same bits either way; read by libstrata at each call", "8")
declare("STRATA_INT_ROWS_WIDE", "CUDA integer matmul routing: 0 (default) = auto gives the few-row kernel matrices of at most 4096 outputs, and of 4097-8192 outputs at 9-16 rows in 16-warp CTAs (the 8B qkv at 16 rows: 28 against 55 us on the H200), 1 = every wider one at 2-32 rows too (gate_up and lm_head got slower at 16 rows: 101 / 142 against 90 / 123 us; where STRATA_INT_GEMV does not take them); same bits either way; read by libstrata at each call", "0")
declare("STRATA_PDL", "CUDA programmatic dependent launch (each kernel starts while the previous one drains; same bits): 1 (default) = on for GPUs of compute capability 9.0+, 0 = off; for benchmarks and bit-identity tests, read by libstrata at each kernel launch (a recorded CUDA graph keeps the setting it was recorded with)", "1")
