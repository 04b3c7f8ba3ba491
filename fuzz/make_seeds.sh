#!/usr/bin/env bash
# make_seeds.sh: writes the seed corpora fuzz/seeds/<target>/ from real
# files: index files made by the simil tool (and a few unusual ones written
# by Python against docs/file-format.md), texmex/npy/idx files from Python's
# standard library, HDF5 files from hdf5_seed.c.  The seeds are committed;
# run this again only to change them.  Keep the whole folder under 1 MB.
#   fuzz/make_seeds.sh [SIMIL_EXECUTABLE]
# Without an argument it builds the tool in build-seeds/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
simil=${1:-}
if [ -z "$simil" ]; then
  cmake -S "$root" -B "$root/build-seeds" -G Ninja -DSIMIL_CUDA=OFF -DSIMIL_TESTS=OFF \
        -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build "$root/build-seeds" --target simil_cli > /dev/null
  simil=$root/build-seeds/simil
fi
seeds=$here/seeds
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$seeds"
mkdir -p "$seeds"/{index_file,texmex,npy,idx,idx_gz,hdf5,index_spec}

# ---- index files: one flags byte (bit 0: repair checksums), then the file ----
flagged() { # flags src dst
  { printf "\\x$1"; cat "$2"; } > "$3"
}
"$simil" gen --kind uniform --n 20 --dim 8 --seed 1 --out "$work/a.fvecs"
"$simil" gen --kind mix --n 7 --dim 3 --seed 2 --out "$work/b.fvecs"
"$simil" gen --kind uniform --n 1 --dim 1 --seed 3 --out "$work/c.fvecs"
for m in l2 ip cosine; do
  "$simil" build --data "$work/a.fvecs" --index Flat --metric $m --out "$work/a-$m.sidx" \
           --device cpu 2> /dev/null
done
"$simil" build --data "$work/b.fvecs" --index Flat --out "$work/b.sidx" --device cpu 2> /dev/null
"$simil" build --data "$work/c.fvecs" --index Flat --out "$work/c.sidx" --device cpu 2> /dev/null
flagged 01 "$work/a-l2.sidx" "$seeds/index_file/flat-l2-20x8"
flagged 01 "$work/a-ip.sidx" "$seeds/index_file/flat-ip-20x8"
flagged 00 "$work/a-cosine.sidx" "$seeds/index_file/flat-cosine-20x8"
flagged 01 "$work/b.sidx" "$seeds/index_file/flat-l2-7x3"
flagged 00 "$work/c.sidx" "$seeds/index_file/flat-l2-1x1"

python3 - "$seeds" <<'PY'
import struct, sys, zlib, gzip
seeds = sys.argv[1]

def section(tag, payload):
    head = tag + struct.pack('<IQ', 0, len(payload))
    return (head + struct.pack('<II', zlib.crc32(head), 0) + payload +
            struct.pack('<I', zlib.crc32(payload)))

def index_file(metric, dim, ids, next_id, vectors, desc=b'Flat'):
    head = struct.pack('<IIqqqI', metric, 1, dim, len(ids), next_id, len(desc)) + desc
    out = b'SIMILIDX' + struct.pack('<II', 1, 0) + section(b'HEAD', head)
    out += section(b'IDS ', struct.pack('<%dq' % len(ids), *ids))
    out += section(b'VECS', struct.pack('<%df' % len(vectors), *vectors))
    return out + section(b'END ', b'')

def put(path, data):
    with open(path, 'wb') as f:
        f.write(data)

# an empty index, explicit duplicate ids, and an id near 2^63
put(seeds + '/index_file/empty-d16', b'\x01' + index_file(0, 16, [], 0, []))
put(seeds + '/index_file/dup-ids', b'\x01' + index_file(
    1, 2, [5, 5, 9], 10, [0.5, 1, 0.5, 1, -2, 3]))
put(seeds + '/index_file/big-next-id', b'\x01' + index_file(
    0, 1, [2**63 - 2], 2**63 - 1, [1.0]))

# ---- texmex: int32 dim, then dim values, per row ----
def texmex(fmt, rows):
    out = b''
    for r in rows:
        out += struct.pack('<i', len(r)) + struct.pack('<%d%s' % (len(r), fmt), *r)
    return out
put(seeds + '/texmex/fvecs-3x4', texmex('f', [[0.5 * i + j for j in range(4)] for i in range(3)]))
put(seeds + '/texmex/ivecs-2x5', texmex('i', [[i * 7 - j for j in range(5)] for i in range(2)]))
put(seeds + '/texmex/bvecs-4x3', texmex('B', [[(i * 40 + j) % 256 for j in range(3)]
                                              for i in range(4)]))
put(seeds + '/texmex/empty', b'')

# ---- npy ----
def npy(descr, shape, data, version=1, fortran=False):
    shape_text = '(%s)' % ''.join('%d, ' % s for s in shape) if len(shape) == 1 else \
                 '(%s)' % ', '.join(str(s) for s in shape)
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, 'True' if fortran else 'False', shape_text)
    pre = 6 + 2 + (2 if version == 1 else 4)
    total = (pre + len(d) + 1 + 63) // 64 * 64
    d = d + ' ' * (total - pre - len(d) - 1) + '\n'
    length = struct.pack('<H', len(d)) if version == 1 else struct.pack('<I', len(d))
    return b'\x93NUMPY' + bytes([version, 0]) + length + d.encode() + data
put(seeds + '/npy/f4-3x4', npy('<f4', (3, 4), struct.pack('<12f', *[i / 3 for i in range(12)])))
put(seeds + '/npy/f8-2x3', npy('<f8', (2, 3), struct.pack('<6d', *[1e-3 * i for i in range(6)])))
put(seeds + '/npy/u1-4x2', npy('|u1', (4, 2), bytes(range(8))))
put(seeds + '/npy/i4-2x2-v2', npy('<i4', (2, 2), struct.pack('<4i', 1, -2, 3, -4), version=2))
put(seeds + '/npy/i8-1d', npy('<i8', (3,), struct.pack('<3q', 1, 2**40, -5), version=3))
put(seeds + '/npy/f4-5x1-fortran', npy('<f4', (5, 1), struct.pack('<5f', 1, 2, 3, 4, 5),
                                       fortran=True))

# ---- idx: 00 00 08 ndim, big-endian dims, bytes ----
def idx(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b''.join(struct.pack('>I', d) for d in dims) + data
images = idx([3, 2, 2], bytes(range(12)))
labels = idx([5], bytes([3, 1, 4, 1, 5]))
for folder in ('idx', 'idx_gz'):
    put(seeds + '/%s/images-3x2x2' % folder, images)
    put(seeds + '/%s/labels-5' % folder, labels)
put(seeds + '/idx/images-3x2x2.gz', gzip.compress(images, mtime=0))

# ---- factory strings: one byte for dim and metric, then the text ----
specs = [(0x7f, 'Flat'), (0x10, 'IVF4096,Flat'), (0x80, 'IVF256,PQ16x8'),
         (0x40, 'OPQ16_64,IVF256,PQ16'), (0x05, 'XFBQ'), (0x07, 'IVF1024,XFBQ4x3'),
         (0x99, 'IDMap,IVF64,PQ8,Refine'), (0x20, 'PQ4x4,RFlat'), (0xff, ' Flat , '),
         (0x00, 'OPQ8,PQ8')]
for i, (b, text) in enumerate(specs):
    put(seeds + '/index_spec/spec-%02d' % i, bytes([b]) + text.encode())
PY

# ---- HDF5 ----
if hdf5_flags=$(pkg-config --cflags --libs hdf5-serial 2> /dev/null) ||
   hdf5_flags=$(pkg-config --cflags --libs hdf5 2> /dev/null); then
  cc -O1 -o "$work/hdf5_seed" "$here/hdf5_seed.c" $hdf5_flags
  for kind in f32 f64 u8 empty; do
    "$work/hdf5_seed" "$seeds/hdf5/$kind" "$kind"
  done
else
  echo "make_seeds.sh: no HDF5 development files (libhdf5-dev): no HDF5 seeds" >&2
fi
du -sh "$seeds"
