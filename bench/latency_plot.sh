#!/usr/bin/env bash
# latency_plot.sh: draw the latency of a call against the batch size from the
# CSV that bench_latency, bench/torch_latency.py and bench/faiss_latency.cpp
# append to (columns: system,device,index,params,k,batch,threads,mode,calls,
# p50_ms,p99_ms,qps).
#   bash bench/latency_plot.sh RESULTS.csv OUT.png [TITLE]
# One line per system, index and parameters (p50, log-log); the rows of one
# call at a time only (mode "call"; not the "fixed-cost" rows).  Needs
# gnuplot (Debian gnuplot-nox).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 RESULTS.csv OUT.png [TITLE]" >&2; exit 2; }
csv=$1 png=$2 title=${3:-latency per call, host input and output}
command -v gnuplot > /dev/null || { echo "$0: gnuplot is not installed" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One data file per series: "system index params" -> batch p50 p99, sorted.
# Fields may be double-quoted and hold commas ("IVF4096,Flat").
awk -v dir="$work" '
  function split_csv(line, f,    n, i, c, q, cur) {
    n = 0; q = 0; cur = ""
    for (i = 1; i <= length(line); i++) {
      c = substr(line, i, 1)
      if (c == "\"") q = !q
      else if (c == "," && !q) { f[++n] = cur; cur = "" }
      else cur = cur c
    }
    f[++n] = cur
    return n
  }
  NR == 1 { next }
  {
    split_csv($0, f)
    if (f[8] != "call") next
    name = f[1] " " f[3] (f[4] != "" ? " " f[4] : "")
    if (!(name in file)) {
      file[name] = sprintf("%s/s%03d.dat", dir, ++n)
      print name > (dir "/names")
    }
    print f[6], f[10], f[11] > file[name]
  }' "$csv"
[ -s "$work/names" ] || { echo "$0: no rows of mode 'call' in $csv" >&2; exit 1; }
i=0
plots=()
while IFS= read -r name; do
  i=$((i + 1))
  f=$(printf '%s/s%03d.dat' "$work" "$i")
  sort -n -o "$f" "$f"
  plots+=("'$f' using 1:2 with linespoints title '$name'")
done < "$work/names"
cmd=$(IFS=,; echo "${plots[*]}")
gnuplot <<EOF
if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {
  set terminal pngcairo size 1000,700 noenhanced font 'sans,11'
} else {
  set terminal png size 1000,700 noenhanced
}
set output '$png.tmp'
set title '$title'
set logscale xy
set xlabel 'queries per call'
set ylabel 'p50 latency of a call (ms)'
set grid
set key top left
plot $cmd
EOF
mv "$png.tmp" "$png"
echo "drew $png ($i series)"
