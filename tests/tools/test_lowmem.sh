#!/usr/bin/env bash
# tests/tools/test_lowmem.sh: simil under an address-space limit (ulimit -v).
# OpenBLAS 0.3.21 retries a failed buffer reservation forever (upstream issue
# 5289); simil loads it only when a command needs it and checks the room
# first (src/core/blas.h).  Under limits from 200 MB to 700 MB, every command
# must end within 60 s (a hang fails the test): info always succeeds; build
# and search either succeed with the right results or fail with an
# out-of-memory message.
#   bash test_lowmem.sh PATH/TO/simil
set -u
SIMIL=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILS=0
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }

# Sanitizer builds reserve terabytes of shadow memory and cannot run under
# ulimit -v at all.
if ! (ulimit -v 700000; "$SIMIL" info --help > /dev/null 2> "$TMP/probe"); then
    if grep -q Sanitizer "$TMP/probe"; then
        echo "skipped: a sanitizer build cannot run under ulimit -v"
        exit 77
    fi
fi

"$SIMIL" gen --kind uniform --n 3000 --dim 32 --seed 1 --out "$TMP/d.fvecs" > /dev/null || exit 1
"$SIMIL" gen --kind uniform --n 50 --dim 32 --seed 2 --out "$TMP/q.fvecs" > /dev/null || exit 1
"$SIMIL" build --data "$TMP/d.fvecs" --index Flat --device cpu --out "$TMP/flat.simil" > /dev/null || exit 1
"$SIMIL" search --index "$TMP/flat.simil" --queries "$TMP/q.fvecs" -k 5 --device cpu \
    --out "$TMP/truth.ivecs" > /dev/null || exit 1

# limited KB NAME CMD...: run CMD under ulimit -v KB with a 60 s timeout;
# RC gets its status, $TMP/err its stderr.
limited() {
    local kb=$1 name=$2; shift 2
    (ulimit -v "$kb"; exec timeout -s KILL 60 "$@") > "$TMP/out" 2> "$TMP/err"
    RC=$?
    if [ $RC -eq 137 ] || [ $RC -eq 124 ]; then
        fail "$name under ulimit -v $kb hung (killed after 60 s): $*"
        return 1
    fi
    return 0
}

ok_or_oom() {
    local kb=$1 name=$2
    if [ $RC -ne 0 ] && ! grep -qi "out of .*memory\|out of address space" "$TMP/err"; then
        fail "$name under ulimit -v $kb: exit $RC without an out-of-memory message: $(head -c 400 "$TMP/err")"
        return 1
    fi
    [ $RC -eq 0 ]
}

for kb in 200000 300000 450000 700000; do
    limited $kb info "$SIMIL" info "$TMP/flat.simil" &&
        { [ $RC -eq 0 ] || fail "info under ulimit -v $kb: exit $RC: $(head -c 400 "$TMP/err")"; }
    if limited $kb search "$SIMIL" search --index "$TMP/flat.simil" --queries "$TMP/q.fvecs" \
        -k 5 --device cpu --out "$TMP/r.ivecs" && ok_or_oom $kb search; then
        cmp -s "$TMP/r.ivecs" "$TMP/truth.ivecs" || fail "search under ulimit -v $kb: other results"
        echo "ulimit -v $kb: search ok"
    fi
    rm -f "$TMP/ivf.simil"
    if limited $kb build "$SIMIL" build --data "$TMP/d.fvecs" --index IVF8,Flat --device cpu \
        --out "$TMP/ivf.simil" && ok_or_oom $kb build; then
        [ -s "$TMP/ivf.simil" ] || fail "build under ulimit -v $kb: no index file"
        echo "ulimit -v $kb: build ok"
    fi
done
if [ $FAILS -gt 0 ]; then
    echo "$FAILS failure(s)"
    exit 1
fi
echo "every command ended; info always ran"
