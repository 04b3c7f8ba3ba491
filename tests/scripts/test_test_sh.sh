#!/usr/bin/env bash
# tests/scripts/test_test_sh.sh: the README's test command (scripts/test.sh)
# must run the C tests even when build/ was first configured by
# scripts/demo.sh (-DSIMIL_TESTS=OFF), and must fail when CTest finds no
# test at all.  scripts/test.sh runs, unchanged, in a copy of the repository
# layout around a tiny CMake project (no compiler needed), with deps.sh and
# the Python tests stubbed out; cmake and ctest are the real ones.
#   bash test_test_sh.sh REPO_ROOT
set -u
root=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# repo LABEL CMAKELISTS: a copy of scripts/test.sh beside a project
repo() {
    local dir=$tmp/$1
    mkdir -p "$dir/scripts" "$dir/python"
    cp "$root/scripts/test.sh" "$dir/scripts/test.sh"
    printf '#!/usr/bin/env bash\nexit 0\n' > "$dir/scripts/deps.sh"
    printf '#!/usr/bin/env bash\necho python-tests-ran\n' > "$dir/python/run_tests.sh"
    printf '%s\n' "$2" > "$dir/CMakeLists.txt"
    echo "$dir"
}

project='cmake_minimum_required(VERSION 3.16)
project(fake NONE)
option(SIMIL_TESTS "tests" ON)
enable_testing()
if(SIMIL_TESTS)
  add_test(NAME the_c_test COMMAND ${CMAKE_COMMAND} -E echo c-test-ran)
endif()'

# 1. build/ configured as scripts/demo.sh does, then scripts/test.sh
dir=$(repo demo-first "$project")
cmake -S "$dir" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSIMIL_TESTS=OFF \
    > "$tmp/configure.log" 2>&1 || fail "configuring the fake project: $(tail -5 "$tmp/configure.log")"
bash "$dir/scripts/test.sh" > "$tmp/out1" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "test.sh after demo.sh's configure exited $rc: $(tail -20 "$tmp/out1")"
grep -q "tests passed, 0 tests failed out of 1" "$tmp/out1" ||
    fail "test.sh after demo.sh's configure did not run the C test: $(tail -20 "$tmp/out1")"

# 2. a project whose CTest has no test: test.sh must fail
dir=$(repo no-tests 'cmake_minimum_required(VERSION 3.16)
project(fake NONE)
enable_testing()')
bash "$dir/scripts/test.sh" > "$tmp/out2" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "test.sh passed with no test at all: $(tail -20 "$tmp/out2")"
grep -q "python-tests-ran" "$tmp/out2" && fail "test.sh went on to the Python tests after no C test ran"

if [ $fails -gt 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "scripts/test.sh: runs the C tests after demo.sh, fails on none: ok"
