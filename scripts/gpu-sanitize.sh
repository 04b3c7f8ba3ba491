#!/usr/bin/env bash
# On the GPU machine, after a build into build-gpu/: the GPU tests, shrunk
# (SIMIL_TEST_QUICK), under compute-sanitizer's memcheck and racecheck.
set -uo pipefail
export SIMIL_TEST_QUICK=1
rc=0
for t in build-gpu/tests/cuda/test_cuda_select build-gpu/tests/cuda/test_cuda_flat; do
  for tool in memcheck racecheck; do
    echo "== $tool $(basename "$t")"
    compute-sanitizer --tool "$tool" --error-exitcode 9 "$t" > "san-$tool-$(basename "$t").log" 2>&1
    r=$?
    tail -3 "san-$tool-$(basename "$t").log"
    [ $r -ne 0 ] && rc=$r
  done
done
exit $rc
