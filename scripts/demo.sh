#!/usr/bin/env bash
# The README's main job: installs what is missing, builds in Release mode, then
# indexes Fashion-MNIST (60,000 x 784) with IVF1024,Flat, searches its 10,000
# test images (nprobe 16) and prints recall against exact ground truth, QPS and
# the backend used.
#   bash scripts/demo.sh [--index DESC] [--nprobe N] [--device auto|cpu|gpu]
set -euo pipefail
cd "$(dirname "$0")/.."
index=IVF1024,Flat
nprobe=16
device=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --index) index=$2; shift 2 ;;
    --nprobe) nprobe=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    *) echo "usage: bash scripts/demo.sh [--index DESC] [--nprobe N] [--device auto|cpu|gpu]" >&2
       exit 2 ;;
  esac
done
bash scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSIMIL_TESTS=OFF > build.log 2>&1 \
  || { cat build.log; exit 1; }
cmake --build build -j "$(nproc)" >> build.log 2>&1 || { tail -40 build.log; exit 1; }
simil=build/simil
data=/usr/share/datasets/fashion-mnist
work=build/demo
mkdir -p "$work"
if [ ! -f "$work/gt.ivecs" ]; then
  echo "== exact ground truth (Flat, k=10)"
  "$simil" build --data "$data/train-images-idx3-ubyte.gz" --index Flat --device cpu \
    --out "$work/flat.simil"
  "$simil" search --index "$work/flat.simil" --queries "$data/t10k-images-idx3-ubyte.gz" -k 10 \
    --device cpu --out "$work/gt.ivecs" > /dev/null
fi
echo "== $index on Fashion-MNIST"
"$simil" build --data "$data/train-images-idx3-ubyte.gz" --index "$index" --device "$device" \
  --out "$work/index.simil"
"$simil" search --index "$work/index.simil" --queries "$data/t10k-images-idx3-ubyte.gz" -k 10 \
  --device "$device" --nprobe "$nprobe" --gt "$work/gt.ivecs"
