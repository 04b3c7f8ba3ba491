#!/usr/bin/env bash
# tests/tools/test_cli.sh: end-to-end tests of the simil tool.
#
#   bash test_cli.sh PATH/TO/simil GROUP
#
# GROUP is one of usage, gen, flat, ivf, params, stream, ann, filter, errors (or
# all).  Results are checked against oracles written here in Python (the generators of
# docs/datasets.md, exact k-NN in float64), not against the tool's own output.  Every failure
# prints the command, its exit status and its stderr; the script exits 1 if
# anything failed, and 77 (CTest's "skipped") when a group needs an index
# type this library does not build.
set -u

SIMIL=$1
GROUP=${2:-all}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILS=0

fail() { echo "FAIL [$GROUP]: $*" >&2; FAILS=$((FAILS + 1)); }

# run CMD...: stdout to $TMP/out, stderr to $TMP/err, exit status in $RC.
run() { LAST="$*"; "$@" >"$TMP/out" 2>"$TMP/err"; RC=$?; }

# expect STATUS CMD...: run CMD and check its exit status.
expect() {
    local want=$1; shift
    run "$@"
    [ "$RC" -eq "$want" ] || fail "'$LAST' exited $RC, want $want; stderr: $(head -c 600 "$TMP/err")"
}

# The last command's stderr (or stdout) must contain the fixed string.
err_has() { grep -qF -- "$1" "$TMP/err" || fail "stderr of '$LAST' lacks '$1': $(head -c 600 "$TMP/err")"; }
out_has() { grep -qF -- "$1" "$TMP/out" || fail "stdout of '$LAST' lacks '$1': $(head -c 600 "$TMP/out")"; }

size_is() {
    local got
    got=$(stat -c %s "$1" 2>/dev/null || echo missing)
    [ "$got" = "$2" ] || fail "$1 has size $got, want $2 (after '$LAST')"
}

# py CODE ARGS...: run Python with the helpers below; a failed check exits 1.
py() {
    local code=$1; shift
    "${PYTHON:-python3}" -c "$PYLIB
$code" "$@" || fail "python check failed after '$LAST' (args: $*)"
}

PYLIB='
import json, math, struct, sys
M = (1 << 64) - 1

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

def read_npy(path):
    data = open(path, "rb").read()
    check(data[:6] == b"\x93NUMPY", path + ": no npy magic")
    major = data[6]
    hlen = struct.unpack_from("<H" if major == 1 else "<I", data, 8)[0]
    start = (10 if major == 1 else 12) + hlen
    header = eval(data[(10 if major == 1 else 12):start].decode("latin1"))
    check(start % 16 == 0, path + ": data not aligned")
    code = {"<f4": "f", "<i4": "i", "<i8": "q"}[header["descr"]]
    shape = header["shape"]
    rows, cols = shape[0], (shape[1] if len(shape) > 1 else 1)
    vals = struct.unpack_from("<%d%s" % (rows * cols, code), data, start)
    check(len(data) == start + rows * cols * struct.calcsize(code), path + ": size")
    return header["descr"], [list(vals[i * cols:(i + 1) * cols]) for i in range(rows)]

def write_npy(path, rows, descr, code):
    h = "{\x27descr\x27: \x27%s\x27, \x27fortran_order\x27: False, \x27shape\x27: (%d, %d), }" % (
        descr, len(rows), len(rows[0]))
    h += " " * (63 - (10 + len(h)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode("latin1"))
        for r in rows:
            f.write(struct.pack("<%d%s" % (len(r), code), *r))

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]

def sm64(x):
    x = (x + 0x9e3779b97f4a7c15) & M
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M
    return x ^ (x >> 31)

def u01(h):
    return f32((h >> 40) + 0.5) / 16777216.0

def uniform(first, n, d, seed):
    return [[u01(sm64((seed * 0x100000001b3 + i * d + j) & M)) for j in range(d)]
            for i in range(first, first + n)]

def gauss(s):
    u1, u2 = u01(sm64(s)), u01(sm64(s ^ 0x5555555555555555))
    return math.sqrt(-2 * math.log(u1)) * math.cos(f32(f32(6.2831853) * u2))

def mix(first, n, d, seed):
    out = []
    for i in range(first, first + n):
        c = sm64(seed ^ ((i * 0x632be59bd9b4e019) & M)) % 1024
        out.append([gauss((0xabcdef + c * d + j) & M)
                    + 0.5 * gauss((seed * 0x100000001b3 + i * d + j + 7) & M)
                    for j in range(d)])
    return out

def knn(base, queries, k, metric):
    """Exact k-NN in float64: per query a list of (distance, id), best first."""
    res = []
    for q in queries:
        if metric == "l2":
            s = sorted((sum((a - b) ** 2 for a, b in zip(q, x)), i) for i, x in enumerate(base))
        else:
            s = sorted((-sum(a * b for a, b in zip(q, x)), i) for i, x in enumerate(base))
            s = [(-dist, i) for dist, i in s]
        res.append(s[:k])
    return res
'

# Write uniform data through the tool: gen_uniform FILE N DIM SEED.
gen_uniform() {
    expect 0 "$SIMIL" gen --kind uniform --n "$2" --dim "$3" --seed "$4" --out "$1"
}

# ---------------------------------------------------------------- usage
test_usage() {
    expect 0 "$SIMIL" --help
    for c in gen build search gt info; do out_has "  $c "; done
    expect 0 "$SIMIL" --version
    grep -Eq '^simil [0-9]+\.[0-9]+\.[0-9]+' "$TMP/out" || fail "--version printed: $(cat "$TMP/out")"
    for c in gen build search gt info; do
        expect 0 "$SIMIL" "$c" --help
        out_has "usage: simil $c"
        expect 0 "$SIMIL" "$c" -h
        out_has "usage: simil $c"
    done
    expect 2 "$SIMIL"
    err_has "usage: simil"
}

# ---------------------------------------------------------------- gen
test_gen() {
    local rowb=$((4 + 4 * 17))
    gen_uniform "$TMP/u.fvecs" 300 17 5
    size_is "$TMP/u.fvecs" $((300 * rowb))
    py '
rows = read_vecs(sys.argv[1], "f")
want = uniform(0, 300, 17, 5)
check(len(rows) == 300, "rows %d" % len(rows))
for i, (r, w) in enumerate(zip(rows, want)):
    check(r == w, "uniform(300, 17, seed 5) row %d: got %s want %s" % (i, r[:3], w[:3]))
' "$TMP/u.fvecs"

    # Same seed, same bytes; another seed, other bytes; --first continues the set.
    gen_uniform "$TMP/u2.fvecs" 300 17 5
    cmp -s "$TMP/u.fvecs" "$TMP/u2.fvecs" || fail "gen is not deterministic"
    gen_uniform "$TMP/u3.fvecs" 300 17 6
    cmp -s "$TMP/u.fvecs" "$TMP/u3.fvecs" && fail "seeds 5 and 6 gave the same data"
    expect 0 "$SIMIL" gen --kind uniform --first 100 --n 200 --dim 17 --seed 5 --out "$TMP/tail.fvecs"
    size_is "$TMP/tail.fvecs" $((200 * rowb))
    tail -c +$((100 * rowb + 1)) "$TMP/u.fvecs" | cmp -s - "$TMP/tail.fvecs" ||
        fail "--first 100 --n 200 differs from rows 100..299"

    # mix: .fvecs and .npy hold the same floats, close to the float64 oracle.
    expect 0 "$SIMIL" gen --kind mix --n 64 --dim 9 --seed 11 --out "$TMP/m.fvecs"
    size_is "$TMP/m.fvecs" $((64 * (4 + 36)))
    expect 0 "$SIMIL" gen --kind=mix --n=64 --dim=9 --seed=11 --out="$TMP/m.npy"
    py '
a = read_vecs(sys.argv[1], "f")
descr, b = read_npy(sys.argv[2])
check(descr == "<f4", "npy dtype " + descr)
check(len(b) == 64 and len(b[0]) == 9, "npy shape %dx%d" % (len(b), len(b[0])))
check(a == b, ".fvecs and .npy differ")
want = mix(0, 64, 9, 11)
for i in range(64):
    for j in range(9):
        check(abs(a[i][j] - want[i][j]) <= 1e-4 * (1 + abs(want[i][j])),
              "mix(64, 9, seed 11)[%d][%d] = %r, want %r" % (i, j, a[i][j], want[i][j]))
' "$TMP/m.fvecs" "$TMP/m.npy"
}

# ---------------------------------------------------------------- flat
# oracle_check BASE QUERIES LABELS DISTANCES METRIC K: the results match the
# float64 oracle, allowing near-ties (1e-4 relative) to come in either order.
oracle_check() {
    py '
base, queries = read_vecs(sys.argv[1], "f"), read_vecs(sys.argv[2], "f")
labels, dists = read_vecs(sys.argv[3], "i"), read_vecs(sys.argv[4], "f")
metric, k = sys.argv[5], int(sys.argv[6])
check(len(labels) == len(queries) and len(dists) == len(queries), "result rows")
def close(a, b):
    return abs(a - b) <= 1e-4 * max(1.0, abs(b))
for q, want in enumerate(knn(base, queries, k, metric)):
    ctx = "%s query %d: ids %s, want %s" % (metric, q, labels[q], [i for _, i in want])
    check(len(labels[q]) == k and len(set(labels[q])) == k, ctx)
    for r, (got_id, got_d, (d, i)) in enumerate(zip(labels[q], dists[q], want)):
        check(close(got_d, d), ctx + "; rank %d distance %r, want %r" % (r, got_d, d))
        true_d = knn([base[got_id]], [queries[q]], 1, metric)[0][0][0]
        check(got_id == i or close(true_d, d), ctx + "; rank %d" % r)
' "$@"
}

test_flat() {
    gen_uniform "$TMP/base.fvecs" 2000 24 1
    gen_uniform "$TMP/q.fvecs" 50 24 2
    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index Flat --device cpu --out "$TMP/flat.idx"
    err_has "Flat"
    err_has "2000"
    grep -q $'\r' "$TMP/err" && fail "progress printed although stderr is not a terminal"
    if command -v script >/dev/null; then
        # On a terminal the add stage reports at least its end.
        run script -qec "'$SIMIL' build --data '$TMP/base.fvecs' --index Flat --out '$TMP/tty.idx'" \
            /dev/null
        out_has $'\radd 2000/2000 (100%)'
    fi

    expect 0 "$SIMIL" info "$TMP/flat.idx"
    out_has "description: Flat"
    out_has "metric: l2"
    out_has "dim: 24"
    out_has "size: 2000"
    out_has "trained: yes"
    out_has "file size: $(stat -c %s "$TMP/flat.idx") bytes"
    out_has "built with CUDA: "
    out_has "GPUs: "
    out_has "format: simil"
    out_has "loads: yes"
    grep -q "^nprobe:" "$TMP/out" && fail "a Flat index has no nprobe: $(cat "$TMP/out")"
    expect 0 "$SIMIL" info "$TMP/flat.idx" --json
    py '
r = json.load(sys.stdin)
want = {"format": "simil", "loads": True, "description": "Flat", "metric": "l2", "dim": 24,
        "size": 2000, "trained": True}
check(all(r.get(k) == v for k, v in want.items()), "info --json: %r" % r)
check(r["file_size"] > 0 and isinstance(r["gpus"], int) and "faiss" not in r, "info --json: %r" % r)
' <"$TMP/out"
    # A Faiss file of a type simil does not load is described, and exits 0.
    py '
head = b"IHNp" + struct.pack("<iqqq?i", 7, 3, 1 << 20, 1 << 20, True, 1)
open(sys.argv[1], "wb").write(head + bytes(40))
' "$TMP/hnswpq.faiss"
    expect 0 "$SIMIL" info "$TMP/hnswpq.faiss"
    out_has "format: faiss"
    out_has "faiss: IndexHNSWPQ: d=7, ntotal=3, metric l2"
    out_has "loads: no: "
    expect 0 "$SIMIL" info "$TMP/hnswpq.faiss" --json
    py '
r = json.load(sys.stdin)
check(r["format"] == "faiss" and r["loads"] is False and "IndexHNSWPQ" in r["why_not"], "%r" % r)
check("description" not in r, "%r" % r)
' <"$TMP/out"

    # Exact search, checked against the float64 oracle; the ids become ground truth.
    expect 0 "$SIMIL" search --index "$TMP/flat.idx" --queries "$TMP/q.fvecs" -k 10 \
        --device cpu --out "$TMP/gt.ivecs" --distances "$TMP/d.fvecs" --json
    size_is "$TMP/gt.ivecs" $((50 * (4 + 40)))
    size_is "$TMP/d.fvecs" $((50 * (4 + 40)))
    py '
r = json.load(sys.stdin)
for key in ("backend", "n_queries", "k", "seconds", "qps"):
    check(key in r, "json lacks " + key)
check(r["n_queries"] == 50 and r["k"] == 10, "json %r" % r)
check(r["seconds"] > 0 and r["qps"] > 0, "json %r" % r)
check(not any("recall" in key for key in r), "recall without --gt: %r" % r)
' <"$TMP/out"
    oracle_check "$TMP/base.fvecs" "$TMP/q.fvecs" "$TMP/gt.ivecs" "$TMP/d.fvecs" l2 10

    expect 0 "$SIMIL" search --index "$TMP/flat.idx" --queries "$TMP/q.fvecs" -k10 \
        --gt "$TMP/gt.ivecs" --json --repeat 3 --threads 1
    py '
r = json.load(sys.stdin)
check(r["one_recall_at_1"] == 1.0 and r["one_recall_at_k"] == 1.0 and r["recall_k_at_k"] == 1.0,
      "Flat against its own ids: %r" % r)
check(r["recall_by"] == "id", "no distances, yet recall by %r" % r["recall_by"])
' <"$TMP/out"
    expect 0 "$SIMIL" search --index "$TMP/flat.idx" --queries "$TMP/q.fvecs" --k=10 --gt "$TMP/gt.ivecs"
    out_has "backend: "
    out_has "queries: 50  k: 10"
    out_has "QPS: "
    out_has "1-recall@1: 1.0000  1-recall@10: 1.0000  recall 10@10: 1.0000  (by id)"

    # Known recall: even queries keep true ranks 0-4 and get ranks 15-19,
    # odd queries get ranks 15-24 only: 1-recall@1 = 1-recall@10 = 0.5,
    # recall 10@10 = 0.25.  Counted by distance (--data, as ann-benchmarks),
    # a result counts when it is no farther than the neighbour it stands for:
    # exact results beat this made-up truth everywhere, so all three are 1.
    py '
base, queries = read_vecs(sys.argv[1], "f"), read_vecs(sys.argv[2], "f")
ranks = [[i for _, i in r] for r in knn(base, queries, 25, "l2")]
rows = [r[:5] + r[15:20] if q % 2 == 0 else r[15:25] for q, r in enumerate(ranks)]
write_npy(sys.argv[3], rows, "<i8", "q")
' "$TMP/base.fvecs" "$TMP/q.fvecs" "$TMP/fake_gt.npy"
    expect 0 "$SIMIL" search --index "$TMP/flat.idx" --queries "$TMP/q.fvecs" -k 10 \
        --gt "$TMP/fake_gt.npy" --json
    py '
r = json.load(sys.stdin)
check(abs(r["one_recall_at_1"] - 0.5) < 1e-9 and abs(r["one_recall_at_k"] - 0.5) < 1e-9
      and abs(r["recall_k_at_k"] - 0.25) < 1e-9, "want 0.5, 0.5, 0.25: %r" % r)
' <"$TMP/out"
    expect 0 "$SIMIL" search --index "$TMP/flat.idx" --queries "$TMP/q.fvecs" -k 10 \
        --gt "$TMP/fake_gt.npy" --data "$TMP/base.fvecs" --json
    py '
r = json.load(sys.stdin)
check(r["recall_by"] == "distance", "--data given, yet recall by %r" % r["recall_by"])
check(r["one_recall_at_1"] == 1.0 and r["one_recall_at_k"] == 1.0 and r["recall_k_at_k"] == 1.0,
      "by distance, want 1, 1, 1: %r" % r)
' <"$TMP/out"

    # Ground truth that does not fit: fewer columns than k, other row count.
    expect 0 "$SIMIL" search --index "$TMP/flat.idx" --queries "$TMP/q.fvecs" -k 5 --out "$TMP/gt5.ivecs"
    expect 1 "$SIMIL" search --index "$TMP/flat.idx" --queries "$TMP/q.fvecs" -k 10 --gt "$TMP/gt5.ivecs"
    err_has "gt5.ivecs"
    gen_uniform "$TMP/q7.fvecs" 7 24 3
    expect 1 "$SIMIL" search --index "$TMP/flat.idx" --queries "$TMP/q7.fvecs" -k 5 --gt "$TMP/gt5.ivecs"
    err_has "gt5.ivecs"

    # Every base vector finds itself first; ids as int64 .npy.
    expect 0 "$SIMIL" search --index "$TMP/flat.idx" --queries "$TMP/base.fvecs" -k 1 \
        --out "$TMP/self.npy" --distances "$TMP/self_d.npy"
    py '
descr, ids = read_npy(sys.argv[1])
check(descr == "<i8", "ids dtype " + descr)
check(ids == [[i] for i in range(2000)], "self search ids wrong")
descr, d = read_npy(sys.argv[2])
check(descr == "<f4" and all(abs(r[0]) < 1e-5 for r in d), "self distances not 0")
' "$TMP/self.npy" "$TMP/self_d.npy"

    # Inner product, and a dimension that matches no SIMD width.
    gen_uniform "$TMP/base7.fvecs" 500 7 4
    expect 0 "$SIMIL" build --data "$TMP/base7.fvecs" --index Flat --metric ip --out "$TMP/ip.idx"
    expect 0 "$SIMIL" info "$TMP/ip.idx"
    out_has "metric: ip"
    gen_uniform "$TMP/q7d.fvecs" 9 7 3
    expect 0 "$SIMIL" search --index "$TMP/ip.idx" --queries "$TMP/q7d.fvecs" -k 4 \
        --out "$TMP/ip.ivecs" --distances "$TMP/ip_d.fvecs"
    oracle_check "$TMP/base7.fvecs" "$TMP/q7d.fvecs" "$TMP/ip.ivecs" "$TMP/ip_d.fvecs" ip 4
}

# ---------------------------------------------------------------- filter
# --allow (ids in any order, .ivecs and .npy) and --radius, against float64
# k-NN and range oracles over the allowed vectors.
test_filter() {
    gen_uniform "$TMP/fb.fvecs" 600 8 11
    gen_uniform "$TMP/fq.fvecs" 6 8 12
    expect 0 "$SIMIL" build --data "$TMP/fb.fvecs" --index Flat --out "$TMP/f.idx"
    py '
ids = [i for i in range(600) if i % 3 == 1][::-1]
write_vecs(sys.argv[1], [ids[:100], ids[100:]], "i")
write_npy(sys.argv[2], [[i] for i in ids], "<i8", "q")
' "$TMP/allow.ivecs" "$TMP/allow.npy"
    for allow in allow.ivecs allow.npy; do
        expect 0 "$SIMIL" search --index "$TMP/f.idx" --queries "$TMP/fq.fvecs" -k 7 \
            --allow "$TMP/$allow" --out "$TMP/fk.ivecs"
        py '
base, queries = read_vecs(sys.argv[1], "f"), read_vecs(sys.argv[2], "f")
allowed = [x if i % 3 == 1 else [1e9] * 8 for i, x in enumerate(base)]
want = [[i for _, i in r] for r in knn(allowed, queries, 7, "l2")]
check(read_vecs(sys.argv[3], "i") == want, "--allow: top 7 among the allowed")
' "$TMP/fb.fvecs" "$TMP/fq.fvecs" "$TMP/fk.ivecs"
    done
    # a radius halfway between the 40th and 41st neighbour of query 0
    py '
base, queries = read_vecs(sys.argv[1], "f"), read_vecs(sys.argv[2], "f")
r = knn(base, queries, 41, "l2")[0]
print((r[39][0] + r[40][0]) / 2)
' "$TMP/fb.fvecs" "$TMP/fq.fvecs" >"$TMP/radius"
    expect 0 "$SIMIL" search --index "$TMP/f.idx" --queries "$TMP/fq.fvecs" \
        --radius "$(cat "$TMP/radius")" --out "$TMP/pairs.npy" --distances "$TMP/pd.npy" --json
    py '
r = json.load(sys.stdin)
check(r["n_queries"] == 6 and r["results"] > 40, "range json %r" % r)
' <"$TMP/out"
    py '
base, queries = read_vecs(sys.argv[1], "f"), read_vecs(sys.argv[2], "f")
radius = float(open(sys.argv[3]).read())
want = sorted((q, i) for q, x in enumerate(queries) for i, y in enumerate(base)
              if sum((a - b) ** 2 for a, b in zip(x, y)) < radius)
_, pairs = read_npy(sys.argv[4])
check(sorted(tuple(p) for p in pairs) == want, "--radius: the pairs within the radius")
_, d = read_npy(sys.argv[5])
check(len(d) == len(pairs) and all(v[0] < radius for v in d), "--radius distances")
' "$TMP/fb.fvecs" "$TMP/fq.fvecs" "$TMP/radius" "$TMP/pairs.npy" "$TMP/pd.npy"
    expect 0 "$SIMIL" search --index "$TMP/f.idx" --queries "$TMP/fq.fvecs" --radius 0.5 \
        --allow "$TMP/allow.npy"
    out_has "results: "
    expect 1 "$SIMIL" search --index "$TMP/f.idx" --queries "$TMP/fq.fvecs" --radius -1
    err_has "negative"
    expect 2 "$SIMIL" search --index "$TMP/f.idx" --queries "$TMP/fq.fvecs" --radius nan
    err_has "not a finite number"
    expect 2 "$SIMIL" search --index "$TMP/f.idx" --queries "$TMP/fq.fvecs" -k 3 --radius 1
    err_has "not both"
    expect 2 "$SIMIL" search --index "$TMP/f.idx" --queries "$TMP/fq.fvecs"
    err_has "-k K or --radius R"
    py 'write_vecs(sys.argv[1], [[3, -2]], "i")' "$TMP/neg.ivecs"
    expect 1 "$SIMIL" search --index "$TMP/f.idx" --queries "$TMP/fq.fvecs" -k 3 \
        --allow "$TMP/neg.ivecs"
    err_has "negative"
}

# ---------------------------------------------------------------- ivf
test_ivf() {
    gen_uniform "$TMP/base.fvecs" 3000 16 1
    gen_uniform "$TMP/train.fvecs" 1000 16 9
    gen_uniform "$TMP/q.fvecs" 40 16 2
    py '
base, queries = read_vecs(sys.argv[1], "f"), read_vecs(sys.argv[2], "f")
write_vecs(sys.argv[3], [[i for _, i in r] for r in knn(base, queries, 10, "l2")], "i")
' "$TMP/base.fvecs" "$TMP/q.fvecs" "$TMP/gt.ivecs"

    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index IVF8,Flat --train "$TMP/train.fvecs" \
        --max-train 800 --device cpu --out "$TMP/ivf.idx"
    err_has "IVF8,Flat"
    expect 0 "$SIMIL" info "$TMP/ivf.idx"
    out_has "description: IVF8,Flat"
    out_has "size: 3000"
    out_has "trained: yes"
    # Visiting all 8 lists is exact search (up to float32 near-ties at rank 10).
    expect 0 "$SIMIL" search --index "$TMP/ivf.idx" --queries "$TMP/q.fvecs" -k 10 --nprobe 8 \
        --gt "$TMP/gt.ivecs" --json
    py '
r = json.load(sys.stdin)
check(r.get("params") == {"nprobe": 8}, "json params: %r" % r)
check(r["one_recall_at_1"] == 1.0 and r["recall_k_at_k"] >= 0.995, "IVF8,Flat nprobe 8: %r" % r)
' <"$TMP/out"

    # Trained on the data itself, capped.
    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index IVF8,Flat --max-train 500 --out "$TMP/ivf2.idx"
    expect 0 "$SIMIL" search --index "$TMP/ivf2.idx" --queries "$TMP/q.fvecs" -k 10 --nprobe 8 \
        --gt "$TMP/gt.ivecs" --json
    py '
r = json.load(sys.stdin)
check(r["recall_k_at_k"] >= 0.995, "IVF8,Flat trained on data, nprobe 8: %r" % r)
' <"$TMP/out"

    # Written as a Faiss file, it loads back (simil reads Faiss files) as exact at nprobe 8.
    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index IVF8,Flat --format faiss \
        --device cpu --out "$TMP/ivf.faiss"
    expect 0 "$SIMIL" info "$TMP/ivf.faiss"
    out_has "description: IVF8,Flat"
    out_has "format: faiss"
    out_has "faiss: IndexIVFFlat (nlist 8, nprobe 1): d=16, ntotal=3000, metric l2"
    out_has "nprobe: 1"
    expect 0 "$SIMIL" search --index "$TMP/ivf.faiss" --queries "$TMP/q.fvecs" -k 10 --nprobe 8 \
        --gt "$TMP/gt.ivecs" --json
    py '
r = json.load(sys.stdin)
check(r["recall_k_at_k"] >= 0.995, "IVF8,Flat from a Faiss file, nprobe 8: %r" % r)
' <"$TMP/out"
    expect 2 "$SIMIL" build --data "$TMP/base.fvecs" --index Flat --format hnsw --out "$TMP/x.idx"
    err_has "--format"
    expect 1 "$SIMIL" build --data "$TMP/base.fvecs" --index XFBQ --format faiss --out "$TMP/x.faiss"
    err_has "no Faiss counterpart"
    [ -e "$TMP/x.faiss" ] && fail "a refused Faiss export left $TMP/x.faiss"
    # Refused before training: the training file is never opened.
    expect 1 "$SIMIL" build --data "$TMP/base.fvecs" --index IVF8,PQ4,Refine --format faiss \
        --train "$TMP/absent-train.fvecs" --out "$TMP/x.faiss"
    err_has "IndexRefineFlat"
    grep -q "absent-train" "$TMP/err" && fail "trained before refusing: $(cat "$TMP/err")"
    # OPQ and PQ codes of fewer than 8 bits have Faiss counterparts.
    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index OPQ4,IVF8,PQ4x4 --format faiss \
        --device cpu --out "$TMP/opq.faiss"
    expect 0 "$SIMIL" info "$TMP/opq.faiss"
    out_has "description: OPQ4_"
    out_has ",IVF8,PQ4x4"

    # --progress reports each stage's end to a stderr that is not a terminal;
    # without it, such a stderr gets only the summary.
    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index OPQ4,IVF8,PQ4 --device cpu \
        --progress --out "$TMP/pq.idx"
    err_has "train OPQ 80/80 (100%)"
    err_has "kmeans 10/10 (100%)"
    err_has "train PQ 4/4 (100%)"
    err_has "add 3000/3000 (100%)"
    err_has "n=3000 dim=16"
    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index IVF8,PQ4 --device cpu --out "$TMP/pq.idx"
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "build without --progress wrote more than its summary: $(head -c 600 "$TMP/err")"

    # Training vectors of another dimension are refused.
    gen_uniform "$TMP/train5.fvecs" 100 5 9
    expect 1 "$SIMIL" build --data "$TMP/base.fvecs" --index IVF8,Flat --train "$TMP/train5.fvecs" \
        --out "$TMP/bad.idx"
    err_has "train5.fvecs"
}

# ---------------------------------------------------------------- params
# Search parameters: --param and its shorthands, their errors, the help made
# from the library's table, and that each setting changes what it should.
test_params() {
    "$SIMIL" gen --kind mix --n 3000 --dim 16 --seed 1 --out "$TMP/base.fvecs" >/dev/null
    "$SIMIL" gen --kind mix --n 50 --dim 16 --seed 2 --out "$TMP/q.fvecs" >/dev/null
    py '
base, queries = read_vecs(sys.argv[1], "f"), read_vecs(sys.argv[2], "f")
write_vecs(sys.argv[3], [[i for _, i in r] for r in knn(base, queries, 10, "l2")], "i")
' "$TMP/base.fvecs" "$TMP/q.fvecs" "$TMP/gt.ivecs"
    local names="nprobe threads refine_factor extra_distance lut precomputed_tables"

    # The help lists every setting, with its range and default; so does the
    # error for an unknown name: both come from the library's table.
    expect 0 "$SIMIL" search --help
    for n in $names; do out_has "  $n "; done
    out_has "1 to 1073741824; default 1; for IVF"
    out_has "One of auto, fp32 or fp16;"
    expect 0 "$SIMIL" bench --help
    for n in $names; do out_has "  $n "; done
    expect 0 "$SIMIL" knn-graph --help
    out_has "  extra_distance "

    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index IVF16,Flat --device cpu --out "$TMP/ivf.idx"
    local S=("$SIMIL" search --index "$TMP/ivf.idx" --queries "$TMP/q.fvecs" -k 10 --device cpu)
    expect 2 "${S[@]}" --param nprob=3;              err_has "unknown search parameter 'nprob'"
    for n in $names; do err_has "$n"; done
    expect 2 "${S[@]}" --param nprobe=0;             err_has "nprobe: 0 is out of range"; err_has "1 to 1073741824"
    expect 2 "${S[@]}" --param nprobe=1.5;           err_has "'1.5' is not an integer"
    expect 2 "${S[@]}" --param extra_distance=2;     err_has "extra_distance: 2 is out of range"
    expect 2 "${S[@]}" --param lut=fp8;              err_has "auto, fp32 or fp16"
    expect 2 "${S[@]}" --param nprobe;               err_has "NAME=VALUE"
    expect 2 "${S[@]}" --param nprobe=2,;            err_has "--param"
    expect 2 "${S[@]}" --nprobe 4 --param nprobe=8;  err_has "nprobe is given twice"
    expect 2 "${S[@]}" --param threads=1,threads=2;  err_has "threads is given twice"
    expect 2 "${S[@]}" --nprobe 0;                   err_has "--nprobe"
    expect 2 "${S[@]}" --threads 5000;               err_has "0 to 4096"

    # Several settings, in one --param or several; the JSON lists them.
    expect 0 "${S[@]}" --param nprobe=16,threads=1 --param extra_distance=0.5 --json --gt "$TMP/gt.ivecs"
    err_has "IVF16,Flat does not use search parameter extra_distance"
    py '
r = json.load(sys.stdin)
check(r["params"] == {"nprobe": 16, "threads": 1, "extra_distance": 0.5}, "params %r" % r)
check(r["recall_k_at_k"] >= 0.995, "IVF16,Flat at nprobe 16 of 16: %r" % r)
' <"$TMP/out"
    expect 0 "${S[@]}" --nprobe 2 --threads 1
    out_has "nprobe: 2  threads: 1"
    [ -s "$TMP/err" ] && fail "settings the index uses gave a warning: $(cat "$TMP/err")"

    # refine_factor: re-ranking more candidates of IVF-PQ finds more of the
    # true neighbours.
    recall_of() { # INDEX_FILE PARAM...: the recall@10 into $TMP/recall
        local idx=$1; shift
        expect 0 "$SIMIL" search --index "$idx" --queries "$TMP/q.fvecs" -k 10 --device cpu \
            --gt "$TMP/gt.ivecs" --json "$@"
        "${PYTHON:-python3}" -c 'import json, sys; print(json.load(sys.stdin)["recall_k_at_k"])' \
            <"$TMP/out" >"$TMP/recall"
    }
    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index IVF16,PQ4,Refine --device cpu --out "$TMP/rf.idx"
    recall_of "$TMP/rf.idx" --param nprobe=16,refine_factor=1;  local r1; r1=$(cat "$TMP/recall")
    recall_of "$TMP/rf.idx" --param nprobe=16,refine_factor=32; local r32; r32=$(cat "$TMP/recall")
    py 'r1, r32 = float(sys.argv[1]), float(sys.argv[2])
check(r32 >= 0.99 and r32 > r1 + 0.1, "IVF16,PQ4,Refine recall@10: refine_factor 1 %g, 32 %g" % (r1, r32))
' "$r1" "$r32"

    # extra_distance: a wider XFBQ window re-ranks more candidates; all of
    # them (1) is exact search.
    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index XFBQ --device cpu --out "$TMP/x.idx"
    recall_of "$TMP/x.idx" --param extra_distance=0; local e0; e0=$(cat "$TMP/recall")
    recall_of "$TMP/x.idx" --param extra_distance=1; local e1; e1=$(cat "$TMP/recall")
    py 'e0, e1 = float(sys.argv[1]), float(sys.argv[2])
check(e1 >= 0.995 and e0 < e1 - 0.05, "XFBQ recall@10: extra_distance 0 %g, 1 %g" % (e0, e1))
' "$e0" "$e1"

    # precomputed_tables and lut: the same neighbours either way (lut only
    # matters on a GPU; the CPU ignores it).
    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index IVF16,PQ4 --device cpu --out "$TMP/pq.idx"
    local P=("$SIMIL" search --index "$TMP/pq.idx" --queries "$TMP/q.fvecs" -k 10 --device cpu --nprobe 4)
    expect 0 "${P[@]}" --param precomputed_tables=1 --out "$TMP/i1.npy" --distances "$TMP/d1.npy"
    expect 0 "${P[@]}" --param precomputed_tables=0 --out "$TMP/i0.npy" --distances "$TMP/d0.npy"
    expect 0 "${P[@]}" --param lut=fp16 --out "$TMP/i16.npy" --distances "$TMP/d16.npy"
    py '
(_, i1), (_, d1) = read_npy(sys.argv[1]), read_npy(sys.argv[2])
(_, i0), (_, d0) = read_npy(sys.argv[3]), read_npy(sys.argv[4])
(_, i16), (_, d16) = read_npy(sys.argv[5]), read_npy(sys.argv[6])
check(i16 == i1 and d16 == d1, "lut=fp16 changed the CPU results")
for q in range(len(i1)):
    for j in range(10):
        a, b = d1[q][j], d0[q][j]
        check(abs(a - b) <= 1e-4 * max(abs(a), 1e-3), "query %d rank %d: %g and %g" % (q, j, a, b))
        near = [x for x in range(10) if abs(d1[q][x] - a) <= 1e-4 * max(abs(a), 1e-3)]
        check(i0[q][j] in [i1[q][x] for x in near], "query %d rank %d: id %d and %d" % (q, j, i1[q][j], i0[q][j]))
' "$TMP/i1.npy" "$TMP/d1.npy" "$TMP/i0.npy" "$TMP/d0.npy" "$TMP/i16.npy" "$TMP/d16.npy"

    # Flat uses none of nprobe and lut: a warning each, and the search runs.
    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index Flat --device cpu --out "$TMP/flat.idx"
    expect 0 "$SIMIL" search --index "$TMP/flat.idx" --queries "$TMP/q.fvecs" -k 10 --nprobe 8 \
        --param lut=fp16 --param threads=1 --gt "$TMP/gt.ivecs" --json
    err_has "Flat does not use search parameter nprobe (it is for IVF indexes); it is ignored"
    err_has "Flat does not use search parameter lut"
    grep -q "parameter threads" "$TMP/err" && fail "threads warned for Flat"
    py 'r = json.load(sys.stdin); check(r["recall_k_at_k"] >= 0.995, "Flat: %r" % r)' <"$TMP/out"
}

# ---------------------------------------------------------------- ann
# ann-benchmarks HDF5 files, written by make_ann_hdf5 ($SIMIL_MAKE_ANN): the
# metric their "distance" attribute declares, FILE.hdf5 standing for its
# datasets, and recall counted by distance where ties make ids ambiguous.
test_ann() {
    if [ -z "${SIMIL_MAKE_ANN:-}" ]; then
        echo "SKIP [ann]: simil was built without HDF5"
        exit 77
    fi
    # Angular data: norms from 0.1 to 10, so that l2 and cosine neighbours differ.
    py '
import random
rnd = random.Random(5)
def vec(): 
    v = [rnd.gauss(0, 1) for _ in range(8)]
    s = rnd.choice([0.1, 1.0, 10.0]) / math.sqrt(sum(x * x for x in v))
    return [x * s for x in v]
base, queries = [vec() for _ in range(400)], [vec() for _ in range(20)]
def cos_dist(q, x):
    return 1 - sum(a * b for a, b in zip(q, x)) / math.sqrt(sum(a * a for a in q) * sum(b * b for b in x))
truth = [sorted((cos_dist(q, x), i) for i, x in enumerate(base))[:10] for q in queries]
write_vecs(sys.argv[1], base, "f")
write_vecs(sys.argv[2], queries, "f")
write_vecs(sys.argv[3], [[i for _, i in t] for t in truth], "i")
write_vecs(sys.argv[4], [[d for d, _ in t] for t in truth], "f")
' "$TMP/ab.fvecs" "$TMP/aq.fvecs" "$TMP/an.ivecs" "$TMP/ad.fvecs"
    expect 0 "$SIMIL_MAKE_ANN" "$TMP/ang.hdf5" angular train="$TMP/ab.fvecs" test="$TMP/aq.fvecs" \
        neighbors="$TMP/an.ivecs" distances="$TMP/ad.fvecs"

    # The file alone is its train set; no --metric: the file's, cosine.
    expect 0 "$SIMIL" build --data "$TMP/ang.hdf5" --index Flat --device cpu --out "$TMP/ang.idx"
    grep -q warning "$TMP/err" && fail "a warning without --metric: $(cat "$TMP/err")"
    expect 0 "$SIMIL" info "$TMP/ang.idx"
    out_has "metric: cosine"
    out_has "size: 400"
    expect 0 "$SIMIL" search --index "$TMP/ang.idx" --queries "$TMP/ang.hdf5" --gt "$TMP/ang.hdf5" \
        -k 10 --json
    py '
r = json.load(sys.stdin)
check(r["recall_by"] == "distance", "recall by %r" % r)
check(r["one_recall_at_1"] == 1 and r["one_recall_at_k"] == 1 and r["recall_k_at_k"] == 1,
      "exact cosine search of an angular file: %r" % r)
' <"$TMP/out"
    # The same through bench, which used to search angular files with l2.
    expect 0 "$SIMIL" bench --data "$TMP/ang.hdf5" --index Flat --device cpu --out "$TMP/angb"
    out_has "metric cosine"
    py '
import csv
r = list(csv.DictReader(open(sys.argv[1] + "/results.csv")))[0]
check(float(r["recall_k_at_k"]) == 1 and r["recall_by"] == "distance", "bench: %r" % r)
' "$TMP/angb"

    # An explicit --metric that contradicts the file: a warning, and its choice.
    expect 0 "$SIMIL" build --data "$TMP/ang.hdf5:train" --index Flat --metric l2 --device cpu \
        --out "$TMP/l2.idx"
    err_has "warning: --metric l2 contradicts"
    err_has "cosine"
    expect 0 "$SIMIL" search --index "$TMP/l2.idx" --queries "$TMP/ang.hdf5" --gt "$TMP/ang.hdf5" \
        -k 10 --json
    err_has "warning: the index measures l2"
    py '
r = json.load(sys.stdin)
check(r["recall_by"] == "id", "the file holds cosine distances; l2 recall by %r" % r)
check(r["recall_k_at_k"] < 0.9, "l2 neighbours of angular data: %r" % r)
' <"$TMP/out"
    expect 0 "$SIMIL" bench --data "$TMP/ang.hdf5" --metric l2 --index Flat --device cpu \
        --out "$TMP/angl2"
    err_has "warning: --metric l2 contradicts"
    out_has "metric l2"
    "$SIMIL_MAKE_ANN" "$TMP/ham.hdf5" hamming train="$TMP/ab.fvecs" >/dev/null
    expect 1 "$SIMIL" build --data "$TMP/ham.hdf5" --index Flat --out "$TMP/ham.idx"
    err_has "hamming"

    # Ties: every vector three times (ids i, i + 200, i + 400), the truth
    # naming the last copies first.  Exact search returns the first copies
    # first, so by id 1-recall@1 is about 0 (float32 distances of two copies
    # may differ in the last bit) and recall 10@10 about 0.9 (the 10th slot
    # holds one copy of the 4th nearest vector); by distance, as
    # ann-benchmarks counts, all three are 1.
    py '
rows = read_vecs(sys.argv[1], "f")[:200]
queries = read_vecs(sys.argv[2], "f")
base = rows + rows + rows
truth = [sorted((math.sqrt(sum((a - b) ** 2 for a, b in zip(q, x))), -i) for i, x in enumerate(base))[:10]
         for q in queries]
write_vecs(sys.argv[3], base, "f")
write_vecs(sys.argv[4], [[-i for _, i in t] for t in truth], "i")
write_vecs(sys.argv[5], [[d for d, _ in t] for t in truth], "f")
' "$TMP/ab.fvecs" "$TMP/aq.fvecs" "$TMP/db.fvecs" "$TMP/dn.ivecs" "$TMP/dd.fvecs"
    expect 0 "$SIMIL_MAKE_ANN" "$TMP/dup.hdf5" euclidean train="$TMP/db.fvecs" \
        test="$TMP/aq.fvecs" neighbors="$TMP/dn.ivecs" distances="$TMP/dd.fvecs"
    expect 0 "$SIMIL" build --data "$TMP/dup.hdf5" --index Flat --device cpu --out "$TMP/dup.idx"
    expect 0 "$SIMIL" search --index "$TMP/dup.idx" --queries "$TMP/dup.hdf5" \
        --gt "$TMP/dup.hdf5:neighbors" -k 10 --json
    py '
r = json.load(sys.stdin)
check(r["recall_by"] == "distance" and r["recall_k_at_k"] == 1 and r["one_recall_at_1"] == 1,
      "exact search of duplicates, by distance: %r" % r)
' <"$TMP/out"
    expect 0 "$SIMIL" search --index "$TMP/dup.idx" --queries "$TMP/aq.fvecs" --gt "$TMP/dn.ivecs" \
        -k 10 --json
    py '
r = json.load(sys.stdin)
check(r["recall_by"] == "id" and r["recall_k_at_k"] < 0.95 and r["one_recall_at_1"] <= 0.1,
      "exact search of duplicates, by id: %r" % r)
' <"$TMP/out"
    expect 0 "$SIMIL" bench --data "$TMP/dup.hdf5" --index Flat --device cpu --out "$TMP/dupb"
    py '
import csv
r = list(csv.DictReader(open(sys.argv[1] + "/results.csv")))[0]
check(float(r["one_recall_at_1"]) == 1 and float(r["recall_k_at_k"]) == 1, "bench: %r" % r)
' "$TMP/dupb"
}

# ---------------------------------------------------------------- stream
# simil gt (exact search of data read in chunks) and simil build from a
# generator or a file, chunk by chunk.
test_stream() {
    gen_uniform "$TMP/base.fvecs" 2000 24 1
    gen_uniform "$TMP/q.fvecs" 30 24 2
    expect 0 "$SIMIL" gt --data "$TMP/base.fvecs" --queries "$TMP/q.fvecs" -k 5 --chunk 300 \
        --device cpu --out "$TMP/gt.ivecs" --distances "$TMP/gt.fvecs"
    out_has "chunks: 7"
    out_has "rate: "
    oracle_check "$TMP/base.fvecs" "$TMP/q.fvecs" "$TMP/gt.ivecs" "$TMP/gt.fvecs" l2 5
    # The generator gives the file's rows: the same neighbours, byte for byte
    # (in the same chunks: BLAS may round a product of another shape apart).
    expect 0 "$SIMIL" gt --data gen:uniform:2000:24:1 --queries gen:uniform:30:24:2 -k 5 \
        --device cpu --chunk 300 --metric l2 --out "$TMP/gt2.ivecs" --distances "$TMP/gt2.fvecs" \
        --json
    cmp -s "$TMP/gt.ivecs" "$TMP/gt2.ivecs" || fail "gt of gen:uniform differs from gt of its file"
    cmp -s "$TMP/gt.fvecs" "$TMP/gt2.fvecs" || fail "gt distances of gen:uniform differ"
    py '
r = json.loads(open(sys.argv[1]).read())
for key in ("rows", "dim", "n_queries", "k", "seconds", "gb_per_second", "chunks"):
    check(key in r, "gt --json lacks " + key)
check(r["rows"] == 2000 and r["dim"] == 24 and r["chunks"] == 7, "gt --json: %r" % r)
' "$TMP/out"
    expect 0 "$SIMIL" gt --data "$TMP/base.fvecs" --queries "$TMP/q.fvecs" -k 5 --metric ip \
        --device cpu --chunk 999 --out "$TMP/gtip.npy" --distances "$TMP/gtip.npy.f.npy"
    py '
_, ids = read_npy(sys.argv[1])
base, queries = read_vecs(sys.argv[2], "f"), read_vecs(sys.argv[3], "f")
for q, want in enumerate(knn(base, queries, 5, "ip")):
    check(ids[q][0] == want[0][1], "ip query %d: %s, want %s" % (q, ids[q], want))
' "$TMP/gtip.npy" "$TMP/base.fvecs" "$TMP/q.fvecs"

    # A Flat index built from the generator in chunks is the file's index.
    expect 0 "$SIMIL" build --data gen:uniform:2000:24:1 --index Flat --chunk 333 --device cpu \
        --out "$TMP/gen.idx"
    err_has "n=2000 dim=24"
    err_has "peak host memory"
    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index Flat --device cpu --out "$TMP/file.idx"
    cmp -s "$TMP/gen.idx" "$TMP/file.idx" || fail "Flat from gen: and from its file differ"
    # IVF-PQ from a generator, trained on a sample: recall against gt
    expect 0 "$SIMIL" build --data gen:mix:3000:16:11 --index IVF16,PQ8 --train-sample 1500 \
        --chunk 1000 --device cpu --out "$TMP/pq.idx"
    expect 0 "$SIMIL" gt --data gen:mix:3000:16:11 --queries gen:mix:20:16:12 -k 10 --device cpu \
        --out "$TMP/pqgt.ivecs"
    expect 0 "$SIMIL" gen --kind mix --n 20 --dim 16 --seed 12 --out "$TMP/pqq.fvecs"
    expect 0 "$SIMIL" search --index "$TMP/pq.idx" --queries "$TMP/pqq.fvecs" -k 10 --nprobe 16 \
        --gt "$TMP/pqgt.ivecs" --json
    py '
r = json.loads(open(sys.argv[1]).read())
check(r["one_recall_at_k"] >= 0.5, "IVF16,PQ8 from gen: 1-recall@10 %r" % r["one_recall_at_k"])
' "$TMP/out"
    # --part: rows [1000, 2000) with their global ids
    expect 0 "$SIMIL" build --data gen:uniform:2000:24:1 --index Flat --part 1/2 --device cpu \
        --out "$TMP/part.idx"
    expect 0 "$SIMIL" search --index "$TMP/part.idx" --queries "$TMP/q.fvecs" -k 1 \
        --out "$TMP/part.ivecs"
    py '
ids = read_vecs(sys.argv[1], "i")
check(all(1000 <= r[0] < 2000 for r in ids), "part 1/2 ids: %s" % ids[:5])
' "$TMP/part.ivecs"

    expect 1 "$SIMIL" gt --data gen:mix:10:4 --queries "$TMP/q.fvecs" -k 1 --out "$TMP/x.ivecs"
    err_has "gen:KIND:ROWS:DIM:SEED"
    expect 1 "$SIMIL" gt --data gen:mix:10:4:1 --queries "$TMP/q.fvecs" -k 1 --out "$TMP/x.ivecs"
    err_has "dimension"
    expect 2 "$SIMIL" gt --data gen:mix:10:4:1 --queries gen:mix:1:4:1 -k 1 --out "$TMP/x.txt"
    expect 1 "$SIMIL" build --data gen:gauss:10:4:1 --index Flat --out "$TMP/x.idx"
    err_has "uniform"
    [ -e "$TMP/x.idx" ] && fail "a failed build left $TMP/x.idx"
}

# ---------------------------------------------------------------- errors
test_errors() {
    gen_uniform "$TMP/base.fvecs" 100 8 1
    expect 0 "$SIMIL" build --data "$TMP/base.fvecs" --index Flat --device cpu --out "$TMP/flat.idx"
    local S=("$SIMIL" search --index "$TMP/flat.idx" --queries "$TMP/base.fvecs")
    local Q=("$SIMIL" search --index "$TMP/flat.idx" --queries)

    # Usage errors: exit 2, naming what was wrong.
    expect 2 "$SIMIL" bogus;                err_has "bogus"
    expect 2 "$SIMIL" --bogus;              err_has "--bogus"
    expect 2 "${S[@]}" -k 5 --bogus;        err_has "--bogus"
    expect 2 "${S[@]}" -k 5 --bogus=3;      err_has "--bogus"
    expect 2 "${S[@]}" -k 10x;              err_has "10x"
    expect 2 "${S[@]}" -k 0;                err_has "-k"
    expect 2 "${S[@]}" -k -5;               err_has "-k"
    expect 2 "${S[@]}" -k "";               err_has "-k"
    expect 2 "${S[@]}" -k 99999999999999999999; err_has "-k"
    expect 2 "${S[@]}" -k;                  err_has "-k"
    expect 2 "${S[@]}";                     err_has "-k"
    expect 2 "${S[@]}" -k 5 --nprobe 1.5;   err_has "--nprobe"
    expect 2 "${S[@]}" -k 5 --json=1;       err_has "--json"
    expect 2 "${S[@]}" -k 5 --out "$TMP/ids.txt";  err_has "ids.txt"
    expect 2 "${S[@]}" -k 5 --device tpu;   err_has "tpu"
    expect 2 "${S[@]}" -k 5 stray;          err_has "stray"
    err_has "simil search: "
    expect 2 "$SIMIL" gen --kind uniform --n -5 --dim 4 --seed 1 --out "$TMP/x.fvecs"; err_has "--n"
    expect 2 "$SIMIL" gen --kind normal --n 5 --dim 4 --seed 1 --out "$TMP/x.fvecs";  err_has "normal"
    expect 2 "$SIMIL" gen --kind uniform --n 5 --dim 4 --seed 1;  err_has "--out"
    expect 2 "$SIMIL" build --data "$TMP/base.fvecs" --index Flat --metric hamming --out "$TMP/x.idx"
    err_has "hamming"
    expect 2 "$SIMIL" info;                 err_has "simil info: "
    expect 2 "$SIMIL" info "$TMP/flat.idx" extra; err_has "extra"

    # Runtime errors: exit 1, naming the file.
    expect 1 "$SIMIL" build --data "$TMP/nope.fvecs" --index Flat --out "$TMP/x.idx"
    err_has "nope.fvecs"
    err_has "simil build: "
    expect 1 "$SIMIL" search --index "$TMP/missing.idx" --queries "$TMP/base.fvecs" -k 1
    err_has "missing.idx"
    expect 1 "${Q[@]}" "$TMP/absent.fvecs" -k 1
    err_has "absent.fvecs"
    expect 1 "$SIMIL" info "$TMP/missing.idx"
    err_has "missing.idx"
    expect 1 "${S[@]}" -k 1 --gt "$TMP/nogt.ivecs"
    err_has "nogt.ivecs"
    head -c 1000 /dev/urandom >"$TMP/junk.idx"
    expect 1 "$SIMIL" info "$TMP/junk.idx"
    head -c 100 "$TMP/flat.idx" >"$TMP/short.idx"
    expect 1 "$SIMIL" info "$TMP/short.idx"
    expect 1 "$SIMIL" build --data "$TMP/base.fvecs" --index NotAnIndex --out "$TMP/x.idx"
    err_has "NotAnIndex"
    gen_uniform "$TMP/q5.fvecs" 3 5 2
    expect 1 "${Q[@]}" "$TMP/q5.fvecs" -k 1
    err_has "q5.fvecs"
    [ -e "$TMP/x.idx" ] && fail "a failed build left $TMP/x.idx"

    # Asking for a GPU where there is none fails, with a hint.
    expect 0 "$SIMIL" info "$TMP/flat.idx"
    local gpus
    gpus=$(sed -n 's/^GPUs: //p' "$TMP/out")
    if [ "$gpus" = 0 ]; then
        expect 1 "${S[@]}" -k 1 --device gpu
        err_has "--device cpu"
        expect 1 "$SIMIL" build --data "$TMP/base.fvecs" --index Flat --device gpu:0 --out "$TMP/g.idx"
        err_has "--device cpu"
    elif [ -n "$gpus" ]; then
        echo "note: $gpus GPU(s) present, the failure of --device gpu is not tested"
    else
        fail "simil info printed no 'GPUs: N' line"
    fi
}

case $GROUP in
    usage | gen | flat | ivf | params | stream | ann | filter | errors) "test_$GROUP" ;;
    all) for g in usage gen flat ivf params stream ann filter errors; do GROUP=$g; "test_$g"; done ;;
    *) echo "unknown group $GROUP" >&2; exit 2 ;;
esac
[ "$FAILS" -eq 0 ] || { echo "$FAILS check(s) failed in group $GROUP" >&2; exit 1; }
echo "ok: $GROUP"
