#!/usr/bin/env bash
# On the GPU machine, after a build into build-gpu/: the GPU benchmarks of
# docs/benchmarks.md, by section, with PyTorch's figure in the same run.
#   bash bench/gpu_report.sh SECTION …
# Sections:
#   exact   k-selection alone, uniform1M and uniform10M exact search, PyTorch
#   select  every k-selection design side by side (bench_select; docs/k-selection.md)
#   ivf     IVF-Flat and IVF-PQ on Fashion-MNIST and mix10M, k-means
#   graph   k-NN graphs of Fashion-MNIST and mix10M
#   xfbq    XFBQ against IVF-Flat and exact search
#   scale   IVF16384,PQ16 on mix100M (38 GB of host memory)
#   plot    simil bench's recall-QPS sweep of Fashion-MNIST on the GPU, into
#           ${OUT:-.}/bench-fashion-gpu (results.csv, plot.gp, plot.png)
#   multi   two GPUs in one process (bench_gpu_multi; nvidia-h200-x2)
#   mpi     one GPU, two GPUs, two MPI ranks, and mix20M sharded (bench/mpi_gpu.sh)
#   latency online search: latency per batch size and with 16 callers, PyTorch
#           and Faiss in the same run, into ${OUT:-.}/latency (bench/latency.sh)
set -uo pipefail
b=build-gpu
torch=${TORCH_KNN:-.device-deps/torch_knn.py}
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv,noheader
for section in "$@"; do
  echo "==== $section ($(date -u +%FT%TZ))"
  case $section in
    exact)
      $b/bench_gpu_exact select 10000 100000 10 100 1024 2048 16384
      $b/bench_gpu_exact uniform1M 10 100 1024 2048 16384
      $b/bench_gpu_exact uniform10M 10 100
      python3 "$torch" 1000000 128 10000 10 100 1024 2048
      python3 "$torch" 10000000 96 10000 10 100 ;;
    select)
      $b/bench_select dispatch
      $b/bench_select sweep ;;
    ivf)
      $b/bench_gpu_ivf fashion-mnist IVF1024,Flat 8 12 16 17 20
      $b/bench_gpu_ivf fashion-mnist IVF256,PQ56 16
      $b/bench_gpu_ivf mix10M IVF4096,Flat 4 16
      $b/bench_gpu_ivf mix10M IVF4096,PQ32 4 8 16
      $b/bench_gpu_ivf mix10M IVF4096,PQ32,Refine 16
      $b/bench_gpu_ivf kmeans ;;
    graph)
      $b/bench_knn_graph fashion-mnist --device gpu --nprobe 4,8,16
      $b/bench_knn_graph mix10M --device gpu --nprobe 2,4,8 ;;
    xfbq)
      $b/bench_gpu_xfbq mix10M --flat-queries 1000 --extras 0.005,0.01 --nprobes 4,6,7,8 \
        --ivf-extras 0.006,0.008,0.009,0.01
      $b/bench_gpu_xfbq fashion-mnist flat ivf ivfx --extras 0.01,0.02 --nprobes 8,16 \
        --ivf-extras 0.01,0.02 ;;
    scale)
      $b/bench_gpu_ivf mix100M IVF16384,PQ16 4 16 64 ;;
    plot)
      $b/simil bench --dataset fashion-mnist --device gpu --index Flat --index IVF1024,Flat \
        --index IVF256,Flat --index IVF256,PQ56 --index IVF1024,PQ28 \
        --sweep nprobe=1,2,4,8,16,32,64 --anchors bench/anchors/fashion-mnist-faiss-h200.csv \
        --out "${OUT:-.}/bench-fashion-gpu" ;;
    multi)
      $b/bench_gpu_multi uniform1M Flat
      $b/bench_gpu_multi mix10M IVF4096,Flat 16
      $b/bench_gpu_multi mix10M IVF4096,PQ32 16 ;;
    mpi)
      bash bench/mpi_gpu.sh ;;
    latency)
      bash bench/latency.sh "${OUT:-.}/latency" ;;
    *) echo "unknown section $section"; exit 2 ;;
  esac
done
