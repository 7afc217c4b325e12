#!/usr/bin/env bash
# On the GPU machine: installs the wheels carried in .whl/ (../shared/gpu/wheels.sh fetches them) into
# /tmp/site, the newest version of each distribution only: a later wheels.sh run can leave two versions of
# one package there, and pip refuses to install both at once (which lost a device session's first call on
# 2026-12-05: docs/gpu.md). Scripts then run with PYTHONPATH=$PWD:/tmp/site.
set -uo pipefail
#   bash scripts/gpu_wheels.sh [DIR]     (DIR: the wheels' folder, .whl by default)
dir=${1:-.whl}
[ -d "$dir" ] || { echo "gpu_wheels.sh: no $dir/ here (carry it: docs/gpu.md)" >&2; exit 1; }
# wheel names are DIST-VERSION-...: sort -V orders each DIST's versions, the last one wins
mapfile -t wheels < <(ls "$dir"/*.whl | sort -V | awk -F/ '{ split($NF, a, "-"); last[a[1]] = $0 } END { for (d in last) print last[d] }')
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}"
