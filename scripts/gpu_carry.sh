#!/usr/bin/env bash
# Here, not on the GPU machine: fill the ignored folders that device calls carry (docs/gpu.md), which a
# fresh checkout does not have:
#   .whl/        wheels the GPU machine lacks (../shared/gpu/wheels.sh: the default set, then the grammar
#                and schema engines, without which those tests fail rather than skip)
#   .llama/      llama.cpp's source for the side-by-side runs (../shared/gpu/llamacpp.sh pack)
#   .carry-tok/  tok.gguf, a GGUF holding only SmolLM2's tokenizer keys (1.7 MB): what `strata synth` and the
#                engine tests' tiny models copy the tokenizer from (STRATA_SYNTH_TOKENIZER)
#   .carry_a/ .carry_b/   model.part: the default model's two halves (64 MiB limit per call), joined and
#                sha256-checked there by scripts/gpu_check.sh
#   bash scripts/gpu_carry.sh          (needs `make venv` and the default model: `make model`)
# Folders that already hold their file are left as they are.
set -euo pipefail
top=$(git rev-parse --show-toplevel); cd "$top"
py=${PYTHON:-.venv/bin/python}
[ -x "$py" ] || { echo "gpu_carry.sh: no $py (run \`make venv\` first, or set PYTHON)" >&2; exit 1; }
shared=$top/../shared/gpu
if ! ls .whl/llguidance-*.whl > /dev/null 2>&1; then
  "$shared/wheels.sh" > /dev/null
  "$shared/wheels.sh" llguidance jsonschema jsonschema-specifications referencing rpds-py attrs > /dev/null
fi
[ -f .llama/llsrc.tgz ] || "$shared/llamacpp.sh" pack > /dev/null
model=$("$py" -m strata.cli models path smollm2-135m) \
  || { echo "gpu_carry.sh: the default model is not cached (run \`make model\`)" >&2; exit 1; }
mkdir -p .carry-tok .carry_a .carry_b
if [ ! -s .carry-tok/tok.gguf ]; then
  "$py" - "$model" <<'PY'
import sys
from pathlib import Path

from gguf import GGUFWriter

from strata.synth.tokenizer import add_tokenizer_keys, read_tokenizer_fields

writer = GGUFWriter(".carry-tok/tok.gguf.part", "llama")
add_tokenizer_keys(writer, list(read_tokenizer_fields(Path(sys.argv[1]))))
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.write_tensors_to_file()
writer.close()
Path(".carry-tok/tok.gguf.part").replace(".carry-tok/tok.gguf")
PY
fi
size=$(stat -c %s "$model"); half=$(( (size + 1) / 2 ))
if [ ! -s .carry_a/model.part ] || [ ! -s .carry_b/model.part ]; then
  head -c "$half" "$model" > .carry_a/model.part
  tail -c +"$(( half + 1 ))" "$model" > .carry_b/model.part
fi
du -sh .whl .llama .carry-tok .carry_a .carry_b
echo "model sha256 $(sha256sum "$model" | cut -c1-16); each call carries at most 64 MiB: .whl .llama .carry-tok in one, .carry_a and .carry_b in one each (docs/gpu.md)"
