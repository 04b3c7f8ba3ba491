#!/usr/bin/env bash
# tests/package/test_package.sh: simil as another project uses it.
#
#   bash test_package.sh BUILD_DIR
#
# Installs the build into a temporary prefix, then builds use_simil.c
# against it three ways and runs each: find_package(simil) with
# simil::simil_static and simil::simil, and pkg-config simil, statically
# (a prefix holding only libsimil.a, so that the link needs every library
# of Libs.private) and shared.  Exits 1 on any failure.
set -u
BUILD=$1
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILS=0
fail() { echo "FAIL [package]: $*" >&2; FAILS=$((FAILS + 1)); }
# step NAME CMD...: run CMD, logging to $TMP/NAME.log; on failure show the log.
step() {
    local name=$1; shift
    "$@" >"$TMP/$name.log" 2>&1 || { fail "$name: '$*' failed:"; tail -30 "$TMP/$name.log" >&2; return 1; }
}

step install cmake --install "$BUILD" --prefix "$TMP/prefix" || exit 1
PC=$(find "$TMP/prefix" -name simil.pc | head -1)
CONFIG=$(find "$TMP/prefix" -name simil-config.cmake | head -1)
[ -n "$PC" ] || fail "no simil.pc installed"
[ -n "$CONFIG" ] || fail "no simil-config.cmake installed"

# CMake: find_package(simil)
mkdir -p "$TMP/use"
cp "$HERE/use_simil.c" "$TMP/use/"
cp "$HERE/CMakeLists.txt.in" "$TMP/use/CMakeLists.txt"
if step configure cmake -S "$TMP/use" -B "$TMP/use/build" -DCMAKE_PREFIX_PATH="$TMP/prefix" \
        -DCMAKE_BUILD_TYPE=Release &&
    step build cmake --build "$TMP/use/build"; then
    step run_static "$TMP/use/build/use_static"
    step run_shared "$TMP/use/build/use_shared"
    ldd "$TMP/use/build/use_static" | grep -q libsimil && fail "use_static loads a shared libsimil"
fi

# pkg-config, static: a prefix with libsimil.a alone
if ! command -v pkg-config >/dev/null; then
    fail "pkg-config is not installed (Debian package pkg-config)"
elif [ -n "$PC" ]; then
    LIBDIR=$(dirname "$(dirname "$PC")")
    mkdir -p "$TMP/static/lib/pkgconfig"
    cp -r "$TMP/prefix/include" "$TMP/static/"
    cp "$LIBDIR/libsimil.a" "$TMP/static/lib/"
    sed 's|^libdir=.*|libdir=${prefix}/lib|' "$PC" >"$TMP/static/lib/pkgconfig/simil.pc"
    sed -i 's|^prefix=.*|prefix=${pcfiledir}/../..|' "$TMP/static/lib/pkgconfig/simil.pc"
    FLAGS=$(PKG_CONFIG_PATH="$TMP/static/lib/pkgconfig" pkg-config --cflags --static --libs simil)
    step pc_static_build cc "$HERE/use_simil.c" $FLAGS -o "$TMP/use_pc_static" &&
        step pc_static_run "$TMP/use_pc_static"
    FLAGS=$(PKG_CONFIG_PATH="$(dirname "$PC")" pkg-config --cflags --libs simil)
    step pc_shared_build cc "$HERE/use_simil.c" $FLAGS -Wl,-rpath,"$LIBDIR" -o "$TMP/use_pc_shared" &&
        step pc_shared_run "$TMP/use_pc_shared"
fi
[ "$FAILS" -eq 0 ] || { echo "$FAILS check(s) failed" >&2; exit 1; }
echo "ok: package"
