#!/usr/bin/env bash
# Before a run on the lent GPU machine (which reaches no package registry):
# fills .device-deps/ with the shared prepare script's packages plus the ones
# simil links that it does not carry (the OpenMP build of OpenBLAS, zlib).
#   bash scripts/device-prepare.sh [--with-data] [--with-mpi]
# --with-mpi also carries Open MPI (about 7.5 MB), which device-run.sh unpacks
# where the machine has none, so that simil builds with MPI there.
set -euo pipefail
cd "$(dirname "$0")/.."
mpi=0 pass=()
for a in "$@"; do
  if [ "$a" = --with-mpi ]; then mpi=1; else pass+=("$a"); fi
done
bash ../shared/device/prepare "${pass[@]}"
cd .device-deps
rm -rf mpi
if [ $mpi = 1 ]; then
  mkdir mpi
  (cd mpi && apt-get download libopenmpi3 libopenmpi-dev openmpi-bin openmpi-common libpmix2 \
     libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15 libfabric1 libucx0 libibverbs1 \
     librdmacm1 libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libmunge2 libnuma1 \
     libpciaccess0 libltdl7 libxnvctrl0 >/dev/null)
fi
extra="libopenblas0-openmp libopenblas-openmp-dev zlib1g-dev"
apt-get download $extra >/dev/null 2>&1 || { apt-get update -qq && apt-get download $extra >/dev/null; }
# simil links the OpenMP build; the pthread one only takes up carry space.
rm -f libopenblas0-pthread_*.deb libopenblas-pthread-dev_*.deb libopenblas-dev_*.deb
cp ../scripts/device-run.sh ./device-run.sh
du -sh . | sed 's/^/.device-deps: /'
