#!/usr/bin/env bash
# On the GPU machine (the device tool), first of two back-to-back calls: install the carried wheels
# into /tmp/site, build libstrata with that machine's nvcc, and park the first half of the default
# model (carried in .carry_a/) in /tmp. /tmp and ignored build outputs survive while the machine is
# warm, so scripts/gpu_check.sh (carrying .carry_b/) can follow. See docs/gpu.md.
set -uo pipefail
bash scripts/gpu_wheels.sh
nvidia-smi -L
nproc
( time make -j"$(nproc)" lib ) > /tmp/build.log 2>&1; rc=$?
tail -3 /tmp/build.log
mkdir -p /tmp/models && cp .carry_a/model.part /tmp/models/part_a
exit $rc
