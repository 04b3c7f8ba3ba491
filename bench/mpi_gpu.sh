#!/usr/bin/env bash
# On a machine with two GPUs (device kind nvidia-h200-x2), after a build with
# MPI into build-gpu/: the same mix10M IVF4096,Flat search (10,000 queries,
# k=10, nprobe 16) on one GPU, on two GPUs in one process (shards, replicas),
# and through 2 MPI ranks with one GPU and one shard file each; then an index
# twice the size (mix20M) sharded over both GPUs.  Every time is the median of
# 5 searches from "simil search --repeat 5"; the MPI result must equal the
# one-process result (the shards share the quantizer).
#   bash bench/mpi_gpu.sh [WORKDIR]
set -euo pipefail
s=$PWD/build-gpu/simil
dir=${1:-/tmp/simil-mpi}
mkdir -p "$dir"
cd "$dir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Two searches at once (parts, or ranks) each run OpenMP teams on the host:
# spinning teams fight over the cores (docs/distributed.md), so wait passively,
# and give each rank half of the cores.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
rank_threads=$(( $(nproc) / 2 ))
search() { "$s" search --queries q.fvecs -k 10 --nprobe 16 --repeat 5 "$@" | grep -E "time|backend"; }

"$s" gen --kind mix --n 10000 --dim 96 --seed 12 --out q.fvecs
"$s" gen --kind mix --n 500000 --dim 96 --seed 13 --out train.fvecs
"$s" gen --kind mix --n 20000000 --dim 96 --seed 11 --out base20M.fvecs
"$s" gen --kind mix --n 10000000 --dim 96 --seed 11 --out base.fvecs

build() { "$s" build --train train.fvecs --index IVF4096,Flat "$@" 2>/dev/null; }
build --data base.fvecs --device gpu:0 --out full.simil
build --data base.fvecs --device gpus --out shards.simil
build --data base.fvecs --device gpus/r2 --out replicas.simil
for i in 0 1; do build --data base.fvecs --part $i/2 --device gpu:0 --out part-$i.simil; done

echo "== mix10M, one GPU"
search --index full.simil --device gpu:0 --out one.ivecs
echo "== mix10M, two GPUs in one process, sharded"
search --index shards.simil --device gpus --out shards.ivecs
echo "== mix10M, two GPUs in one process, replicated"
search --index replicas.simil --device gpus/r2 --out replicas.ivecs
echo "== mix10M, two MPI ranks, one GPU and one shard file each"
mpirun -np 2 --bind-to none -x OMP_WAIT_POLICY -x OMP_NUM_THREADS=$rank_threads bash -c \
  'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec "$0" "$@"' \
  "$s" search --distributed --index 'part-{rank}.simil' --queries q.fvecs -k 10 --nprobe 16 \
  --repeat 5 --device gpu --out dist.ivecs | grep -E "time|backend"
for f in shards replicas dist; do
  cmp -s one.ivecs $f.ivecs && echo "$f: same ids as one GPU" || echo "$f: ids DIFFER from one GPU"
done

rm -f base.fvecs ./*.simil
echo "== mix20M (twice the size), sharded over two GPUs"
build --data base20M.fvecs --device gpus --out full20M.simil
search --index full20M.simil --device gpus
