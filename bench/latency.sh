#!/usr/bin/env bash
# latency.sh: the online-search latency benchmark of docs/benchmarks.md, on the
# GPU machine after a build into build-gpu/ (bash .device-deps/gpu-run).
#   bash bench/latency.sh OUT [bench_latency options]
# In one run, on mix10M (cosine, k = 10, batches 1 to 10,000, 16 callers):
#   1. build-gpu/bench_latency: the copy-bandwidth floor, the fixed cost of a
#      call, then Flat, IVF4096,Flat (nprobe 6), IVF4096,PQ32 (nprobe 16) and
#      XFBQ per batch size, each IVF index's fixed cost (one query, nprobe 1),
#      and with 16 callers (batching on, with a 100 us wait, and off); it
#      writes the vectors it searched to $DATA;
#   2. PyTorch fp16 and fp32 (bench/torch_latency.py) on those vectors;
#   3. Faiss GPU (bench/faiss_latency.cpp) on those vectors, when the Faiss
#      build of `bash .device-deps/faiss-gpu` is in /tmp/fb (skipped, saying
#      so, otherwise);
#   4. OUT/latency.png (bench/latency_plot.sh) from OUT/latency.csv, where
#      gnuplot is installed (else the command that draws it elsewhere);
#   5. build-gpu/bench_gpu_exact uniform1M 10: exact search of 10,000 queries,
#      the guard against a regression of large batches (skip: NO_GUARD=1).
# Extra options go to bench_latency (e.g. --n 1000000 for a short run).
# Disk: about 4 GB in DATA (default /tmp/simil-latency-data), kept out of OUT
# and removed at the end unless KEEP_DATA=1.
set -uo pipefail
out=${1:?usage: bash bench/latency.sh OUT [bench_latency options]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
data=${DATA:-/tmp/simil-latency-data}
mkdir -p "$out"
csv=$out/latency.csv
batches=1,4,16,64,256,1024,10000
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "== bench_latency on $device ($(date -u +%FT%TZ))"
"$root/build-gpu/bench_latency" --batch "$batches" --threads 16 --wait-us 100 --csv "$csv" \
  --write-fvecs "$data" "$@" Flat IVF4096,Flat@6 IVF4096,PQ32@16 XFBQ || exit 1
echo "== PyTorch"
python3 "$root/bench/torch_latency.py" "$data" --metric ip --batch "$batches" --csv "$csv" ||
  echo "PyTorch run failed"
echo "== Faiss GPU"
if [ -f /tmp/fb/faiss/libfaiss.so ] && [ -d /tmp/fsrc ]; then
  ob=$(dirname "$(ls /opt/deps/usr/lib/x86_64-linux-gnu/openblas-*/libopenblas.so.0 | head -1)")
  if g++ -O2 -std=c++17 -I/tmp/fsrc -I/usr/local/cuda/include "$root/bench/faiss_latency.cpp" \
       -o /tmp/faiss_latency -L/tmp/fb/faiss -lfaiss -Wl,-rpath,/tmp/fb/faiss -Wl,-rpath,"$ob" \
       -L/usr/local/cuda/lib64 -lcudart -lcublas; then
    /tmp/faiss_latency "$data" Flat ip 10 0 "$batches" 200 "$csv"
    /tmp/faiss_latency "$data" IVF4096,Flat ip 10 6 "$batches" 200 "$csv"
    /tmp/faiss_latency "$data" IVF4096,PQ32 ip 10 16 "$batches" 200 "$csv"
  else
    echo "faiss_latency did not build"
  fi
else
  echo "no Faiss build in /tmp/fb: run 'bash .device-deps/faiss-gpu' first (4-8 minutes)"
fi
title="mix10M, cosine, k=10, host in/out: $device, $(date -u +%F)"
if command -v gnuplot > /dev/null; then
  bash "$root/bench/latency_plot.sh" "$csv" "$out/latency.png" "$title"
else
  # the CSV comes back with OUT: draw it where gnuplot is
  echo "no gnuplot here: draw it with bash bench/latency_plot.sh $csv $out/latency.png '$title'"
fi
[ "${KEEP_DATA:-}" = 1 ] || rm -rf "$data"
if [ "${NO_GUARD:-}" != 1 ]; then
  echo "== exact search at 10,000 queries (uniform1M, k = 10)"
  "$root/build-gpu/bench_gpu_exact" uniform1M 10 || echo "bench_gpu_exact failed"
fi
