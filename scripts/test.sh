#!/usr/bin/env bash
# The README's test command: installs what is missing, builds (Release, CUDA
# when nvcc is found) into build/, and runs the whole test suite.  Tests are
# turned on explicitly (scripts/demo.sh configures build/ without them), and
# CTest fails when it finds no test to run.
#   bash scripts/test.sh [extra cmake arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
build=${SIMIL_BUILD_DIR:-build}
# Without a GPU the CUDA code is compiled but never run: one architecture
# checks it in half the time of the package's two (CMakeLists.txt).
arch=()
case " $* " in
  *CMAKE_CUDA_ARCHITECTURES=*) ;;
  *) nvidia-smi -L >/dev/null 2>&1 || arch=(-DCMAKE_CUDA_ARCHITECTURES=90) ;;
esac
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSIMIL_TESTS=ON "${arch[@]}" "$@"
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$(nproc)"
# The Python package, built on the library just built (not under sanitizers:
# Python cannot load them).
case " $* " in
  *SIMIL_SANITIZE=*) ;;
  *) SIMIL_CMAKE_BUILD_DIR="$build" bash python/run_tests.sh ;;
esac
