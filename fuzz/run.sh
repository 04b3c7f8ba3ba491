#!/usr/bin/env bash
# run.sh: builds the libFuzzer targets (clang, ASan + UBSan) and runs each for
# SECONDS seconds, starting from fuzz/seeds/<target>/ and the inputs kept in
# tests/regressions/<target>/.  Inputs that crash, leak or time out are copied
# to $BUILD/findings/<target>/; move them to tests/regressions/<target>/ so
# that the test suite replays them.  Prints one line of numbers per target
# and exits non-zero when any target found something in simil.
#
# libhdf5 1.10 itself crashes on some damaged files (docs/reliability.md,
# "HDF5 faults").  A finding of the hdf5 target whose report starts in
# libhdf5 is set aside in $BUILD/findings/hdf5/libhdf5/, counted, and the
# target restarted for the rest of its time; it does not fail the run.
#   fuzz/run.sh SECONDS [TARGET...]
# Environment: SIMIL_FUZZ_BUILD_DIR (default build-fuzz), CC (default clang-14,
# else clang), SIMIL_FUZZ_JOBS (parallel build jobs, default nproc).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
seconds=${1:?usage: fuzz/run.sh SECONDS [TARGET...]}
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(index_file texmex npy idx idx_gz hdf5 index_spec)
build=${SIMIL_FUZZ_BUILD_DIR:-$root/build-fuzz}
cc=${CC:-}
if [ -z "$cc" ]; then
  cc=$(command -v clang-14 || command -v clang || true)
fi
[ -n "$cc" ] || { echo "fuzz/run.sh: needs clang (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }

mkdir -p "$build"
CC=$cc cmake -S "$root" -B "$build" -G Ninja -DSIMIL_FUZZ=ON -DSIMIL_CUDA=OFF \
  -DSIMIL_TESTS=OFF -DCMAKE_BUILD_TYPE=Debug > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 2; }
cmake --build "$build" --target fuzz -j "${SIMIL_FUZZ_JOBS:-$(nproc)}" > "$build/build.log" 2>&1 ||
  { tail -50 "$build/build.log" >&2; exit 2; }

# Per target: the largest input tried.
max_len() {
  case $1 in
    index_file) echo 16384 ;;
    hdf5) echo 8192 ;;
    index_spec) echo 300 ;;
    *) echo 4096 ;;
  esac
}

# The first frame of a sanitizer or libFuzzer report that is neither the
# sanitizer runtime, libFuzzer nor libc: where the fault really is.
first_real_frame() {
  grep -E '^ +#[0-9]+ 0x' "$1" |
    grep -vE ' in (__interceptor_|__asan|__sanitizer|__lsan|__ubsan|fuzzer::|malloc|calloc|realloc|free|operator new)|libc\.so|sysdeps/|compiler-rt' |
    head -1
}

# Run target $1 for $2 seconds, restarting after libhdf5 faults (hdf5 only).
# Sets: execs, rate, libhdf5_faults, rc.
run_target() {
  local t=$1 left=$2 exe=$build/fuzz/fuzz_$1 corpus=$build/corpus/$1
  local findings=$build/findings/$1 log=$build/fuzz-$1.log
  local dict=() regress=() asan=detect_leaks=1 start n
  mkdir -p "$corpus" "$findings"
  [ -f "$here/dict/$t.dict" ] && dict=(-dict="$here/dict/$t.dict")
  [ "$t" = idx_gz ] && dict=(-dict="$here/dict/idx.dict")
  [ -d "$root/tests/regressions/$t" ] && regress=("$root/tests/regressions/$t")
  # Leaks are checked per input (libFuzzer -detect_leaks) and at exit;
  # lsan.supp drops only leaks made inside libhdf5.  libhdf5 also mallocs
  # sizes read from damaged metadata (gigabytes to terabytes) and mostly
  # handles NULL: for that target a malloc above 2 GB returns NULL instead of
  # aborting (or, for 2 GB to 1 TB, of ASan poisoning it for seconds).  simil's
  # own allocations stay checked: an unexpected SIMIL_ERR_OUT_OF_MEMORY fails
  # the target.  Elsewhere any malloc above 2 GB is a finding.
  [ "$t" = hdf5 ] && asan=$asan:allocator_may_return_null=1:max_allocation_size_mb=2048
  execs=0 rate=0 libhdf5_faults=0 rc=0
  : > "$log"
  while [ "$left" -gt 0 ]; do
    start=$SECONDS
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}$asan UBSAN_OPTIONS=print_stacktrace=1 \
      LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0" \
      "$exe" -max_total_time="$left" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 \
      -max_len="$(max_len "$t")" -print_final_stats=1 -artifact_prefix="$findings/" \
      "${dict[@]}" "$corpus" "$here/seeds/$t" "${regress[@]}" \
      > "$log.part" 2>&1
    rc=$?
    cat "$log.part" >> "$log"
    n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log.part" | tail -1)
    execs=$((execs + ${n:-0}))
    left=$((left - (SECONDS - start)))
    [ $rc -eq 0 ] && break
    if [ "$t" = hdf5 ] && [[ $(first_real_frame "$log.part") == *libhdf5* ]]; then
      libhdf5_faults=$((libhdf5_faults + 1))
      mkdir -p "$findings/libhdf5"
      mv "$findings"/crash-* "$findings"/oom-* "$findings"/leak-* "$findings"/timeout-* \
        "$findings/libhdf5/" 2> /dev/null
      rc=0
      continue
    fi
    break
  done
  rm -f "$log.part"
  rate=$((execs / ($2 > 0 ? $2 : 1)))
}

status=0
total=0
printf '%-11s %8s %10s %9s %7s %s\n' target seconds executions exec/s corpus result
for t in "${targets[@]}"; do
  [ -x "$build/fuzz/fuzz_$t" ] || { echo "fuzz/run.sh: no target $t" >&2; status=1; continue; }
  run_target "$t" "$seconds"
  log=$build/fuzz-$t.log
  size=$(find "$build/corpus/$t" -type f | wc -l)
  if [ $rc -eq 0 ]; then
    result=ok
    [ "$libhdf5_faults" -gt 0 ] &&
      result="ok for simil; $libhdf5_faults libhdf5 faults set aside in $build/findings/$t/libhdf5"
  else
    result="FAILED (rc $rc): $(ls -p "$build/findings/$t" | grep -v / | tr '\n' ' ')see $log"
    status=1
    grep -m1 -E "ERROR|SUMMARY|simil fuzz" "$log" >&2
  fi
  printf '%-11s %8s %10s %9s %7s %s\n' "$t" "$seconds" "$execs" "$rate" "$size" "$result"
  total=$((total + execs))
done
echo "total: $total executions"
[ $status -eq 0 ] ||
  echo "fuzz/run.sh: keep each finding as a file in tests/regressions/<target>/ (see its README)" >&2
exit $status
