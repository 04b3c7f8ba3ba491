#!/usr/bin/env bash
# tests/tools/test_graph.sh: end-to-end tests of "simil knn-graph" and
# "simil path".
#
#   bash test_graph.sh PATH/TO/simil GROUP
#
# GROUP is one of usage, knn, quality, path, png, errors (or all).  Graphs are
# checked against a float64 brute force in Python, paths against a Python
# bottleneck search, and the PNG is decoded here (zlib and the PNG filters)
# and compared pixel by pixel with the data.  Every failure prints the
# command, its exit status and its stderr; the script exits 1 if anything
# failed, and 77 (CTest's "skipped") when the png group finds a simil built
# without libpng.
set -u

SIMIL=$1
GROUP=${2:-all}
JPEG=$(cd "$(dirname "$0")" && pwd)/data/two-colours.jpg
TMP=$(mktemp -d)
trap '[ -n "${KEEP_TMP:-}" ] && echo "kept $TMP" || rm -rf "$TMP"' EXIT
FAILS=0
SKIPPED=0

fail() { echo "FAIL [$GROUP]: $*" >&2; FAILS=$((FAILS + 1)); }

# run CMD...: stdout to $TMP/out, stderr to $TMP/err, exit status in $RC.
run() { LAST="$*"; "$@" >"$TMP/out" 2>"$TMP/err"; RC=$?; }

expect() {
    local want=$1; shift
    run "$@"
    [ "$RC" -eq "$want" ] || fail "'$LAST' exited $RC, want $want; stderr: $(head -c 600 "$TMP/err")"
}

err_has() { grep -qF -- "$1" "$TMP/err" || fail "stderr of '$LAST' lacks '$1': $(head -c 600 "$TMP/err")"; }
out_has() { grep -qF -- "$1" "$TMP/out" || fail "stdout of '$LAST' lacks '$1': $(head -c 600 "$TMP/out")"; }

py() {
    local code=$1; shift
    "${PYTHON:-python3}" -c "$PYLIB
$code" "$@" || fail "python check failed after '$LAST' (args: $*)"
}

PYLIB='
import heapq, random, struct, sys, zlib

def check(cond, msg):
    if not cond:
        print("check failed: " + msg, file=sys.stderr)
        sys.exit(1)

def read_vecs(path, code):
    data, rows, off = open(path, "rb").read(), [], 0
    size = 1 if code == "B" else 4
    while off < len(data):
        d = struct.unpack_from("<i", data, off)[0]
        rows.append(list(struct.unpack_from("<%d%s" % (d, code), data, off + 4)))
        off += 4 + size * d
    return rows

def write_vecs(path, rows, code):
    with open(path, "wb") as f:
        for r in rows:
            f.write(struct.pack("<i%d%s" % (len(r), code), len(r), *r))

def read_npy(path):
    data = open(path, "rb").read()
    check(data[:6] == b"\x93NUMPY", path + ": no npy magic")
    hlen = struct.unpack_from("<H", data, 8)[0]
    header = eval(data[10:10 + hlen].decode("latin1"))
    start = 10 + hlen
    check(start % 64 == 0, path + ": data not aligned to 64")
    code = {"<f4": "f", "<i4": "i", "<i8": "q"}[header["descr"]]
    rows, cols = header["shape"]
    vals = struct.unpack_from("<%d%s" % (rows * cols, code), data, start)
    check(len(data) == start + rows * cols * struct.calcsize(code), path + ": size")
    return header["descr"], [list(vals[i * cols:(i + 1) * cols]) for i in range(rows)]

def read_graph(ids_path, dist_path):
    if ids_path.endswith(".npy"):
        descr, ids = read_npy(ids_path)
        check(descr == "<i8", ids_path + ": ids are " + descr)
        descr, dist = read_npy(dist_path)
        check(descr == "<f4", dist_path + ": distances are " + descr)
    else:
        ids, dist = read_vecs(ids_path, "i"), read_vecs(dist_path, "f")
    return ids, dist

def exact_graph(x, k):
    """Per row the k + 1 nearest (distance, id) in float64, self dropped."""
    out = []
    for i, q in enumerate(x):
        s = sorted((sum((a - b) ** 2 for a, b in zip(q, y)), j) for j, y in enumerate(x))
        s = s[:k + 1]
        self_at = [j for j, (_, idx) in enumerate(s) if idx == i]
        del s[self_at[0] if self_at else k]
        out.append(s)
    return out

def check_graph(x, ids, dist, k, tol=1e-4):
    ref = exact_graph(x, k + 1)
    check(len(ids) == len(x) and all(len(r) == k for r in ids), "graph shape")
    for i in range(len(x)):
        check(i not in ids[i], "row %d lists itself" % i)
        for j in range(k):
            rd, rid = ref[i][j]
            check(abs(dist[i][j] - rd) <= tol * max(1.0, rd), "row %d rank %d: distance %r, want %r" % (i, j, dist[i][j], rd))
            tie = any(abs(ref[i][m][0] - rd) <= tol * max(1.0, rd) for m in (j - 1, j + 1) if 0 <= m < k + 1 and m != j)
            check(tie or ids[i][j] == rid, "row %d rank %d: id %d, want %d" % (i, j, ids[i][j], rid))

def bottleneck(ids, dist, a, b):
    """Smallest largest step from a to b, edges taken both ways; None if apart."""
    adj = {}
    for u, row in enumerate(ids):
        for v, d in zip(row, dist[u]):
            if v >= 0 and v != u:
                adj.setdefault(u, []).append((v, d))
                adj.setdefault(v, []).append((u, d))
    best, heap, done = {a: float("-inf")}, [(float("-inf"), a)], set()
    while heap:
        c, u = heapq.heappop(heap)
        if u in done:
            continue
        if u == b:
            return c
        done.add(u)
        for v, d in adj.get(u, []):
            nc = max(c, d)
            if v not in best or nc < best[v]:
                best[v] = nc
                heapq.heappush(heap, (nc, v))
    return None

def parse_path(path):
    """The rows of simil path: (node, step or None)."""
    rows = []
    for line in open(path):
        f = line.split()
        if len(f) == 3 and f[0].isdigit():
            rows.append((int(f[1]), None if f[2] == "-" else float(f[2])))
    return rows

def read_png(path):
    data = open(path, "rb").read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", path + ": no PNG signature")
    off, idat, ihdr = 8, b"", None
    while off < len(data):
        n, kind = struct.unpack_from(">I4s", data, off)
        body = data[off + 8:off + 8 + n]
        check(zlib.crc32(kind + body) == struct.unpack_from(">I", data, off + 8 + n)[0], "chunk crc")
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        off += 12 + n
    w, h, depth, color = ihdr[:4]
    check(depth == 8 and color in (0, 2), "not 8-bit gray or RGB: depth %d color %d" % (depth, color))
    bpp = 3 if color == 2 else 1
    raw, rows, prev, wb = zlib.decompress(idat), [], [0] * (w * bpp), w * bpp
    for y in range(h):
        f, line = raw[y * (wb + 1)], list(raw[y * (wb + 1) + 1:(y + 1) * (wb + 1)])
        for i in range(wb):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, rows

def write_png(path, w, h, rows):
    # 8-bit grayscale, filter 0 on every row
    raw = b"".join(b"\0" + bytes(r) for r in rows)
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
'

# Small random data in .fvecs: rand_fvecs FILE N DIM SEED [CLUSTERS SPREAD].
rand_fvecs() {
    py '
rnd = random.Random(int(sys.argv[4]))
n, d, c = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[5])
x = [[rnd.random() + (i % c) * float(sys.argv[6]) for _ in range(d)] for i in range(n)]
write_vecs(sys.argv[1], x, "f")
' "$1" "$2" "$3" "$4" "${5:-1}" "${6:-0}"
}

# ---------------------------------------------------------------- usage
test_usage() {
    expect 0 "$SIMIL" --help
    out_has "knn-graph"
    out_has "  path "
    expect 0 "$SIMIL" knn-graph --help
    out_has "usage: simil knn-graph"
    out_has "NAME-distances.npy"
    out_has "NAME.fvecs"
    expect 0 "$SIMIL" path --help
    out_has "usage: simil path"
    out_has "undirected"
}

# ---------------------------------------------------------------- knn
test_knn() {
    rand_fvecs "$TMP/x.fvecs" 150 7 1
    # .ivecs: ids in G.ivecs, distances in G.fvecs
    expect 0 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 5 --index Flat --out "$TMP/g.ivecs" --device cpu
    out_has "wrote $TMP/g.ivecs (ids) and $TMP/g.fvecs (distances)"
    grep -Eq '^build [0-9.]+ s \(train [0-9.]+ s, add [0-9.]+ s\), join [0-9.]+ s, total [0-9.]+ s$' "$TMP/out" ||
        fail "no timing line: $(cat "$TMP/out")"
    out_has ", Flat, join, metric l2, on cpu"
    out_has "distances computed, 100.00% of all pairs"
    # the per-query search gives the same graph
    expect 0 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 5 --index Flat --out "$TMP/s.ivecs" --device cpu --method search
    out_has ", Flat, search, metric l2"
    grep -Eq '^build [0-9.]+ s \(train [0-9.]+ s, add [0-9.]+ s\), search [0-9.]+ s, total [0-9.]+ s$' "$TMP/out" ||
        fail "no timing line: $(cat "$TMP/out")"
    cmp -s "$TMP/g.ivecs" "$TMP/s.ivecs" || fail "join and search give different exact graphs"
    expect 2 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 5 --index Flat --out "$TMP/s.ivecs" --method fast
    err_has "--method: 'fast' is not auto, join or search"
    expect 1 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 5 --index IVF4,PQ7x4 --out "$TMP/s.ivecs" --method join --device cpu
    err_has "the list join takes Flat or IVF<n>,Flat"
    py '
x = read_vecs(sys.argv[1], "f")
ids, dist = read_graph(sys.argv[2], sys.argv[3])
check_graph(x, ids, dist, 5)
' "$TMP/x.fvecs" "$TMP/g.ivecs" "$TMP/g.fvecs"

    # .npy: int64 ids in G.npy, distances in G-distances.npy; small batches
    # stream the file in chunks and give the same graph
    expect 0 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 5 --index Flat --out "$TMP/g.npy" --device cpu --batch 16
    [ -f "$TMP/g-distances.npy" ] || fail "no $TMP/g-distances.npy"
    py '
a = read_graph(sys.argv[1], sys.argv[2])
b = read_graph(sys.argv[3], sys.argv[4])
check(a[0] == b[0], "ids differ between .ivecs and .npy (batch 16)")
check(all(abs(p - q) <= 1e-5 * max(1, p) for r, s in zip(a[1], b[1]) for p, q in zip(r, s)), "distances differ")
' "$TMP/g.ivecs" "$TMP/g.fvecs" "$TMP/g.npy" "$TMP/g-distances.npy"

    # IVF probing every list is exact too
    expect 0 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 5 --index IVF4,Flat --nprobe 4 --out "$TMP/i.ivecs" --device cpu
    out_has "IVF4,Flat nprobe=4"
    py '
x = read_vecs(sys.argv[1], "f")
ids, dist = read_graph(sys.argv[2], sys.argv[3])
check_graph(x, ids, dist, 5)
' "$TMP/x.fvecs" "$TMP/i.ivecs" "$TMP/i.fvecs"
}

# ---------------------------------------------------------------- quality
test_quality() {
    rand_fvecs "$TMP/x.fvecs" 400 6 2 8 3.0
    expect 0 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 10 --index Flat --out "$TMP/g.ivecs" --device cpu --quality
    out_has "quality 1.0000 (10-intersection over 400 sampled vectors"
    expect 0 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 10 --index IVF16,Flat --nprobe 1 --out "$TMP/a.ivecs" --device cpu --quality --sample 100
    out_has "over 100 sampled vectors"
    py '
q = [float(l.split()[1]) for l in open(sys.argv[1]) if l.startswith("quality ")]
check(len(q) == 1 and 0.1 < q[0] < 1.0, "IVF16,Flat nprobe=1 quality %r" % q)
' "$TMP/out"
}

# ---------------------------------------------------------------- path
test_path() {
    rand_fvecs "$TMP/x.fvecs" 200 3 3 4 2.0
    expect 0 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 4 --index Flat --out "$TMP/g.npy" --device cpu
    local pairs="0:196 5:17 42:42 100:4 7:151 0:199"
    local p
    for p in $pairs; do
        local a=${p%:*} b=${p#*:}
        run "$SIMIL" path --graph "$TMP/g.npy" --from "$a" --to "$b"
        if [ "$RC" -eq 0 ]; then
            out_has "path from $a to $b:"
            py '
ids, dist = read_graph(sys.argv[1], sys.argv[2])
a, b = int(sys.argv[3]), int(sys.argv[4])
want = bottleneck(ids, dist, a, b)
rows = parse_path(sys.argv[5])
check(want is not None, "simil found a path %d -> %d that does not exist" % (a, b))
check(rows[0][0] == a and rows[-1][0] == b, "path ends %r" % [rows[0], rows[-1]])
worst = float("-inf")
for (u, _), (v, step) in zip(rows, rows[1:]):
    ok = any(t == v and abs(d - step) <= 1e-5 * max(1, d) for t, d in zip(ids[u], dist[u])) or \
         any(t == u and abs(d - step) <= 1e-5 * max(1, d) for t, d in zip(ids[v], dist[v]))
    check(ok, "step %d -> %d (%r) is not an edge" % (u, v, step))
    worst = max(worst, step)
check(a == b or abs(worst - want) <= 1e-5 * max(1, want), "largest step %r, optimum %r" % (worst, want))
' "$TMP/g.npy" "$TMP/g-distances.npy" "$a" "$b" "$TMP/out"
        else
            err_has "different components of the k-NN graph; use a larger k"
            py '
ids, dist = read_graph(sys.argv[1], sys.argv[2])
check(bottleneck(ids, dist, int(sys.argv[3]), int(sys.argv[4])) is None, "simil missed a path")
' "$TMP/g.npy" "$TMP/g-distances.npy" "$a" "$b"
        fi
    done

    # Two clusters far apart, k=2: no path between them, a clear message.
    py '
x = [[float(i % 10), 0.0] for i in range(10)] + [[1000.0 + i, 0.0] for i in range(10)]
write_vecs(sys.argv[1], x, "f")
' "$TMP/two.fvecs"
    expect 0 "$SIMIL" knn-graph --data "$TMP/two.fvecs" -k 2 --index Flat --out "$TMP/two.ivecs" --device cpu
    expect 1 "$SIMIL" path --graph "$TMP/two.ivecs" --from 0 --to 15
    err_has "no path from 0 to 15: they are in different components of the k-NN graph; use a larger k"
    expect 0 "$SIMIL" path --graph "$TMP/two.ivecs" --from 0 --to 9
}

# ---------------------------------------------------------------- png
test_png() {
    # 40 "images" of 28 x 28 bytes (.bvecs): smooth blobs that drift, so
    # neighbours are similar images
    py '
rnd = random.Random(5)
rows = []
for i in range(40):
    cx, cy = 4 + (i % 20), 4 + (i * 7) % 20
    rows.append([max(0, min(255, 255 - 12 * ((x - cx) ** 2 + (y - cy) ** 2) + rnd.randrange(20)))
                 for y in range(28) for x in range(28)])
write_vecs(sys.argv[1], rows, "B")
' "$TMP/img.bvecs"
    expect 0 "$SIMIL" knn-graph --data "$TMP/img.bvecs" -k 6 --index Flat --out "$TMP/g.ivecs" --device cpu
    run "$SIMIL" path --graph "$TMP/g.ivecs" --data "$TMP/img.bvecs" --from 0 --to 39 --png "$TMP/strip.png"
    if [ "$RC" -ne 0 ] && grep -qF "built without libpng" "$TMP/err"; then
        echo "note: simil was built without libpng; skipping the png group"
        SKIPPED=1
        return
    fi
    [ "$RC" -eq 0 ] || { fail "'$LAST' exited $RC: $(head -c 600 "$TMP/err")"; return; }
    out_has "wrote $TMP/strip.png:"
    py '
w, h, pix = read_png(sys.argv[1])
path = [u for u, _ in parse_path(sys.argv[2])]
img = read_vecs(sys.argv[3], "B")
check(len(path) >= 2, "path %r" % path)
check((w, h) == (28 * len(path), 28), "PNG is %dx%d, want %dx28 for %d images" % (w, h, 28 * len(path), len(path)))
for s, node in enumerate(path):
    for y in range(28):
        got = pix[y][28 * s:28 * (s + 1)]
        check(got == img[node][28 * y:28 * (y + 1)], "image %d (node %d) row %d differs" % (s, node, y))
' "$TMP/strip.png" "$TMP/out" "$TMP/img.bvecs"

    # a dimension that is not a square number fails, and leaves no file
    rand_fvecs "$TMP/odd.fvecs" 20 13 1
    expect 0 "$SIMIL" knn-graph --data "$TMP/odd.fvecs" -k 3 --index Flat --out "$TMP/o.ivecs" --device cpu
    expect 1 "$SIMIL" path --graph "$TMP/o.ivecs" --data "$TMP/odd.fvecs" --from 0 --to 1 --png "$TMP/o.png"
    err_has "dimension 13 is not a square number"
    [ -e "$TMP/o.png" ] && fail "a failed --png left $TMP/o.png"

    # --images: vectors of 13 dimensions (not images), one 28 x 28 PNG per
    # vector (vector i: gray level 5 i + y in row y), and for the last one a
    # JPEG of 24 x 16 (red left, blue right), named by absolute path
    mkdir -p "$TMP/pics"
    py '
for i in range(30):
    write_png("%s/p%d.png" % (sys.argv[1], i), 28, 28, [[5 * i + y] * 28 for y in range(28)])
with open(sys.argv[1] + "/list.txt", "w") as f:
    f.write("".join("p%d.png\n" % i for i in range(29)) + sys.argv[2] + "\n")
' "$TMP/pics" "$JPEG"
    rand_fvecs "$TMP/emb.fvecs" 30 13 2
    expect 0 "$SIMIL" knn-graph --data "$TMP/emb.fvecs" -k 4 --index Flat --out "$TMP/e.ivecs" --device cpu
    run "$SIMIL" path --graph "$TMP/e.ivecs" --from 0 --to 29 --png "$TMP/pics.png" --images "$TMP/pics/list.txt"
    if [ "$RC" -ne 0 ] && grep -qF "built without libjpeg" "$TMP/err"; then
        echo "note: simil was built without libjpeg; skipping the --images checks"
        SKIPPED=1
        return
    fi
    [ "$RC" -eq 0 ] || { fail "'$LAST' exited $RC: $(head -c 600 "$TMP/err")"; return; }
    out_has "wrote $TMP/pics.png:"
    py '
w, h, pix = read_png(sys.argv[1])
path = [u for u, _ in parse_path(sys.argv[2])]
side = int(sys.argv[3])
check(path[-1] == 29 and len(path) >= 2, "path %r" % path)
check((w, h) == (side * len(path), side), "PNG is %dx%d, want %dx%d" % (w, h, side * len(path), side))
def px(s, x, y):
    return tuple(pix[y][3 * (side * s + x):3 * (side * s + x) + 3])
for s, node in enumerate(path[:-1]):
    for y in range(side):
        # 28 rows scaled to side: each the mean of the rows it covers
        rows = range(y * 28 // side, max((y + 1) * 28 // side, y * 28 // side + 1))
        v = (sum(5 * node + r for r in rows) * 28 * 28 // side // side + len(rows) * 28 * 28 // side // side // 2) // (len(rows) * 28 * 28 // side // side)
        for x in range(side):
            check(px(s, x, y) == (v, v, v), "picture %d (node %d) at (%d, %d): %r, want gray %d" % (s, node, x, y, px(s, x, y), v))
# the JPEG: 24 x 16 fitted to side wide, centred; white above and below
s = len(path) - 1
red, blue = px(s, side // 5, side // 2), px(s, side - 1 - side // 5, side // 2)
check(all(abs(a - b) <= 12 for a, b in zip(red, (200, 30, 30))), "red half: %r" % (red,))
check(all(abs(a - b) <= 12 for a, b in zip(blue, (30, 30, 200))), "blue half: %r" % (blue,))
check(px(s, side // 2, 0) == (255, 255, 255), "above the JPEG: %r" % (px(s, side // 2, 0),))
' "$TMP/pics.png" "$TMP/out" 28
    expect 0 "$SIMIL" path --graph "$TMP/e.ivecs" --from 0 --to 29 --png "$TMP/pics.png" --images "$TMP/pics/list.txt" --thumb 14
    py '
w, h, pix = read_png(sys.argv[1])
path = [u for u, _ in parse_path(sys.argv[2])]
check((w, h) == (14 * len(path), 14), "--thumb 14: PNG is %dx%d" % (w, h))
node = path[0]
for y in range(14):
    v = (5 * node + 2 * y + 5 * node + 2 * y + 1 + 1) // 2
    check(pix[y][0:3] == [v, v, v], "--thumb 14: row %d is %r, want %d" % (y, pix[y][0:3], v))
' "$TMP/pics.png" "$TMP/out"

    # a list of the wrong length, a missing picture, a file that is no picture
    head -n 29 "$TMP/pics/list.txt" > "$TMP/pics/short.txt"
    expect 1 "$SIMIL" path --graph "$TMP/e.ivecs" --from 0 --to 29 --png "$TMP/x.png" --images "$TMP/pics/short.txt"
    err_has "names 29 pictures, but the graph has 30 nodes"
    sed "s/^p0.png$/gone.png/" "$TMP/pics/list.txt" > "$TMP/pics/gone.txt"
    expect 1 "$SIMIL" path --graph "$TMP/e.ivecs" --from 0 --to 29 --png "$TMP/x.png" --images "$TMP/pics/gone.txt"
    err_has "gone.png: cannot open the picture"
    sed "s|^p0.png$|list.txt|" "$TMP/pics/list.txt" > "$TMP/pics/bad.txt"
    expect 1 "$SIMIL" path --graph "$TMP/e.ivecs" --from 0 --to 29 --png "$TMP/x.png" --images "$TMP/pics/bad.txt"
    err_has "list.txt: not a PNG or JPEG file"
    [ -e "$TMP/x.png" ] && fail "a failed --png left $TMP/x.png"
    expect 2 "$SIMIL" path --graph "$TMP/e.ivecs" --from 0 --to 29 --images "$TMP/pics/list.txt"
    err_has "--images and --thumb go with --png"
    expect 2 "$SIMIL" path --graph "$TMP/e.ivecs" --from 0 --to 29 --png "$TMP/x.png" --data "$TMP/emb.fvecs" --thumb 9
    err_has "--thumb goes with --images"
}

# ---------------------------------------------------------------- errors
test_errors() {
    rand_fvecs "$TMP/x.fvecs" 30 4 1
    expect 2 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 5 --index Flat --out "$TMP/g.txt"
    err_has "--out"
    expect 2 "$SIMIL" knn-graph --data "$TMP/x.fvecs" --index Flat --out "$TMP/g.ivecs"
    err_has "missing option --k"
    expect 2 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 0 --index Flat --out "$TMP/g.ivecs"
    expect 2 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 3 --index Flat --out "$TMP/g.ivecs" --metric foo
    expect 1 "$SIMIL" knn-graph --data "$TMP/missing.fvecs" -k 3 --index Flat --out "$TMP/g.ivecs"
    err_has "missing.fvecs"
    expect 1 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 3 --index IVF64,Flat --out "$TMP/g.ivecs" --device cpu
    [ -e "$TMP/g.ivecs" ] && fail "a failed build left $TMP/g.ivecs"
    [ -e "$TMP/g.fvecs" ] && fail "a failed build left $TMP/g.fvecs"

    expect 0 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 3 --index Flat --out "$TMP/g.ivecs" --device cpu
    expect 2 "$SIMIL" path --graph "$TMP/g.ivecs" --from 0 --to 30
    err_has "the graph has 30 nodes"
    expect 2 "$SIMIL" path --graph "$TMP/g.ivecs" --from 0 --to 1 --png "$TMP/p.png"
    err_has "--png needs --data"
    expect 2 "$SIMIL" path --graph "$TMP/g.ivecs" --from 0 --to 1 --data "$TMP/x.fvecs" --png "$TMP/p.jpg"
    rm -f "$TMP/g.fvecs"
    expect 1 "$SIMIL" path --graph "$TMP/g.ivecs" --from 0 --to 1
    err_has "expected in $TMP/g.fvecs"
    rand_fvecs "$TMP/y.fvecs" 31 4 1
    expect 0 "$SIMIL" knn-graph --data "$TMP/x.fvecs" -k 3 --index Flat --out "$TMP/g.ivecs" --device cpu
    expect 1 "$SIMIL" path --graph "$TMP/g.ivecs" --from 0 --to 1 --data "$TMP/y.fvecs"
    err_has "has 31 vectors but the graph"
}

case $GROUP in
    usage | knn | quality | path | png | errors) "test_$GROUP" ;;
    all) for g in usage knn quality path png errors; do GROUP=$g; "test_$g"; done ;;
    *) echo "unknown group $GROUP" >&2; exit 2 ;;
esac
[ "$FAILS" -eq 0 ] || { echo "$FAILS check(s) failed in group $GROUP" >&2; exit 1; }
[ "$SKIPPED" -eq 0 ] || exit 77
echo "ok: $GROUP"
