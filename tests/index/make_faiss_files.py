#!/usr/bin/python3
"""Faiss index files and Faiss's own search results, for tests/index/test_faiss_io.c.

    make_faiss_files.py check
        exit 0 if faiss imports (the C test skips otherwise)
    make_faiss_files.py gen DIR
        write into DIR, for each NAME below: NAME.faiss (faiss.write_index), NAME.q.npy
        (queries, float32), NAME.D.npy and NAME.I.npy (what Faiss's search of the
        file gives: float32 and int64, K per query, IVF searched with NPROBE lists);
        also files of types simil refuses (unsupported_*.faiss) and tiny files for
        the truncation tests (tiny_*.faiss)
    make_faiss_files.py search DIR NAME K NPROBE
        faiss.read_index(DIR/NAME.faiss), search DIR/NAME.q.npy, write DIR/NAME.D.npy,
        DIR/NAME.I.npy and DIR/NAME.type.txt (the class Faiss read, e.g. IndexIVFPQ)

Debian's python3-faiss (Faiss 1.7.3) writes the files.  The "IvFl"/"IvPQ" files
are the layout older Faiss versions wrote; they are assembled here from a
current index and checked by reading them back with Faiss itself.  Everything
is seeded: the same files every run.
"""
import struct
import sys

import numpy as np

K = 10       # neighbours per query; test_faiss_io.c uses the same
NPROBE = 4   # lists probed in IVF searches; test_faiss_io.c uses the same
NQ = 40


def rand(seed, n, d):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def clustered(seed, n, d, centers=24):
    """Points around random centers: IVF lists of uneven sizes, as in real data."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centers, d)).astype(np.float32) * 3
    return (c[rng.integers(0, centers, n)] + rng.standard_normal((n, d))).astype(np.float32)


def search(faiss, index, q, k=K, nprobe=NPROBE):
    try:
        faiss.extract_index_ivf(index).nprobe = nprobe
    except (RuntimeError, AttributeError):
        pass  # not an IVF
    return index.search(q, k)


def save(faiss, out, name, index, q, own_nprobe=False):
    """With own_nprobe, Faiss searches with the nprobe stored in the file."""
    path = f"{out}/{name}.faiss"
    faiss.write_index(index, path)
    index = faiss.read_index(path)  # the results of the file, not of the object
    D, I = index.search(q, K) if own_nprobe else search(faiss, index, q)
    np.save(f"{out}/{name}.q.npy", q)
    np.save(f"{out}/{name}.D.npy", D.astype(np.float32))
    np.save(f"{out}/{name}.I.npy", I.astype(np.int64))
    return D, I


def ivf_lists(faiss, ivf):
    """Per list: (ids as int64 array, codes as bytes)."""
    inv = ivf.invlists
    lists = []
    for l in range(ivf.nlist):
        n = inv.list_size(l)
        ids = faiss.rev_swig_ptr(inv.get_ids(l), n).copy() if n else np.zeros(0, np.int64)
        codes = bytes(faiss.rev_swig_ptr(inv.get_codes(l), n * inv.code_size)) if n else b""
        lists.append((ids.astype(np.int64), codes))
    return lists


def legacy(faiss, ivf, code):
    """The bytes of an old-format IVF file ("IvFl" or "IvPQ") holding ivf."""
    header = struct.pack("<iqqq?i", ivf.d, ivf.ntotal, 1 << 20, 1 << 20, True, ivf.metric_type)
    lists = ivf_lists(faiss, ivf)
    out = [code.encode(), header, struct.pack("<QQ", ivf.nlist, ivf.nprobe),
           faiss.serialize_index(ivf.quantizer).tobytes()]
    out += [struct.pack("<Q", len(ids)) + ids.tobytes() for ids, _ in lists]
    out.append(struct.pack("<BQ", 0, 0))  # no direct map
    if code == "IvPQ":
        pq = ivf.pq
        cent = faiss.vector_to_array(pq.centroids).astype(np.float32)
        out.append(struct.pack("<?QQQQQ", True, ivf.code_size, pq.d, pq.M, pq.nbits, cent.size))
        out.append(cent.tobytes())
        out += [struct.pack("<Q", len(codes)) + codes for _, codes in lists]
    else:  # codes as vectors of floats
        out += [struct.pack("<Q", len(codes) // 4) + codes for _, codes in lists]
    return b"".join(out)


def save_legacy(faiss, out, name, ivf, code, q, D, I):
    path = f"{out}/{name}.faiss"
    with open(path, "wb") as f:
        f.write(legacy(faiss, ivf, code))
    back = faiss.read_index(path)
    D2, I2 = search(faiss, back, q)
    assert np.array_equal(I, I2) and np.allclose(D, D2), f"Faiss reads {name} differently"
    np.save(f"{out}/{name}.q.npy", q)
    np.save(f"{out}/{name}.D.npy", D.astype(np.float32))
    np.save(f"{out}/{name}.I.npy", I.astype(np.int64))


def ivf_flat(faiss, d, nlist, metric, xt):
    quantizer = faiss.IndexFlatIP(d) if metric == faiss.METRIC_INNER_PRODUCT else faiss.IndexFlatL2(d)
    index = faiss.IndexIVFFlat(quantizer, d, nlist, metric)
    index.train(xt)
    return index


def ivf_pq(faiss, d, nlist, m, nbits, metric, xt, by_residual=True):
    quantizer = faiss.IndexFlatIP(d) if metric == faiss.METRIC_INNER_PRODUCT else faiss.IndexFlatL2(d)
    index = faiss.IndexIVFPQ(quantizer, d, nlist, m, nbits, metric)
    index.by_residual = by_residual
    index.train(xt)
    return index


def factory(faiss, d, desc, metric=None):
    """index_factory(d, desc), trained quickly: OPQ for 5 iterations (not 50),
    and an IVF-PQ without polysemous training (minutes on a busy machine)."""
    index = faiss.index_factory(d, desc, faiss.METRIC_L2 if metric is None else metric)
    if desc.startswith("OPQ"):
        faiss.downcast_VectorTransform(index.chain.at(0)).niter = 5
    ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    if isinstance(ivf, faiss.IndexIVFPQ):
        ivf.do_polysemous_training = False
    return index


def gen_flat(faiss, out):
    d, n = 20, 1000
    xb, q = rand(1, n, d), rand(2, NQ, d)
    for name, index in (("flat_l2", faiss.IndexFlatL2(d)), ("flat_ip", faiss.IndexFlatIP(d))):
        index.add(xb)
        save(faiss, out, name, index, q)
    ids = (5000 + 3 * np.random.default_rng(3).permutation(n)).astype(np.int64)
    index = faiss.IndexIDMap(faiss.IndexFlatL2(d))
    index.add_with_ids(xb, ids)
    save(faiss, out, "idmap_flat", index, q)


def gen_ivf_flat(faiss, out):
    d, n = 32, 3000
    xb, q = clustered(4, n, d), clustered(4, NQ, d)[::-1].copy() + rand(5, NQ, d) * 0.1
    index = ivf_flat(faiss, d, 16, faiss.METRIC_L2, xb)
    index.add(xb)
    D, I = save(faiss, out, "ivfflat_l2", index, q)
    save_legacy(faiss, out, "legacy_ivfflat", index, "IvFl", q, D, I)
    index = ivf_flat(faiss, d, 16, faiss.METRIC_INNER_PRODUCT, xb)
    index.add_with_ids(xb, np.arange(n, dtype=np.int64) * 7 + 11)
    save(faiss, out, "ivfflat_ip", index, q)
    index = ivf_flat(faiss, d, 16, faiss.METRIC_L2, xb)
    index.add(xb[:5])  # most lists empty: sparse list sizes
    save(faiss, out, "ivfflat_sparse", index, q)
    index = faiss.IndexIDMap2(ivf_flat(faiss, d, 16, faiss.METRIC_L2, xb))
    index.add_with_ids(xb, (np.arange(n, dtype=np.int64)[::-1] * 2 + 100).copy())
    save(faiss, out, "idmap2_ivfflat", index, q)
    index = ivf_flat(faiss, d, 16, faiss.METRIC_L2, xb)
    index.add(xb)
    index.nprobe = 6  # saved in the file: the default of Faiss's searches of it
    save(faiss, out, "ivfflat_nprobe6", index, q, own_nprobe=True)


def gen_ivf_pq(faiss, out):
    d, n = 32, 4000
    xb, q = clustered(6, n, d), clustered(6, NQ, d)[::-1].copy() + rand(7, NQ, d) * 0.1
    index = ivf_pq(faiss, d, 16, 8, 8, faiss.METRIC_L2, xb)
    index.add(xb)
    D, I = save(faiss, out, "ivfpq_l2", index, q)
    save_legacy(faiss, out, "legacy_ivfpq", index, "IvPQ", q, D, I)
    index = ivf_pq(faiss, d, 16, 8, 8, faiss.METRIC_INNER_PRODUCT, xb)
    index.add(xb)
    save(faiss, out, "ivfpq_ip", index, q)
    index = ivf_pq(faiss, d, 16, 8, 4, faiss.METRIC_L2, xb)  # 4-bit codes, packed two a byte
    index.add(xb)
    save(faiss, out, "ivfpq4_l2", index, q)
    index = ivf_pq(faiss, d, 16, 8, 8, faiss.METRIC_L2, xb, by_residual=False)
    index.add(xb)
    save(faiss, out, "ivfpq_noresidual", index, q)
    index = ivf_pq(faiss, d, 16, 8, 8, faiss.METRIC_INNER_PRODUCT, xb, by_residual=False)
    index.add(xb)
    save(faiss, out, "ivfpq_noresidual_ip", index, q)
    index = factory(faiss, d, "OPQ8,IVF16,PQ8")  # an IndexPreTransform
    index.train(xb)
    index.add(xb)
    save(faiss, out, "opq_ivfpq", index, q)
    index = faiss.IndexIDMap2(factory(faiss, d, "OPQ8_16,IVF16,PQ8x4",
                                          faiss.METRIC_INNER_PRODUCT))
    index.train(xb)
    index.add_with_ids(xb, np.arange(n, dtype=np.int64) * 3 + 1)
    save(faiss, out, "idmap_opq_ivfpq4_ip", index, q)


def gen_hnsw(faiss, out):
    """IndexHNSWFlat loads as Flat: the reference is exact search of its vectors."""
    d, n = 16, 800
    xb, q = rand(12, n, d), rand(13, NQ, d)
    for name, metric in (("hnsw_l2", faiss.METRIC_L2), ("hnsw_ip", faiss.METRIC_INNER_PRODUCT)):
        index = faiss.IndexHNSWFlat(d, 8, metric)
        index.add(xb)
        faiss.write_index(index, f"{out}/{name}.faiss")
        flat = faiss.IndexFlat(d, metric)
        flat.add(xb)
        D, I = flat.search(q, K)
        np.save(f"{out}/{name}.q.npy", q)
        np.save(f"{out}/{name}.D.npy", D.astype(np.float32))
        np.save(f"{out}/{name}.I.npy", I.astype(np.int64))


def sq_types(faiss):
    """(name, Faiss type) of the scalar quantizers simil reads that this Faiss has."""
    sq = faiss.ScalarQuantizer
    types = [("sq8", sq.QT_8bit), ("sqfp16", sq.QT_fp16)]
    if hasattr(sq, "QT_bf16"):  # Faiss >= 1.9
        types.append(("sqbf16", sq.QT_bf16))
    return types


def ivf_sq(faiss, d, nlist, qtype, metric, xt, by_residual=True):
    quantizer = faiss.IndexFlatIP(d) if metric == faiss.METRIC_INNER_PRODUCT else faiss.IndexFlatL2(d)
    index = faiss.IndexIVFScalarQuantizer(quantizer, d, nlist, qtype, metric, by_residual)
    index.train(xt)
    return index


def gen_sq(faiss, out):
    """NAME_l2 and NAME_ip for each type: IndexScalarQuantizer (NAME),
    IndexIVFScalarQuantizer (ivfNAME, 16 lists) and the same with
    by_residual = false (ivfNAME_noresidual); bf16 only where Faiss has it."""
    d, n = 24, 3000
    xb, q = clustered(12, n, d), clustered(12, NQ, d)[::-1].copy() + rand(13, NQ, d) * 0.1
    for name, qtype in sq_types(faiss):
        for metric, m in (("l2", faiss.METRIC_L2), ("ip", faiss.METRIC_INNER_PRODUCT)):
            index = faiss.IndexScalarQuantizer(d, qtype, m)
            index.train(xb)
            index.add(xb)
            save(faiss, out, f"{name}_{metric}", index, q)
            index = ivf_sq(faiss, d, 16, qtype, m, xb)
            index.add(xb)
            save(faiss, out, f"ivf{name}_{metric}", index, q)
            index = ivf_sq(faiss, d, 16, qtype, m, xb, by_residual=False)
            index.add(xb)
            save(faiss, out, f"ivf{name}_noresidual_{metric}", index, q)
    index = faiss.IndexIDMap(faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_8bit))
    index.train(xb)
    index.add_with_ids(xb, (np.arange(n, dtype=np.int64) * 5 + 3).copy())
    save(faiss, out, "idmap_sq8", index, q)


def gen_unsupported(faiss, out):
    d = 16
    xb = rand(8, 600, d)
    index = faiss.IndexHNSWFlat(d, 8)
    index.add(xb[:50])
    faiss.write_index(index, f"{out}/unsupported_hnsw.faiss")
    index = faiss.IndexPQ(d, 4, 8)
    index.train(xb)
    faiss.write_index(index, f"{out}/unsupported_pq.faiss")
    index = ivf_pq(faiss, d, 4, 4, 2, faiss.METRIC_L2, xb)
    index.add(xb[:20])
    faiss.write_index(index, f"{out}/unsupported_nbits2.faiss")
    faiss.write_index(faiss.IndexIDMap(faiss.IndexHNSWFlat(d, 8)), f"{out}/idmap_hnsw_empty.faiss")
    index = faiss.IndexHNSWPQ(d, 4, 8)
    index.train(xb)
    index.add(xb[:30])
    faiss.write_index(index, f"{out}/unsupported_hnswpq.faiss")
    index = factory(faiss, d, "PCA8,IVF4,PQ4")
    index.train(xb)
    faiss.write_index(index, f"{out}/unsupported_pca.faiss")
    index = factory(faiss, d, "OPQ4,IVF4,Flat")
    index.train(xb)
    faiss.write_index(index, f"{out}/unsupported_opq_ivfflat.faiss")
    index = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_4bit)
    index.train(xb)
    index.add(xb[:20])
    faiss.write_index(index, f"{out}/unsupported_sq4.faiss")


def gen_tiny(faiss, out):
    """Small files of every kind, for cutting at every length."""
    xb = rand(9, 300, 4)
    index = faiss.IndexFlatL2(3)
    index.add(rand(10, 5, 3))
    faiss.write_index(index, f"{out}/tiny_flat.faiss")
    index = faiss.IndexIDMap2(faiss.IndexFlatIP(3))
    index.add_with_ids(rand(11, 4, 3), np.array([9, 4, 7, 1], dtype=np.int64))
    faiss.write_index(index, f"{out}/tiny_idmap.faiss")
    index = ivf_flat(faiss, 4, 4, faiss.METRIC_L2, xb)
    index.add(xb[:12])
    faiss.write_index(index, f"{out}/tiny_ivfflat.faiss")
    with open(f"{out}/tiny_legacy_ivfflat.faiss", "wb") as f:
        f.write(legacy(faiss, index, "IvFl"))
    index = ivf_flat(faiss, 4, 8, faiss.METRIC_L2, xb)
    index.add(xb[:2])
    faiss.write_index(index, f"{out}/tiny_ivfflat_sparse.faiss")
    index = ivf_pq(faiss, 4, 2, 2, 8, faiss.METRIC_L2, xb)
    index.add(xb[:10])
    faiss.write_index(index, f"{out}/tiny_ivfpq.faiss")
    with open(f"{out}/tiny_legacy_ivfpq.faiss", "wb") as f:
        f.write(legacy(faiss, index, "IvPQ"))
    index = faiss.IndexScalarQuantizer(4, faiss.ScalarQuantizer.QT_8bit)
    index.train(xb)
    index.add(xb[:6])
    faiss.write_index(index, f"{out}/tiny_sq8.faiss")
    index = ivf_sq(faiss, 4, 2, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_L2, xb)
    index.add(xb[:6])
    faiss.write_index(index, f"{out}/tiny_ivfsqfp16.faiss")
    index = ivf_sq(faiss, 4, 2, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT, xb,
                   by_residual=False)
    index.add(xb[:6])
    faiss.write_index(index, f"{out}/tiny_ivfsq8_noresidual.faiss")
    index = faiss.IndexHNSWFlat(3, 4)
    index.add(rand(14, 6, 3))
    faiss.write_index(index, f"{out}/tiny_hnsw.faiss")
    index = factory(faiss, 4, "OPQ2,IVF2,PQ2x4")
    index.train(xb)
    index.add(xb[:7])
    faiss.write_index(index, f"{out}/tiny_opq.faiss")


def main(argv):
    import faiss  # here, so that "check" can fail cleanly
    if argv[1] == "check":
        return 0
    out = argv[2]
    if argv[1] == "gen":
        faiss.omp_set_num_threads(1)  # the same k-means, and so the same files, every run
        gen_flat(faiss, out)
        gen_ivf_flat(faiss, out)
        gen_ivf_pq(faiss, out)
        gen_sq(faiss, out)
        gen_hnsw(faiss, out)
        gen_unsupported(faiss, out)
        gen_tiny(faiss, out)
        return 0
    if argv[1] == "search":
        name, k, nprobe = argv[3], int(argv[4]), int(argv[5])
        index = faiss.read_index(f"{out}/{name}.faiss")
        q = np.load(f"{out}/{name}.q.npy")
        D, I = search(faiss, index, q, k, nprobe)
        np.save(f"{out}/{name}.D.npy", D.astype(np.float32))
        np.save(f"{out}/{name}.I.npy", I.astype(np.int64))
        with open(f"{out}/{name}.type.txt", "w") as f:
            f.write(type(index).__name__)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
