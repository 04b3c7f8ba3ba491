#!/usr/bin/env bash
# tsan.sh: builds the CPU library and tests with ThreadSanitizer
# (-DSIMIL_SANITIZE=thread) and runs the concurrency test
# (tests/reliability/test_concurrency.c), then a control run that breaks the
# locking rule on purpose and must be caught.
#   tests/tsan.sh            the concurrency test and the control run
#   tests/tsan.sh all        also the CPU tests of the Flat index, the readers,
#                            index files, the parser, select_k, the API and
#                            tests/reliability (IVF/PQ/XFBQ/k-means tests are
#                            left out: test_ivf_pq alone runs > 10 min in TSan)
# Environment: SIMIL_TSAN_BUILD_DIR (default build-tsan), CC (default clang-14).
#
# Why clang: with gcc, the target_clones resolvers of src/cpu/cpu_knn.c run
# before the TSan runtime starts and crash at load time; clang builds no
# clones.  clang's OpenMP runtime (libomp) is not instrumented: libarcher
# (LLVM's OMPT tool, libomp-14-dev) tells TSan about fork, join and barriers,
# and tests/tsan.supp ignores libc calls made from inside libomp/libgomp only.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${SIMIL_TSAN_BUILD_DIR:-$root/build-tsan}
cc=${CC:-$(command -v clang-14 || command -v clang || true)}
[ -n "$cc" ] || { echo "tests/tsan.sh: needs clang (apt-get install clang libomp-dev)" >&2; exit 2; }
mkdir -p "$build"
CC=$cc cmake -S "$root" -B "$build" -G Ninja -DSIMIL_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug \
  -DSIMIL_SANITIZE=thread > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 2; }
targets=(test_concurrency)
[ "${1:-}" = all ] && targets=(all)
cmake --build "$build" --target "${targets[@]}" > "$build/build.log" 2>&1 ||
  { tail -50 "$build/build.log" >&2; exit 2; }

archer=$("$cc" -print-file-name=libarcher.so)
[ -f "$archer" ] || archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2> /dev/null | head -1)
export TSAN_OPTIONS="suppressions=$here/tsan.supp halt_on_error=1 second_deadlock_stack=1"
[ -n "$archer" ] && [ -f "$archer" ] && export OMP_TOOL_LIBRARIES=$archer ||
  echo "tests/tsan.sh: libarcher.so not found; OpenMP regions may report false races" >&2

status=0
echo "== concurrency test under TSan"
if ! "$build/tests/reliability/test_concurrency"; then
  echo "tests/tsan.sh: FAILED: test_concurrency" >&2
  status=1
fi

# The control: the same test with the writer taking no lock must be caught,
# which shows the suppressions hide nothing of simil's.
# The unlocked writer can also crash a reader before any race is reported (a
# segfault, whose handler TSan then reports as a signal-unsafe call and halts
# on): that run proves nothing either way, so the control gets three tries.
echo "== control run (writer without the lock): TSan must report a race"
log=$build/tsan-control.log
caught=0
for try in 1 2 3; do
  SIMIL_TEST_QUICK=1 SIMIL_TEST_BREAK_LOCKING=1 "$build/tests/reliability/test_concurrency" \
    > "$log" 2>&1
  if grep -q "WARNING: ThreadSanitizer: data race" "$log"; then
    caught=1
    break
  fi
  echo "control run $try: no race reported ($(grep -m1 'WARNING: ThreadSanitizer' "$log" || echo 'no TSan report'))"
done
if [ $caught = 1 ]; then
  echo "control run: race reported, as it must be"
else
  echo "tests/tsan.sh: FAILED: TSan did not catch the unlocked writer in 3 runs (see $log)" >&2
  status=1
fi

if [ "${1:-}" = all ]; then
  echo "== the CPU tests of Flat, readers, index files, parser, select, API, reliability"
  ctest --test-dir "$build" -L cpu --timeout 900 --output-on-failure \
    -R "^(test_dataset|test_synthetic|test_cpu_select|test_index_spec|test_flat|test_index_file|test_api|test_fault_injection|test_crash_safety|test_concurrency|test_bad_values|regress_)" ||
    status=1
fi
exit $status
