#!/usr/bin/env bash
# bench/billion.sh: the billion-scale run of docs/billion-scale.md in one go,
# after a build into build-gpu/ (or $BUILD):
#
#   bash bench/billion.sh                        # mix(1e9, 96, seed 11) on GPU 0
#   N=10000000 INDEX=IVF4096,PQ16 bash bench/billion.sh      # scaled down
#   N=200000 INDEX=IVF256,PQ16 DEVICE=cpu bash bench/billion.sh  # no GPU
#
# Settings (environment):
#   N             base rows (default 1,000,000,000)
#   INDEX         index description (default IVF65536,PQ32: PQ16 falls short of
#                 1-recall@10 0.5 at a billion rows, docs/billion-scale.md)
#   NPROBE        nprobe values to search at (default 8,12,16,24,32)
#   DEVICE        gpu (default), gpu:N or cpu
#   NQ, K         queries (default 10,000, those of mix10M) and ground-truth depth (100)
#   TRAIN_SAMPLE  training rows (default: 64 per list, 4,194,304 for IVF65536)
#   CHUNK         rows per add chunk (default 1,048,576)
#   GT_CHUNK      rows per chunk of the exact search (default 8,388,608, 3 GiB)
#   STREAM_ROWS   rows held in host memory for the streamed search from host
#                 memory (default 33,554,432 = 12.9 GB; 0 skips it)
#   SAVE          1 (default): save the index to INDEX_FILE and load it back, if
#                 the disk has room for it (then remove it); 0: skip
#   INDEX_FILE    where (default $BUILD/billion.simil)
#   OUT           folder for the log, results.json and the ground truth (reused
#                 by a later run with the same N, NQ, K) (default billion-out)
# Prints every figure as it is measured (a run cut short keeps what it had)
# and writes $OUT/results.json.
set -euo pipefail

N=${N:-1000000000}
INDEX=${INDEX:-IVF65536,PQ32}
NPROBE=${NPROBE:-8,12,16,24,32}
DEVICE=${DEVICE:-gpu}
NQ=${NQ:-10000}
K=${K:-100}
CHUNK=${CHUNK:-1048576}
GT_CHUNK=${GT_CHUNK:-8388608}
STREAM_ROWS=${STREAM_ROWS:-33554432}
SAVE=${SAVE:-1}
OUT=${OUT:-billion-out}
BUILD=${BUILD:-build-gpu}
INDEX_FILE=${INDEX_FILE:-$BUILD/billion.simil}

bench=$BUILD/bench_billion
[ -x "$bench" ] || { echo "billion.sh: $bench not found; build into $BUILD first" >&2; exit 2; }
mkdir -p "$OUT"
rm -f "$INDEX_FILE" "$INDEX_FILE".tmp-*  # left by a run that was cut short
[ "$STREAM_ROWS" -le "$N" ] || STREAM_ROWS=$N
args=(--n "$N" --index "$INDEX" --device "$DEVICE" --nprobe "$NPROBE" --nq "$NQ" --k "$K"
      --chunk "$CHUNK" --gt-chunk "$GT_CHUNK" --stream-rows "$STREAM_ROWS"
      --gt "$OUT/gt-$N-$NQ-$K.npy" --json "$OUT/results.json")
[ -n "${TRAIN_SAMPLE:-}" ] && args+=(--train-sample "$TRAIN_SAMPLE")

# The index file: per vector its PQ code (m bytes, rounded up to 4) and an
# 8-byte id, plus the centroids; saved only where the disk has 10% to spare.
if [ "$SAVE" = 1 ]; then
  m=$(sed -n 's/.*PQ\([0-9]*\).*/\1/p' <<<"$INDEX")
  nlist=$(sed -n 's/.*IVF\([0-9]*\).*/\1/p' <<<"$INDEX")
  need=$(( N * ((${m:-96} + 3) / 4 * 4 + 8) + ${nlist:-1} * 96 * 4 ))
  free=$(( $(df -Pk "$(dirname "$INDEX_FILE")" | awk 'NR == 2 {print $4}') * 1024 ))
  if [ "$free" -gt $(( need + need / 10 )) ]; then
    args+=(--save "$INDEX_FILE")
  else
    echo "billion.sh: not saving: the index file takes about $(( need >> 30 )) GiB, $(( free >> 30 )) GiB free" >&2
  fi
fi

{
  echo "==== billion.sh $(date -u +%FT%TZ): N=$N INDEX=$INDEX DEVICE=$DEVICE"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  echo "host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  rc=0
  "$bench" "${args[@]}" || rc=$?
  rm -f "$INDEX_FILE"
  exit $rc
} 2>&1 | tee "$OUT/log.txt"
