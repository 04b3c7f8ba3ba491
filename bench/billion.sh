#!/usr/bin/env bash
# bench/billion.sh: the billion-scale run of docs/billion-scale.md, after a build
# into build-gpu/ (or $BUILD), in one go or as steps that resume from what the
# previous step saved (the index file and the ground truth):
#
#   bash bench/billion.sh                        # mix(1e9, 96, seed 11) on GPU 0
#   STEPS=build bash bench/billion.sh            # train, add, save the index
#   STEPS=gt,search,stream bash bench/billion.sh # load it, search, measure
#   N=100000000 bash bench/billion.sh            # the 100M rehearsal
#   N=200000 INDEX=IVF256,PQ16 DEVICE=cpu BUILD=build-cpu bash bench/billion.sh
#
# Settings (environment):
#   N             base rows (default 1,000,000,000)
#   INDEX         index description (default IVF65536,PQ32: PQ16 falls short of
#                 1-recall@10 0.5 at a billion rows, docs/billion-scale.md)
#   STEPS         bench_billion's steps, in one process (default
#                 build,gt,search,stream): build trains, adds and saves the
#                 index; gt writes the exact ground truth; search loads the
#                 index (when build is not among the steps) and searches;
#                 stream measures the streamed exact search from host memory
#   LIMIT         seconds the steps may run before they are stopped (default
#                 540, under a 10-minute call; 0: no limit)
#   NPROBE        nprobe values to search at (default 8,12,16,24,32)
#   DEVICE        gpu (default), gpu:N or cpu
#   NQ, K         queries (default 10,000, those of mix10M) and ground-truth depth (100)
#   TRAIN_SAMPLE  training rows (default: 64 per list, 4,194,304 for IVF65536)
#   CHUNK         rows per add chunk (default 1,048,576)
#   GT_CHUNK      rows per chunk of the exact search (default 8,388,608, 3 GiB)
#   STREAM_ROWS   rows held in host memory for the streamed search from host
#                 memory (default 33,554,432 = 12.9 GB; 0 skips it), pinned
#                 then pageable
#   STREAM_CHUNK  rows per chunk of that search (default 0: about 1 GiB)
#   STREAM_NQ     query counts of that search (default 100,1000,10000)
#   SAVE          1 (default): the build step saves the index to INDEX_FILE, if
#                 the disk has room for it; 0: no file (search then needs build
#                 in the same run)
#   KEEP          1: keep INDEX_FILE at the end; 0: remove it (default: keep it
#                 when search is not among the steps, for a later run)
#   INDEX_FILE    where (default $BUILD/billion-N.simil)
#   OUT           folder for the logs, results-STEPS.json and the ground truth
#                 (reused by a later run with the same N, NQ, K) (default
#                 $BUILD/billion-out: build folders outlive calls on a warm machine)
# Prints every figure as it is measured (a run cut short keeps what it had),
# appends it to $OUT/log.txt and writes $OUT/results-STEPS.json.
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
STREAM_CHUNK=${STREAM_CHUNK:-0}
STREAM_NQ=${STREAM_NQ:-100,1000,10000}
SAVE=${SAVE:-1}
STEPS=${STEPS:-build,gt,search,stream}
LIMIT=${LIMIT:-540}
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$BUILD/billion-out}
INDEX_FILE=${INDEX_FILE:-$BUILD/billion-$N.simil}
has_step() { [[ ",$STEPS," == *",$1,"* ]]; }
if [ -z "${KEEP:-}" ]; then
  if has_step search; then KEEP=0; else KEEP=1; fi
fi

bench=$BUILD/bench_billion
[ -x "$bench" ] || { echo "billion.sh: $bench not found; build into $BUILD first" >&2; exit 2; }
mkdir -p "$OUT"
[ "$STREAM_ROWS" -le "$N" ] || STREAM_ROWS=$N
args=(--steps "$STEPS" --n "$N" --index "$INDEX" --device "$DEVICE" --nprobe "$NPROBE"
      --nq "$NQ" --k "$K" --chunk "$CHUNK" --gt-chunk "$GT_CHUNK" --stream-rows "$STREAM_ROWS"
      --stream-chunk "$STREAM_CHUNK" --stream-nq "$STREAM_NQ"
      --gt "$OUT/gt-$N-$NQ-$K.npy" --json "$OUT/results-${STEPS//,/-}.json")
[ -n "${TRAIN_SAMPLE:-}" ] && args+=(--train-sample "$TRAIN_SAMPLE")

if ! has_step build && has_step search; then
  # resume: the index file a build step saved
  [ -f "$INDEX_FILE" ] || { echo "billion.sh: $INDEX_FILE not found: run STEPS=build first" >&2; exit 2; }
  args+=(--index-file "$INDEX_FILE")
fi
# The index file: per vector its PQ code (m bytes, rounded up to 4) and an
# 8-byte id, plus the centroids; saved only where the disk has 10% to spare.
if has_step build; then
  rm -f "$INDEX_FILE" "$INDEX_FILE".tmp-*  # an older index, or one cut short
fi
if has_step build && [ "$SAVE" = 1 ]; then
  m=$(sed -n 's/.*PQ\([0-9]*\).*/\1/p' <<<"$INDEX")
  nlist=$(sed -n 's/.*IVF\([0-9]*\).*/\1/p' <<<"$INDEX")
  need=$(( N * ((${m:-96} + 3) / 4 * 4 + 8) + ${nlist:-1} * 96 * 4 ))
  free=$(( $(df -Pk "$(dirname "$INDEX_FILE")" | awk 'NR == 2 {print $4}') * 1024 ))
  if [ "$free" -gt $(( need + need / 10 )) ]; then
    args+=(--index-file "$INDEX_FILE")
  else
    echo "billion.sh: not saving: the index file takes about $(( need >> 30 )) GiB, $(( free >> 30 )) GiB free" >&2
    has_step search || { echo "billion.sh: a build step that cannot save is lost; run the steps in one go" >&2; exit 2; }
  fi
fi

{
  echo "==== billion.sh $(date -u +%FT%TZ): STEPS=$STEPS N=$N INDEX=$INDEX DEVICE=$DEVICE"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  echo "host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "host: $(df -Ph "$(dirname "$INDEX_FILE")" | awk 'NR == 2 {print $4}') free on the index file's disk"
  rc=0
  if [ "$LIMIT" -gt 0 ]; then
    timeout --signal=INT --kill-after=10 "$LIMIT" "$bench" "${args[@]}" || rc=$?
    [ "$rc" = 124 ] && echo "billion.sh: stopped after LIMIT=$LIMIT s"
  else
    "$bench" "${args[@]}" || rc=$?
  fi
  [ "$KEEP" = 1 ] || rm -f "$INDEX_FILE"
  exit $rc
} 2>&1 | tee -a "$OUT/log.txt"
