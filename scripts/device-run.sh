#!/usr/bin/env bash
# On the GPU machine: build with CUDA and run the GPU tests through the shared
# gpu-run script, with the OpenMP OpenBLAS that simil links on the library path.
#   bash .device-deps/device-run.sh [command …]
set -uo pipefail
L=/opt/deps/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$L/openblas-openmp:${LD_LIBRARY_PATH:-}
export SIMIL_CTEST_ARGS=${SIMIL_CTEST_ARGS:--L gpu}
exec bash .device-deps/gpu-run "$@"
