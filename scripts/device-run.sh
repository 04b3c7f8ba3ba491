#!/usr/bin/env bash
# On the GPU machine: build with CUDA and run the GPU tests through the shared
# gpu-run script, with the OpenMP OpenBLAS that simil links on the library path.
#   bash .device-deps/device-run.sh [command …]
set -uo pipefail
L=/opt/deps/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$L/openblas-openmp:${LD_LIBRARY_PATH:-}
export SIMIL_CTEST_ARGS=${SIMIL_CTEST_ARGS:--L gpu}
# The carried zlib1g-dev brings zlib.h, but its libz.so points at a runtime
# that was not carried (a non-PIC libz.a would be found instead): link the
# machine's own libz.so.1.
for z in /usr/lib/x86_64-linux-gnu/libz.so.1 /lib/x86_64-linux-gnu/libz.so.1; do
  [ -e "$z" ] && { export SIMIL_CMAKE_ARGS="-DZLIB_LIBRARY=$z ${SIMIL_CMAKE_ARGS:-}"; break; }
done
exec bash .device-deps/gpu-run "$@"
