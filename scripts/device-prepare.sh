#!/usr/bin/env bash
# Before a run on the lent GPU machine (which reaches no package registry):
# fills .device-deps/ with the shared prepare script's packages plus the ones
# simil links that it does not carry (the OpenMP build of OpenBLAS, zlib).
#   bash scripts/device-prepare.sh [--with-data]
set -euo pipefail
cd "$(dirname "$0")/.."
bash ../shared/device/prepare "$@"
cd .device-deps
extra="libopenblas0-openmp libopenblas-openmp-dev zlib1g-dev"
apt-get download $extra >/dev/null 2>&1 || { apt-get update -qq && apt-get download $extra >/dev/null; }
# simil links the OpenMP build; the pthread one only takes up carry space.
rm -f libopenblas0-pthread_*.deb libopenblas-pthread-dev_*.deb libopenblas-dev_*.deb
cp ../scripts/device-run.sh ./device-run.sh
du -sh . | sed 's/^/.device-deps: /'
