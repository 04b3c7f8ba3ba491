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
# Open MPI carried by device-prepare.sh --with-mpi, where the machine has none:
# unpacked in place (its paths are compiled in), never over a file that exists.
if [ -d .device-deps/mpi ] && ! command -v mpirun >/dev/null; then
  tmp=$(mktemp -d)
  for f in .device-deps/mpi/*.deb; do dpkg -x "$f" "$tmp"; done
  cp -rn "$tmp"/. /
  rm -rf "$tmp"
  ln -sf mpicc.openmpi /usr/bin/mpicc
  ln -sf mpirun.openmpi /usr/bin/mpirun
  ldconfig 2>/dev/null || true
fi
exec bash .device-deps/gpu-run "$@"
