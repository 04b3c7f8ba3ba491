#!/usr/bin/env bash
# Builds the Python package simil into a virtual environment under
# build-python/ and runs its tests (python/tests) with pytest.
#   bash python/run_tests.sh [pytest arguments]
# Needs Debian's python3 with venv, its headers, numpy, pytest and setuptools
# (python3-venv python3-dev python3-numpy python3-pytest python3-setuptools
# python3-wheel, all installed by scripts/deps.sh): the environment sees them
# (--system-site-packages), so nothing is downloaded.  Elsewhere pip fetches
# whichever of them is missing.
# Environment:
#   PYTHON                 interpreter for the environment (default python3)
#   SIMIL_PY_VENV          where the environment lives (default build-python/venv)
#   SIMIL_CMAKE_BUILD_DIR  build libsimil in this CMake tree (e.g. build, the one of
#                          scripts/test.sh) instead of a private one under build-python/
#   SIMIL_CUDA             AUTO (default), ON or OFF, for a private tree
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=${SIMIL_PY_VENV:-$root/build-python/venv}
python=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3 ] && python=/usr/bin/python3
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv --system-site-packages "$venv"
fi
py=$venv/bin/python
if ! "$py" -c 'import numpy, pytest, setuptools, wheel' 2>/dev/null; then
  "$py" -m pip install -q numpy pytest "setuptools>=61" wheel
fi
if [ -n "${SIMIL_CMAKE_BUILD_DIR:-}" ]; then
  SIMIL_CMAKE_BUILD_DIR=$(realpath -m "$SIMIL_CMAKE_BUILD_DIR")
  export SIMIL_CMAKE_BUILD_DIR
fi
# No build isolation: the environment already has the build requirements, and
# a second copy of numpy would be fetched for every build otherwise.
"$py" -m pip install -q --no-build-isolation --no-deps --force-reinstall .
# Run from build-python/, so that "import simil" finds the installed package
# and not python/simil, which has no compiled extension.
mkdir -p "$root/build-python" && cd "$root/build-python"
exec "$py" -m pytest -q "$root/python/tests" "$@"
