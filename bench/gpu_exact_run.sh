#!/usr/bin/env bash
# On the GPU machine, after a build into build-gpu/: the exact-search
# benchmarks of docs/benchmarks.md, with PyTorch's figure in the same run.
#   bash bench/gpu_exact_run.sh [quick]
set -uo pipefail
b=build-gpu/bench_gpu_exact
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv,noheader
$b select 10000 100000 10 100 1024 2048 16384
$b uniform1M 10 100 1024 2048 16384
[ "${1:-}" = quick ] && exit 0
$b uniform10M 10 100 1024
python3 .device-deps/torch_knn.py 1000000 128 10000 10 100 1024
python3 .device-deps/torch_knn.py 10000000 96 10000 10 100
