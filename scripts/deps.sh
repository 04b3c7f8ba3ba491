#!/usr/bin/env bash
# Installs, through apt-get, the Debian packages that building, testing and the
# demo need, skipping those already present.  Run as root on Debian 12.
#   bash scripts/deps.sh              build + test + demo packages
#   bash scripts/deps.sh reliability  also clang, its sanitizer runtimes and
#                                     OpenMP, for fuzzing and ThreadSanitizer
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  libopenblas-openmp-dev zlib1g-dev libhdf5-dev libcmocka-dev
  python3 python3-dev python3-venv python3-numpy python3-pytest python3-setuptools
  python3-wheel python3-faiss dataset-fashion-mnist gnuplot-nox libopenmpi-dev openmpi-bin libpng-dev
  libjpeg-dev
)
[ "${1:-}" = reliability ] && packages+=(clang-14 libclang-rt-14-dev libomp-14-dev llvm-14)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
