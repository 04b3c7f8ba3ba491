#!/usr/bin/env bash
# tests/tools/test_bench.sh: end-to-end tests of "simil bench".
#
#   bash test_bench.sh PATH/TO/simil GROUP
#
# GROUP is one of usage, sweep, plot, gtcache, ivf, params, errors (or all).  Recall
# is checked against ground truth computed here in Python (float64 exact
# k-NN), the results files against the columns the documentation promises,
# and the plot by the bytes of its PNG header.  Every failure prints the
# command, its exit status and its stderr; the script exits 1 if anything
# failed, and 77 (CTest's "skipped") when a group could not run at all: no
# gnuplot for the plot group, no IVF index in the library for the ivf group.
set -u

SIMIL=$1
GROUP=${2:-all}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILS=0
SKIPPED=0
HEADER="dataset,index,params,mode,k,build_seconds,index_bytes,qps,runs,p50_ms,p95_ms,p99_ms,p999_ms,one_recall_at_1,one_recall_at_k,recall_k_at_k,recall_by,backend,device"

fail() { echo "FAIL [$GROUP]: $*" >&2; FAILS=$((FAILS + 1)); }
skip() { echo "SKIP [$GROUP]: $*"; SKIPPED=1; }

# run CMD...: stdout to $TMP/out, stderr to $TMP/err, exit status in $RC.
run() { LAST="$*"; "$@" >"$TMP/out" 2>"$TMP/err"; RC=$?; }

# expect STATUS CMD...: run CMD and check its exit status.
expect() {
    local want=$1; shift
    run "$@"
    [ "$RC" -eq "$want" ] || fail "'$LAST' exited $RC, want $want; stderr: $(head -c 600 "$TMP/err")"
}

err_has() { grep -qF -- "$1" "$TMP/err" || fail "stderr of '$LAST' lacks '$1': $(head -c 600 "$TMP/err")"; }
out_has() { grep -qF -- "$1" "$TMP/out" || fail "stdout of '$LAST' lacks '$1': $(head -c 600 "$TMP/out")"; }

# py CODE ARGS...: run Python with the helpers below; a failed check exits 1.
py() {
    local code=$1; shift
    "${PYTHON:-python3}" -c "$PYLIB
$code" "$@" || fail "python check failed after '$LAST' (args: $*)"
}

PYLIB='
import csv, json, struct, sys
HEADER = "'"$HEADER"'".split(",")

def check(cond, msg):
    if not cond:
        print("check failed: " + msg, file=sys.stderr)
        sys.exit(1)

def read_vecs(path, code):
    data, rows, off = open(path, "rb").read(), [], 0
    while off < len(data):
        d = struct.unpack_from("<i", data, off)[0]
        rows.append(list(struct.unpack_from("<%d%s" % (d, code), data, off + 4)))
        off += 4 + 4 * d
    return rows

def write_vecs(path, rows, code):
    with open(path, "wb") as f:
        for r in rows:
            f.write(struct.pack("<i%d%s" % (len(r), code), len(r), *r))

def knn_ids(base, queries, k):
    """Exact L2 k-NN in float64, ids nearest first."""
    return [[i for _, i in sorted((sum((a - b) ** 2 for a, b in zip(q, x)), i)
                                  for i, x in enumerate(base))[:k]] for q in queries]

def results(folder):
    """The rows of results.csv, checked against results.json."""
    with open(folder + "/results.csv", newline="") as f:
        lines = list(csv.reader(f))
    check(lines and lines[0] == HEADER, "results.csv header %r" % (lines[:1],))
    rows = [dict(zip(HEADER, r)) for r in lines[1:]]
    for r, line in zip(rows, lines[1:]):
        check(len(line) == len(HEADER), "results.csv row of %d fields: %r" % (len(line), line))
        check(r["recall_by"] in ("distance", "id"), "recall_by %r" % r["recall_by"])
        for key in ("one_recall_at_1", "one_recall_at_k", "recall_k_at_k"):
            check(0.0 <= float(r[key]) <= 1.0, "%s = %s outside [0, 1]" % (key, r[key]))
        check(float(r["qps"]) > 0 and float(r["build_seconds"]) >= 0, "row %r" % r)
        check(r["index_bytes"] == "" or int(r["index_bytes"]) >= 0, "row %r" % r)
        check(r["mode"] in ("batch", "single") and int(r["runs"]) >= 1, "row %r" % r)
        lat = [float(r[key]) for key in ("p50_ms", "p95_ms", "p99_ms", "p999_ms")]
        check(0 <= lat[0] <= lat[1] <= lat[2] <= lat[3], "latency percentiles %r" % lat)
        check(r["backend"] != "" and r["device"] != "", "row %r" % r)
    objs = json.load(open(folder + "/results.json"))
    check(len(objs) == len(rows), "%d JSON objects, %d CSV rows" % (len(objs), len(rows)))
    for o, r in zip(objs, rows):
        check(list(o.keys()) == HEADER, "JSON keys %r" % list(o.keys()))
        for key in HEADER:
            want = r[key]
            if key == "index_bytes" and want == "":
                check(o[key] is None, "JSON %s %r" % (key, o[key]))
            elif isinstance(o[key], str):
                check(o[key] == want, "JSON %s %r, CSV %r" % (key, o[key], want))
            else:
                check(abs(float(o[key]) - float(want)) <= 1e-6 * max(1, abs(float(want))),
                      "JSON %s %r, CSV %r" % (key, o[key], want))
    return rows
'

# Small uniform data through the tool, and its true neighbours by the oracle.
make_data() {
    expect 0 "$SIMIL" gen --kind uniform --n 2000 --dim 16 --seed 1 --out "$TMP/base.fvecs"
    expect 0 "$SIMIL" gen --kind uniform --n 40 --dim 16 --seed 2 --out "$TMP/q.fvecs"
    expect 0 "$SIMIL" gen --kind uniform --n 500 --dim 16 --seed 3 --out "$TMP/train.fvecs"
}
make_truth() {
    py '
base, queries = read_vecs(sys.argv[1], "f"), read_vecs(sys.argv[2], "f")
write_vecs(sys.argv[3], knn_ids(base, queries, 25), "i")
' "$TMP/base.fvecs" "$TMP/q.fvecs" "$TMP/gt25.ivecs"
}

BENCH=()
bench_args() { BENCH=("$SIMIL" bench --data "$TMP/base.fvecs" --queries "$TMP/q.fvecs" --device cpu); }

# An index description the library accepts but does not build, or "".
unsupported_index() {
    local d
    for d in "XFBQ" "IVF8,XFBQ" "IVF8,PQ4,Refine" "OPQ4,IVF8,PQ4" "IVF8,PQ4"; do
        run "$SIMIL" build --data "$TMP/base.fvecs" --index "$d" --device cpu --out "$TMP/probe.idx"
        if [ "$RC" -eq 1 ] &&
            grep -qiE "unsupported|not built|does not build|builds only|only Flat" "$TMP/err"; then
            echo "$d"
            return
        fi
    done
    echo ""
}

# ---------------------------------------------------------------- usage
test_usage() {
    expect 0 "$SIMIL" --help
    out_has "  bench "
    expect 0 "$SIMIL" bench --help
    out_has "usage: simil bench"
    for opt in --data --queries --dataset --gt --train --index --sweep --k --metric \
        --device --threads --anchors --out --mode --runs fashion-mnist uniform1M mix10M \
        index_bytes; do
        out_has "$opt"
    done
    expect 0 "$SIMIL" bench -h
    out_has "usage: simil bench"
}

# ---------------------------------------------------------------- sweep
test_sweep() {
    make_data
    make_truth
    bench_args
    # Flat against the oracle's ids: exact, one row, nprobe does not apply.
    expect 0 "${BENCH[@]}" --index Flat --sweep nprobe=1,2,4 --gt "$TMP/gt25.ivecs" --out "$TMP/r1"
    py '
rows = results(sys.argv[1])
check(len(rows) == 1, "Flat with an nprobe sweep: %d rows, want 1" % len(rows))
r = rows[0]
check(r["index"] == "Flat" and r["params"] == "" and r["k"] == "10", "row %r" % r)
check(r["dataset"] == "base", "dataset %r" % r["dataset"])
check(all(float(r[key]) == 1.0 for key in ("one_recall_at_1", "one_recall_at_k", "recall_k_at_k")),
      "Flat recall %r" % r)
check(r["recall_by"] == "distance", "bench has the base vectors, yet recall by %r" % r)
' "$TMP/r1"
    for h in index params QPS 1-recall@1 1-recall@10 "recall 10@10"; do out_has "$h"; done
    grep -Eq '^Flat +batch +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +1\.0000 +1\.0000 +1\.0000$' "$TMP/out" ||
        fail "no Flat row in the table: $(cat "$TMP/out")"
    grep -q $'\r' "$TMP/err" && fail "progress printed although stderr is not a terminal"

    # Recall by distance, as ann-benchmarks: a result counts when it is no
    # farther (+1e-3) than the neighbour it stands for.  A made-up truth of
    # true ranks 0-4 and 15-19 (even queries) or 15-24 (odd ones) is beaten
    # by exact search everywhere: 1.  (By id it would be 0.5, 0.5, 0.25.)
    py '
rows = read_vecs(sys.argv[1], "i")
write_vecs(sys.argv[2], [r[:5] + r[15:20] if q % 2 == 0 else r[15:25]
                         for q, r in enumerate(rows)], "i")
' "$TMP/gt25.ivecs" "$TMP/fake.ivecs"
    expect 0 "${BENCH[@]}" --index Flat --gt "$TMP/fake.ivecs" --out "$TMP/r2"
    py '
r = results(sys.argv[1])[0]
check(all(float(r[key]) == 1.0 for key in ("one_recall_at_1", "one_recall_at_k", "recall_k_at_k")),
      "exact search against a worse truth, by distance: %r" % r)
' "$TMP/r2"

    # A swept parameter that applies to every index: one row per value, in order;
    # two sweeps give every combination of those that apply.
    expect 0 "${BENCH[@]}" --index Flat --sweep threads=1,2 --sweep nprobe=1,2 -k 5 --out "$TMP/r3"
    py '
rows = results(sys.argv[1])
check([r["params"] for r in rows] == ["threads=1", "threads=2"], "params %r" % rows)
check(all(r["k"] == "5" and float(r["recall_k_at_k"]) == 1.0 for r in rows), "rows %r" % rows)
' "$TMP/r3"

    # Batch and single-query modes: one row each per point, the same results
    # (times are not compared: a shared machine makes them noise).
    expect 0 "${BENCH[@]}" --index Flat --mode both --runs 2 --gt "$TMP/gt25.ivecs" --out "$TMP/m"
    py '
rows = results(sys.argv[1])
check([r["mode"] for r in rows] == ["batch", "single"], "modes %r" % rows)
check(all(r["runs"] == "2" and float(r["recall_k_at_k"]) == 1.0 for r in rows), "rows %r" % rows)
batch = rows[0]
check(int(batch["index_bytes"]) >= 2000 * 16 * 4, "Flat of 2000 x 16 floats in %s bytes" % batch["index_bytes"])
' "$TMP/m"
    expect 0 "${BENCH[@]}" --index Flat --mode single --runs 1 --out "$TMP/m1"
    py 'check([r["mode"] for r in results(sys.argv[1])] == ["single"], "modes")' "$TMP/m1"
    out_has "single"

    # Several indexes; one that is valid but not built is skipped with a message.
    local un
    un=$(unsupported_index)
    if [ -n "$un" ]; then
        expect 0 "${BENCH[@]}" --index Flat --index "$un" --index Flat --metric ip --out "$TMP/r4"
        err_has "skipping $un"
        py '
rows = results(sys.argv[1])
check([r["index"] for r in rows] == ["Flat", "Flat"], "rows %r" % rows)
check(all(float(r["recall_k_at_k"]) == 1.0 for r in rows), "Flat ip recall %r" % rows)
' "$TMP/r4"
        # Nothing measured at all is a failure, with the files still written.
        expect 1 "${BENCH[@]}" --index "$un" --out "$TMP/r5"
        err_has "skipping $un"
        err_has "no results"
        py 'check(results(sys.argv[1]) == [], "rows")' "$TMP/r5"
    else
        echo "note: every index description tried is built; the skip path is not tested"
    fi
}

# ---------------------------------------------------------------- plot
# png_size FILE W H: a PNG signature, then an IHDR chunk of that size.
png_size() {
    py '
data = open(sys.argv[1], "rb").read(33)
check(data[:8] == b"\x89PNG\r\n\x1a\n", "%s: no PNG signature" % sys.argv[1])
length, kind, w, h = struct.unpack(">I4sII", data[8:24])
check(kind == b"IHDR" and length == 13, "%s: first chunk %r" % (sys.argv[1], kind))
check((w, h) == (int(sys.argv[2]), int(sys.argv[3])), "%s is %dx%d" % (sys.argv[1], w, h))
' "$@"
}

test_plot() {
    make_data
    bench_args
    cat >"$TMP/anchors.csv" <<'EOF'
# a comment, then a header
label,recall,qps
"Other, IVF",0.5,1000
"Other, IVF",0.9,300

Other HNSW,0.95,2000.5
EOF
    # Without gnuplot: a warning, the results anyway, the script for later.
    expect 0 env PATH=/nonexistent "${BENCH[@]}" --index Flat --anchors "$TMP/anchors.csv" \
        --out "$TMP/nogp"
    err_has "gnuplot"
    err_has "gnuplot-nox"
    [ -e "$TMP/nogp/plot.png" ] && fail "plot.png drawn without gnuplot"
    [ -s "$TMP/nogp/plot.gp" ] || fail "no plot.gp without gnuplot"
    py 'check(len(results(sys.argv[1])) == 1, "rows")' "$TMP/nogp"

    if ! command -v gnuplot >/dev/null; then
        skip "gnuplot is not installed (Debian package gnuplot-nox): plot.png is not checked"
        return
    fi
    expect 0 "${BENCH[@]}" --index Flat --sweep threads=1,2 --anchors "$TMP/anchors.csv" \
        --out "$TMP/gp"
    png_size "$TMP/gp/plot.png" 1000 700
    grep -qF "'Other, IVF'" "$TMP/gp/plot.gp" || fail "plot.gp lacks the anchor series"
    grep -qF "logit(\$1)" "$TMP/gp/plot.gp" || fail "plot.gp draws recall on no logit axis"
    grep -qF "'0.99' logit(0.99)" "$TMP/gp/plot.gp" || fail "plot.gp lacks the 0.99 tick"
    # The Pareto frontier of a series: of points (recall, qps), those no other
    # point beats on both.  Made-up points through the plot's own code.
    py '
import re
text = open(sys.argv[1]).read()
blocks = dict(re.findall(r"\$(\w+) << EOD\n(.*?)EOD\n", text, re.S))
pts = [tuple(map(float, l.split())) for l in blocks["P0"].splitlines()]
front = [tuple(map(float, l.split())) for l in blocks["F0"].splitlines()]
want = sorted(p for p in pts if not any(o != p and o[0] >= p[0] and o[1] >= p[1] for o in pts))
check(sorted(front) == want and front == sorted(front), "frontier %r of %r" % (front, pts))
' "$TMP/gp/plot.gp"
    ls "$TMP/gp" | grep -q tmp && fail "temporary files left in $TMP/gp: $(ls "$TMP/gp")"
    # The script redraws the same picture by itself.
    (cd "$TMP/gp" && rm plot.png && gnuplot plot.gp) || fail "gnuplot plot.gp failed"
    png_size "$TMP/gp/plot.png" 1000 700
}

# ---------------------------------------------------------------- gtcache
test_gtcache() {
    make_data
    make_truth
    bench_args
    expect 0 "${BENCH[@]}" --index Flat --out "$TMP/c"
    local gt="$TMP/c/gt-base-l2-k10.ivecs"
    [ -f "$gt" ] || { fail "no $gt after the first run: $(ls "$TMP/c")"; return; }
    # The computed ground truth is the oracle's (uniform data: no near-ties here).
    py '
got, want = read_vecs(sys.argv[1], "i"), read_vecs(sys.argv[2], "i")
check([r[:10] for r in want] == got, "cached ground truth differs from the oracle")
' "$gt" "$TMP/gt25.ivecs"
    touch -d "2001-01-01 00:00:00" "$gt"
    local before
    before=$(stat -c %Y "$gt")
    expect 0 "${BENCH[@]}" --index Flat --out "$TMP/c"
    [ "$(stat -c %Y "$gt")" = "$before" ] || fail "second run rewrote $gt"
    err_has "ground truth from"
    py 'check(float(results(sys.argv[1])[0]["recall_k_at_k"]) == 1.0, "recall")' "$TMP/c"

    # Another k, another file; one that no longer fits the queries is redone.
    expect 0 "${BENCH[@]}" --index Flat -k 3 --out "$TMP/c"
    [ -f "$TMP/c/gt-base-l2-k3.ivecs" ] || fail "no gt-base-l2-k3.ivecs: $(ls "$TMP/c")"
    [ "$(stat -c %Y "$gt")" = "$before" ] || fail "the k=3 run rewrote $gt"
    head -c 440 "$TMP/gt25.ivecs" >"$TMP/c/gt-base-l2-k10.ivecs"
    expect 0 "${BENCH[@]}" --index Flat --out "$TMP/c"
    err_has "computing it again"
    py '
got, want = read_vecs(sys.argv[1], "i"), read_vecs(sys.argv[2], "i")
check([r[:10] for r in want] == got, "recomputed ground truth differs from the oracle")
' "$gt" "$TMP/gt25.ivecs"
    # With --gt nothing is computed or cached.
    expect 0 "${BENCH[@]}" --index Flat --gt "$TMP/gt25.ivecs" --out "$TMP/c2"
    ls "$TMP/c2" | grep -q '^gt-' && fail "--gt given, yet a ground truth was cached"
}

# ---------------------------------------------------------------- ivf
test_ivf() {
    make_data
    run "$SIMIL" build --data "$TMP/base.fvecs" --index IVF8,Flat --device cpu --out "$TMP/ivf.idx"
    if [ "$RC" -ne 0 ]; then
        skip "simil build --index IVF8,Flat fails, so recall against nprobe is not checked: $(head -c 300 "$TMP/err")"
        return
    fi
    bench_args
    expect 0 "${BENCH[@]}" --index IVF8,Flat --index Flat --train "$TMP/train.fvecs" \
        --sweep nprobe=1,2,4,8 --out "$TMP/ivf"
    py '
rows = results(sys.argv[1])
ivf = [r for r in rows if r["index"] == "IVF8,Flat"]
check([r["params"] for r in ivf] == ["nprobe=%d" % n for n in (1, 2, 4, 8)], "rows %r" % rows)
check([r["index"] for r in rows if r not in ivf] == ["Flat"], "rows %r" % rows)
rec = [float(r["recall_k_at_k"]) for r in ivf]
check(all(a <= b + 1e-9 for a, b in zip(rec, rec[1:])), "recall falls as nprobe grows: %r" % rec)
check(rec[-1] >= 0.995, "nprobe 8 of 8 lists: recall %r" % rec)
check(len(set(r["build_seconds"] for r in ivf)) == 1, "one build per index")
' "$TMP/ivf"
}

# ---------------------------------------------------------------- params
# Any search parameter sweeps, in the order given (the last fastest), over
# the indexes that use it; --param holds one for every point.
test_params() {
    make_data
    bench_args
    expect 0 "${BENCH[@]}" --index XFBQ --index IVF8,PQ4,Refine --index Flat \
        --train "$TMP/train.fvecs" --param nprobe=8 --param threads=1 \
        --sweep extra_distance=0,1 --sweep refine_factor=1,16 --out "$TMP/p1"
    py '
rows = results(sys.argv[1])
by = {}
for r in rows: by.setdefault(r["index"], []).append(r)
check(list(by) == ["XFBQ4x3", "IVF8,PQ4x8,Refine", "Flat"], "indexes %r" % list(by))
x, rf, flat = by["XFBQ4x3"], by["IVF8,PQ4x8,Refine"], by["Flat"]
check([r["params"] for r in x] == ["threads=1,extra_distance=0", "threads=1,extra_distance=1"],
      "XFBQ rows %r" % x)
check([r["params"] for r in rf] == ["nprobe=8,threads=1,refine_factor=%d" % f for f in (1, 16)],
      "Refine rows %r" % rf)
check([r["params"] for r in flat] == ["threads=1"], "Flat rows %r" % flat)
e0, e1 = (float(r["recall_k_at_k"]) for r in x)
check(e1 >= 0.995 and e0 < e1, "XFBQ recall: extra_distance 0 %g, 1 %g" % (e0, e1))
f1, f16 = (float(r["recall_k_at_k"]) for r in rf)
check(f16 > f1 + 0.05, "Refine recall: refine_factor 1 %g, 16 %g" % (f1, f16))
' "$TMP/p1"

    # An enum and an int: every combination, lut varying slowest; on the CPU
    # neither changes the neighbours found beyond float rounding.
    expect 0 "${BENCH[@]}" --index IVF8,PQ4 --train "$TMP/train.fvecs" \
        --sweep lut=fp32,fp16 --sweep precomputed_tables=0,1 --out "$TMP/p2"
    py '
rows = results(sys.argv[1])
want = ["lut=%s,precomputed_tables=%d" % (l, p) for l in ("fp32", "fp16") for p in (0, 1)]
check([r["params"] for r in rows] == want, "rows %r" % [r["params"] for r in rows])
rec = [float(r["recall_k_at_k"]) for r in rows]
check(max(rec) - min(rec) <= 0.02, "recall moved with lut or precomputed_tables: %r" % rec)
' "$TMP/p2"

    local B=("${BENCH[@]}" --index Flat --out "$TMP/e")
    expect 2 "${B[@]}" --sweep lut=fp32,fp8;              err_has "auto, fp32 or fp16"
    expect 2 "${B[@]}" --sweep extra_distance=0.1,2;      err_has "extra_distance: 2 is out of range"
    expect 2 "${B[@]}" --param nprobe=2 --sweep nprobe=1,2; err_has "also set"
    expect 2 "${B[@]}" --param bogus=1;                   err_has "bogus"
    expect 2 "${B[@]}" --sweep bogus=1;                   err_has "precomputed_tables"
    [ -e "$TMP/e" ] && fail "a usage error created $TMP/e"
}

# ---------------------------------------------------------------- errors
test_errors() {
    make_data
    bench_args
    local B=("${BENCH[@]}" --out "$TMP/e")
    local D=("$SIMIL" bench --index Flat --out "$TMP/e")

    # Usage errors: exit 2, naming what was wrong.
    expect 2 "$SIMIL" bench;                                    err_has "simil bench: "
    expect 2 "${B[@]}";                                         err_has "--index"
    expect 2 "${BENCH[@]}" --index Flat;                        err_has "--out"
    expect 2 "${D[@]}" --data "$TMP/base.fvecs";                err_has "--queries"
    expect 2 "${D[@]}";                                         err_has "--dataset"
    expect 2 "${D[@]}" --data "$TMP/base.hdf5:train";          err_has "--queries"
    expect 2 "${D[@]}" --dataset bogus;                         err_has "bogus"
    expect 2 "${D[@]}" --dataset fashion-mnist --data "$TMP/base.fvecs"; err_has "--data"
    expect 2 "${D[@]}" --dataset uniform1M --queries "$TMP/q.fvecs";     err_has "--queries"
    expect 2 "${B[@]}" --index Flat --sweep bogus=1;            err_has "bogus"
    expect 2 "${B[@]}" --index Flat --sweep nprobe;             err_has "nprobe"
    expect 2 "${B[@]}" --index Flat --sweep nprobe=;            err_has "--sweep nprobe"
    expect 2 "${B[@]}" --index Flat --sweep nprobe=0;           err_has "--sweep nprobe"
    expect 2 "${B[@]}" --index Flat --sweep nprobe=1,x;         err_has "'x'"
    expect 2 "${B[@]}" --index Flat --sweep nprobe=1,,2;        err_has "--sweep nprobe"
    expect 2 "${B[@]}" --index Flat --sweep nprobe=1 --sweep nprobe=2; err_has "twice"
    expect 2 "${B[@]}" --index Flat -k 0;                       err_has "-k"
    expect 2 "${B[@]}" --index Flat --threads 0;                err_has "--threads"
    expect 2 "${B[@]}" --index Flat --mode fast;                err_has "--mode"
    expect 2 "${B[@]}" --index Flat --runs 0;                   err_has "--runs"
    expect 2 "${B[@]}" --index Flat --metric hamming;           err_has "hamming"
    expect 2 "${B[@]}" --index Flat --device tpu;               err_has "tpu"
    expect 2 "${B[@]}" --index "";                              err_has "--index"
    expect 2 "${B[@]}" --index Flat stray;                      err_has "stray"
    expect 2 "${B[@]}" --index Flat --bogus;                    err_has "--bogus"
    expect 2 "${BENCH[@]}" --index Flat --out "";               err_has "--out"
    [ -e "$TMP/e" ] && fail "a usage error created $TMP/e"

    # Runtime errors: exit 1, naming the file.
    expect 1 "${D[@]}" --data "$TMP/nope.fvecs" --queries "$TMP/q.fvecs";  err_has "nope.fvecs"
    expect 1 "${D[@]}" --data "$TMP/base.fvecs" --queries "$TMP/noq.fvecs"; err_has "noq.fvecs"
    expect 1 "${D[@]}" --data "$TMP/absent.hdf5";               err_has "absent.hdf5"
    expect 1 "${B[@]}" --index Flat --gt "$TMP/nogt.ivecs";     err_has "nogt.ivecs"
    expect 1 "${B[@]}" --index Flat --train "$TMP/notrain.fvecs"; err_has "notrain.fvecs"
    expect 1 "${B[@]}" --index Flat --anchors "$TMP/noanchors.csv"; err_has "noanchors.csv"
    printf 'label,recall,qps\nok,0.5,10\nbad,1.5,10\n' >"$TMP/bad.csv"
    expect 1 "${B[@]}" --index Flat --anchors "$TMP/bad.csv";   err_has "bad.csv:3"
    printf 'a,0.5\n' >"$TMP/bad2.csv"
    expect 1 "${B[@]}" --index Flat --anchors "$TMP/bad2.csv";  err_has "bad2.csv:1"
    expect 1 "${B[@]}" --index Flat --index NotAnIndex;         err_has "NotAnIndex"
    [ -e "$TMP/e/results.csv" ] && fail "a bad --index was found only after the sweep"
    expect 0 "$SIMIL" gen --kind uniform --n 5 --dim 7 --seed 2 --out "$TMP/q7.fvecs"
    expect 1 "${D[@]}" --data "$TMP/base.fvecs" --queries "$TMP/q7.fvecs"; err_has "dimension"
    expect 1 "${B[@]}" --index Flat --gt "$TMP/q.fvecs";         err_has "q.fvecs"
    : >"$TMP/afile"
    expect 1 "${BENCH[@]}" --index Flat --out "$TMP/afile/sub";  err_has "afile"

    # Asking for a GPU where there is none fails at once, with a hint.
    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index Flat --device cpu --out "$TMP/f.idx"
    expect 0 "$SIMIL" info "$TMP/f.idx"
    if [ "$(sed -n 's/^GPUs: //p' "$TMP/out")" = 0 ]; then
        expect 1 "$SIMIL" bench --data "$TMP/base.fvecs" --queries "$TMP/q.fvecs" --index Flat \
            --device gpu --out "$TMP/g"
        err_has "--device cpu"
        [ -e "$TMP/g/results.csv" ] && fail "--device gpu without a GPU wrote results"
    fi
}

case $GROUP in
    usage | sweep | plot | gtcache | ivf | params | errors) "test_$GROUP" ;;
    all) for g in usage sweep plot gtcache ivf params errors; do GROUP=$g; "test_$g"; done ;;
    *) echo "unknown group $GROUP" >&2; exit 2 ;;
esac
[ "$FAILS" -eq 0 ] || { echo "$FAILS check(s) failed in group $GROUP" >&2; exit 1; }
[ "$SKIPPED" -eq 0 ] || exit 77
echo "ok: $GROUP"
