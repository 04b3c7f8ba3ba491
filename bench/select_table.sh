#!/usr/bin/env bash
# select_table.sh: on the GPU machine, after a build into build-gpu/, the
# k-selection dispatch table filled and checked in one run on one card
# (docs/k-selection.md):
#   1. the exact search of uniform1M with today's table (the baseline);
#   2. bench_select sweep: every design against a device copy;
#   3. the sweep's kMeasuredRules pasted into src/cuda/select_dispatch.cu (the
#      working tree's copy; the patched file is kept in OUTDIR), and a rebuild;
#   4. the new table's choices, the selection tests, k-selection alone on
#      10,000 x 100,000 floats, and the exact search of uniform1M again.
# With SELECT_TABLE_IVF=1, steps 1 and 4 also time IVF-Flat and IVF-PQ on
# Fashion-MNIST at nprobe 16 (their searches select through the table too).
#   bash bench/select_table.sh [OUTDIR]     (OUTDIR: $OUT, else .)
set -euo pipefail
b=build-gpu
out=${1:-${OUT:-.}}
src=src/cuda/select_dispatch.cu
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv,noheader
searches() {
  $b/bench_gpu_exact uniform1M 10 100 1024
  if [ "${SELECT_TABLE_IVF:-0}" = 1 ]; then
    $b/bench_gpu_ivf fashion-mnist IVF1024,Flat 16
    $b/bench_gpu_ivf fashion-mnist IVF256,PQ56 16
  fi
}
echo "==== searches, today's table"
searches
echo "==== sweep"
$b/bench_select sweep | tee "$out/select-sweep.txt"
# The rules: from the sweep's "constexpr ... kMeasuredRules = {" to "};".
sed -n '/^constexpr std::initializer_list<SelectRule> kMeasuredRules = {$/,/^};$/p' \
  "$out/select-sweep.txt" >"$out/select-rules.txt"
if ! grep -q '^};$' "$out/select-rules.txt"; then
  echo "select_table.sh: the sweep printed no rules (see select-sweep.txt)" >&2
  exit 1
fi
python3 - "$src" "$out/select-rules.txt" <<'EOF'
import sys
path, rules = sys.argv[1], open(sys.argv[2]).read()
text = open(path).read()
empty = "constexpr std::initializer_list<SelectRule> kMeasuredRules = {\n};\n"
if empty not in text:
    sys.exit("select_table.sh: kMeasuredRules is not empty in " + path)
open(path, "w").write(text.replace(empty, rules))
EOF
cp "$src" "$out/select_dispatch.cu"
echo "==== rebuild with the measured rules"
cmake --build $b -j 16 --target bench_select bench_gpu_exact bench_gpu_ivf test_cuda_select \
  >/dev/null
echo "==== the table's choices"
$b/bench_select dispatch
echo "==== selection tests with the measured rules"
ctest --test-dir $b -R '^test_cuda_select$' --output-on-failure
echo "==== k-selection alone and searches, measured table"
$b/bench_gpu_exact select 10000 100000 10 100 1024 2048
searches
