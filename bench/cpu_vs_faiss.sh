#!/usr/bin/env bash
# CPU benchmark against Debian's Faiss 1.7.3, in one run, on Fashion-MNIST.
#   bash bench/cpu_vs_faiss.sh [INDEX] [K] [NPROBE] [THREADS]
# Defaults: Flat, k=100, 2 threads.  Needs build-rel/simil (Release) and
# python3-faiss.  For an approximate INDEX the true neighbours come from an
# exact simil search first, and both sides report 1-recall@1, 1-recall@K and
# recall K@K against them, by id.  Prints both JSON lines and the QPS ratio simil / Faiss.
set -euo pipefail
cd "$(dirname "$0")/.."
index=${1:-Flat}; k=${2:-100}; nprobe=${3:-0}; threads=${4:-2}
data=/usr/share/datasets/fashion-mnist
base=$data/train-images-idx3-ubyte.gz
queries=$data/t10k-images-idx3-ubyte.gz
simil=${SIMIL:-build-rel/simil}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$simil" build --data "$base" --index "$index" --device cpu --out "$work/index.simil" 2>/dev/null
probe=(); [ "$nprobe" -gt 0 ] && probe=(--nprobe "$nprobe")
gt=()
if [ "$index" != Flat ]; then
  "$simil" build --data "$base" --index Flat --device cpu --out "$work/flat.simil" 2>/dev/null
  "$simil" search --index "$work/flat.simil" --queries "$queries" -k "$k" --device cpu \
    --out "$work/gt.ivecs" >/dev/null
  gt=(--gt "$work/gt.ivecs")
fi
ours=$("$simil" search --index "$work/index.simil" --queries "$queries" -k "$k" --device cpu \
       --threads "$threads" --repeat 3 --json "${probe[@]}" "${gt[@]}")
theirs=$(/usr/bin/python3 bench/faiss_anchor.py --base "$base" --queries "$queries" \
         --index "$index" -k "$k" --nprobe "$nprobe" --threads "$threads" "${gt[@]}")
echo "simil: $ours"
echo "faiss: $theirs"
python3 -c "import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); \
print(f\"QPS ratio simil/faiss: {a['qps']/b['qps']:.2f}  ({a['qps']:.0f} vs {b['qps']:.0f})\")" \
  "$ours" "$theirs"
