#!/usr/bin/env bash
# reliability.sh: the reliability checks that CI runs after the normal test
# suites (which already run tests/reliability: fault injection, crash safety,
# concurrency, bad values, fuzz regressions):
#   1. fuzz/run.sh: every libFuzzer target for a few seconds each (ASan+UBSan);
#   2. tests/tsan.sh: the concurrency test under ThreadSanitizer, and its
#      control run that must be caught.
# Exits non-zero if either finds anything.  About 3 minutes on 2 cores with
# the default budget and empty build folders (162 s measured; the fuzzing
# itself is 7 x SECONDS).
#   tests/reliability.sh [SECONDS_PER_FUZZ_TARGET]      (default 20)
# Needs (Debian 12): clang-14 libclang-rt-14-dev libomp-14-dev llvm-14, besides
# the packages of scripts/deps.sh.  See docs/reliability.md.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
seconds=${1:-20}
status=0
start=$SECONDS

echo "== fuzzing, $seconds s per target"
bash "$root/fuzz/run.sh" "$seconds" || { echo "reliability.sh: fuzzing FAILED" >&2; status=1; }

echo "== ThreadSanitizer"
bash "$here/tsan.sh" || { echo "reliability.sh: tsan.sh FAILED" >&2; status=1; }

echo "== reliability.sh: $((SECONDS - start)) s, $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
