#!/usr/bin/env bash
# On the GPU machine, after a build into build-gpu/: every GPU test program,
# shrunk (SIMIL_TEST_QUICK), under compute-sanitizer's memcheck and racecheck.
# Each run is capped at SIMIL_SANITIZE_LIMIT seconds (default 300); a program
# that hits the cap is reported as such, not as clean.  SIMIL_SANITIZE_TOOLS
# picks the tools (default "memcheck racecheck").  SIMIL_SANITIZE_LAUNCHES=N
# checks only the first N kernel launches of each program (compute-sanitizer
# --launch-count; the rest run unchecked), for racecheck, whose shared-memory
# tracking would otherwise take hours over a whole test program.
# An argument PROGRAM:TEST runs only the test functions of PROGRAM that TEST
# matches (SIMIL_TEST_FILTER, cmocka's wildcards).
#   bash scripts/gpu-sanitize.sh [test program[:test] …]
set -uo pipefail
export SIMIL_TEST_QUICK=1
limit=${SIMIL_SANITIZE_LIMIT:-300}
[ $# -gt 0 ] || set -- build-gpu/tests/cuda/test_cuda_*
rc=0
for arg in "$@"; do
  t=${arg%%:*}
  filter=
  [ "$arg" != "$t" ] && filter=${arg#*:}
  for tool in ${SIMIL_SANITIZE_TOOLS:-memcheck racecheck}; do
    log="san-$tool-$(basename "$t")${filter:+-$filter}.log"
    start=$SECONDS
    # racecheck skips cuBLAS's kernels (nvjet_*, *gemm*): they are not ours,
    # and on Hopper it reported hazards inside them (2026-11-22) that we can
    # neither read nor fix; simil's own kernels are what this run checks.
    exclude=()
    [ "$tool" = racecheck ] && exclude=(--kernel-name-exclude kns=nvjet --kernel-name-exclude kns=gemm)
    SIMIL_TEST_FILTER=$filter timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 "${exclude[@]}" \
      ${SIMIL_SANITIZE_LAUNCHES:+--launch-count "$SIMIL_SANITIZE_LAUNCHES"} "$t" > "$log" 2>&1
    r=$?
    case $r in
      0) verdict="clean" ;;
      77) verdict="skipped (no GPU)" ;;
      124) verdict="STOPPED at the ${limit} s cap (not checked to the end)"; rc=1 ;;
      *) verdict="FAILED (exit $r)"; rc=1 ;;
    esac
    echo "== $tool $(basename "$t")${filter:+ ($filter)}${SIMIL_SANITIZE_LAUNCHES:+ (first $SIMIL_SANITIZE_LAUNCHES launches)}: $verdict in $((SECONDS - start)) s"
    grep -E "ERROR SUMMARY|Error|error" "$log" | head -5
  done
done
exit $rc
