/* backend.h: the one internal contract between index types and the places
 * their data lives (the CPU, a GPU).
 *
 * Each backend fills in an sml_backend_ops table.  An index keeps its arrays
 * in the backend's memory ("backend memory": host memory for the CPU, device
 * memory for a GPU) and calls the backend for everything that touches them.
 * The CPU backend is also the oracle the GPU backend is tested against.
 *
 * Pointers marked "host" are always in host memory; pointers marked "mem" are
 * backend memory; pointers marked "any" may be host or, for a GPU backend,
 * device memory (the backend finds out which). */
#ifndef SML_BACKEND_H
#define SML_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/id_filter.h"
#include "simil/index.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sml_backend sml_backend;

/* Lanes of a copier (pinned_alloc and the copier_* ops below). */
enum { SML_COPIER_LANES = 8 };

/* Exact k-NN of queries against a stored matrix.
 * Keys are L2: ||q - y||^2 (clamped at 0), IP: <q, y>.  Rows of the result are
 * ordered by key (ascending for L2, descending for IP), then by label. */
typedef struct sml_knn_args {
    const float *base;        /* mem: n x dim */
    const float *base_norms;  /* mem: n squared norms (L2 only; may be NULL for IP) */
    const int64_t *base_ids;  /* mem: n labels reported for the rows */
    int64_t n;
    int64_t dim;
    const float *queries;     /* any: nq x dim */
    int64_t nq;
    int64_t k;                /* >= 1; ranks past n get label -1, key +-inf */
    simil_metric metric;      /* SIMIL_METRIC_L2 or SIMIL_METRIC_IP */
    float *distances;         /* any (same kind as queries): nq x k */
    int64_t *labels;          /* any (same kind as queries): nq x k */
    int threads;              /* CPU threads, 0 = all */
    const void *base_shadow;  /* the backend's shadow of base (see shadow_sync), or NULL */
    const sml_id_filter *filter;  /* host: only rows whose label it allows are ranked; NULL:
                                     every row (core/id_filter.h) */
    /* Nonzero: the caller knows that queries (outputs: distances and labels)
     * are host memory, and a GPU backend need not ask the driver (a call per
     * pointer, which costs as a launch does when threads search at once);
     * 0: ask.  index.c asks once per search and passes the answers down. */
    int queries_host;
    int outputs_host;
} sml_knn_args;

/* The search of a stored base (base, norms, ids, shadow, n, dim and metric
 * from `stored`) by nq queries for their k nearest, into distances and labels. */
static inline sml_knn_args sml_knn_of(sml_knn_args stored, const float *queries, int64_t nq,
                                      int64_t k, float *distances, int64_t *labels)
{
    stored.queries = queries;
    stored.nq = nq;
    stored.k = k;
    stored.distances = distances;
    stored.labels = labels;
    return stored;
}

/* Join of inverted lists (algo/knn_join.h): the rows of one stored matrix,
 * grouped by list, are searched among the rows of lists of the same matrix.
 * The searched rows come in blocks (parts of lists): for each block b in
 * [block_begin, block_end) and each of its rows i, the k best rows among those
 * of the candidate lists cand_lists[cand_offset[b] .. cand_offset[b + 1])
 * (the block's own list normally among them, and so row i itself), keys and
 * order as in sml_knn_args, into row i of distances and labels.  Ranks past
 * the candidates get -1, +-inf. */
typedef struct sml_join_args {
    const float *x;              /* mem: n x dim; list l holds rows
                                    [list_offset[l], list_offset[l + 1]) */
    const float *norms;          /* mem: n squared norms (L2 only; NULL for IP) */
    const int64_t *ids;          /* mem: n labels reported for the rows */
    const void *shadow;          /* the backend's shadow of x (shadow_sync), or NULL */
    int64_t n;
    int64_t dim;
    const int64_t *list_offset;  /* host: nlist + 1 */
    int64_t nlist;
    const int64_t *block_offset; /* host: nblock + 1; block b is rows
                                    [block_offset[b], block_offset[b + 1]) */
    int64_t nblock;
    const int64_t *cand_offset;  /* host: nblock + 1 */
    const int64_t *cand_lists;   /* host: list numbers, no repeats within a block's */
    int64_t block_begin;
    int64_t block_end;
    int64_t k;                   /* >= 1 */
    simil_metric metric;         /* L2 or IP */
    float *distances;            /* host: n x k (only the rows of the blocks joined) */
    int64_t *labels;             /* host: n x k */
    int threads;                 /* CPU threads, 0 = all */
} sml_join_args;

/* ---- Scans of inverted lists ----
 *
 * Every IVF scan (IVF-Flat, IVF-PQ, XFBQ) takes an sml_ivf_scan_args: the
 * queries, the lists as one view (sml_ivf_lists), which lists each query
 * probes (sml_ivf_probes), k and the outputs.  A code type with parameters of
 * its own wraps it (sml_ivf_pq_scan_args, sml_xfbq_scan_args) and gets an op
 * of its own in sml_backend_ops.  A new code type (a scalar quantizer, say)
 * is one more such wrapper and op; the backends' shared parts (cpu_ivf.h,
 * cuda/cuda_ivf.cuh) find the probes, plan and select for it. */

/* The lists of an inverted file as a scan reads them (index/ivf.h): list l
 * holds size[l] rows from row offset[l]; row r's code is code_stride bytes
 * at codes + r * code_stride and its label ids[r].  Flat XFBQ is one list of
 * every row. */
typedef struct sml_ivf_lists {
    const int64_t *offset;       /* host: per list, its first row */
    const int64_t *size;         /* host: per list, its rows */
    const int64_t *layout;       /* mem, or NULL: offset then size, as above, for a
                                    scan that reads them on the device (no copy) */
    int64_t nlist;
    const void *codes;           /* mem */
    size_t code_stride;          /* bytes per row, a multiple of 4 */
    const int64_t *ids;          /* mem: per row */
} sml_ivf_lists;

/* The lists each query scans: nprobe per query, given or found. */
typedef struct sml_ivf_probes {
    int64_t nprobe;              /* 1 to nlist */
    const int64_t *lists;        /* host: nq x nprobe list numbers, nearest first, -1
                                    for none; or NULL: the backend finds them */
    const float *keys;           /* host, beside lists: nq x nprobe coarse keys
                                    (||x - c||^2 for L2, -<x, c> for IP), or NULL
                                    where the code type needs none */
    /* Without lists: the coarse quantizer as a k-NN search (base, base_norms,
     * base_ids, base_shadow, n, dim, metric; the backend sets the rest).  The
     * probes are then the nprobe nearest centroids, found where the scan
     * runs: on a GPU they need not travel through the host. */
    sml_knn_args coarse_search;
} sml_ivf_probes;

/* For each query, the k best rows among the lists of its probes.  Keys as
 * in sml_knn_args; ranks past the candidates get -1 and +-inf. */
typedef struct sml_ivf_scan_args {
    const float *queries;        /* any (XFBQ: mem): nq x dim, prepared */
    int64_t nq;
    int64_t dim;
    sml_ivf_lists lists;
    sml_ivf_probes probes;
    int64_t k;                   /* >= 1 */
    simil_metric metric;         /* L2 or IP */
    float *distances;            /* host: nq x k */
    int64_t *labels;             /* host: nq x k */
    int threads;                 /* CPU threads, 0 = all */
    const sml_id_filter *filter; /* host: only rows whose label it allows are ranked (the
                                    coarse search is not filtered); NULL: every row */
    int queries_host;            /* nonzero: queries are known to be host memory (as in
                                    sml_knn_args); 0: ask */
} sml_ivf_scan_args;

/* 1 where args keep the promises above; every scan asserts it. */
static inline int sml_ivf_scan_args_ok(const sml_ivf_scan_args *a)
{
    if (a->nq < 0 || a->dim < 1 || a->k < 1 || a->lists.nlist < 1) return 0;
    if (a->lists.code_stride % 4 != 0) return 0;
    if (a->probes.nprobe < 1 || a->probes.nprobe > a->lists.nlist) return 0;
    if (a->metric != SIMIL_METRIC_L2 && a->metric != SIMIL_METRIC_IP) return 0;
    if (a->probes.lists == NULL && a->probes.coarse_search.n != a->lists.nlist) return 0;
    for (int64_t l = 0; l < a->lists.nlist; l++)
        if (a->lists.offset[l] < 0 || a->lists.size[l] < 0) return 0;
    return 1;
}

/* The coarse keys of probes that coarse_search found: its distances are the
 * keys for L2; for IP it returns similarities <x, c>, whose keys are -<x, c>. */
static inline void sml_ivf_keys_of_knn(simil_metric metric, float *keys, size_t n)
{
    if (metric != SIMIL_METRIC_L2)
        for (size_t i = 0; i < n; i++) keys[i] = -keys[i];
}

/* IVF-PQ (the GPU paper's IVFADC): each row's code is m bytes, then padding
 * (and, with term1_at, its term 1).  Needs the probes' coarse keys. */
typedef struct sml_ivf_pq_scan_args {
    sml_ivf_scan_args scan;
    int64_t m;
    int64_t ksub;
    int64_t dsub;
    const float *codebooks;      /* mem: m x ksub x dsub */
    const float *codebooks_by_codeword; /* mem: the same, ksub x m x dsub */
    const float *coarse;         /* mem: nlist x dim coarse centroids */
    size_t term1_at;             /* L2: byte offset in each row of its term 1 (a
                                    float), for tables of term 3 alone; or 0 to
                                    compute each (query, list) table from the
                                    residual x - c */
    int lut_fp16;                /* GPU: lookup tables in fp16 shared memory */
    int codes_of_vectors;        /* 1: the codes are of the vectors, not of their
                                    residuals (Faiss's by_residual = false): coarse
                                    holds zeros and term1_at is 0, so L2 takes the
                                    residual tables of x - 0; an IP key is then its
                                    m entries alone, without the probe's coarse key
                                    (only where ops->ivf_pq_ip_vector_codes) */
} sml_ivf_pq_scan_args;

/* IVF-PQ codes: the residual of each vector (x minus the coarse centroid of
 * its list) coded with the PQ codebooks. */
typedef struct sml_pq_encode_args {
    const float *x;              /* host or mem: n x dim */
    int64_t n;
    int64_t dim;
    const int64_t *lists;        /* host: n lists */
    const float *coarse;         /* mem: nlist x dim */
    const float *codebooks;      /* mem: m x ksub x dsub */
    int64_t m;
    int64_t ksub;
    int64_t dsub;
    uint8_t *codes;              /* host: n x code_size bytes (padding zeroed) */
    size_t code_size;
} sml_pq_encode_args;

static inline int sml_ivf_pq_scan_args_ok(const sml_ivf_pq_scan_args *a)
{
    return sml_ivf_scan_args_ok(&a->scan) && (a->scan.probes.lists == NULL ||
                                               a->scan.probes.keys != NULL) &&
           a->m >= 1 && a->m * a->dsub == a->scan.dim &&
           a->ksub >= 1 && a->ksub <= 256 && a->scan.lists.code_stride >= (size_t)a->m &&
           (a->term1_at == 0 || a->term1_at + sizeof(float) <= a->scan.lists.code_stride) &&
           (!a->codes_of_vectors || a->term1_at == 0);
}

/* Scalar-quantizer scan (core/sq_code.h): each row's code is dim
 * components of `type` (then padding); its key is the exact key of the query
 * and the decoded row, plus, where coarse is set (codes of residuals), the
 * centroid of the row's list.  Flat SQ is one list of every row.  The
 * probes' coarse keys are not used. */
typedef struct sml_sq_scan_args {
    sml_ivf_scan_args scan;
    int type;                    /* an sml_sq_type */
    const float *vmin;           /* mem: dim (SQ8), else NULL */
    const float *vdiff;          /* mem: dim (SQ8), else NULL */
    const float *coarse;         /* mem: nlist x dim, added to each decoded row; or NULL */
} sml_sq_scan_args;

/* XFBQ scan (the XFBQ paper, section 4; docs/papers.md) over lists of
 * rows (src/algo/xfbq.h): flat XFBQ is one list of every row, IVF-XFBQ the
 * lists of the inverted file.  A row is a code (scan.lists.codes, a multiple
 * of 16 bytes apart) and a float vector (vectors, at a stride of its own;
 * side by side in the IVF arena, apart in flat XFBQ).  For each query:
 *   1. D of every row of its probed lists, from the codes (XOR, popcount);
 *   2. a histogram of min(D >> bin_shift, nbins - 1) gives b, the bin of the
 *      K-th smallest D (K = min(k, rows scanned));
 *   3. the candidates are the rows with D <= ((c + 1) << bin_shift) - 1,
 *      c = min(b + window, nbins - 1), window = sml_xfbq_window_bins(extra_bins,
 *      spread_q16, the bins of its smallest and of its median D) (core/xfbq_code.h;
 *      the median: the ceil(scanned / 2)-th smallest);
 *   4. their exact keys from the rows' floats (L2: ||x - y||^2, IP: <x, y>)
 *      give the k results, ordered as in sml_knn_args; ranks past the
 *      candidates get -1 and +-inf.
 * The probes' coarse keys are not used. */
typedef struct sml_xfbq_scan_args {
    sml_ivf_scan_args scan;      /* queries in mem (what re-ranking uses); metric
                                    of re-ranking */
    const uint64_t *query_codes; /* mem: nq x (query_bits x words); NULL: the
                                    backend codes the queries itself (a GPU
                                    backend only), with these two and rotation
                                    as xfbq_encode does */
    const float *rotation;       /* mem: dim x dim (RR), or NULL; with
                                    query_codes NULL the backend codes the
                                    queries rotated by it, each component as
                                    core/xfbq_code.h's
                                    sml_xfbq_rotated_component */
    float alpha;
    int normalize;
    int query_bits;
    int base_bits;
    int64_t words;               /* 64-bit words per bit plane */
    const float *vectors;        /* mem: row r's dim floats at (const char *)vectors +
                                    r * vector_stride */
    size_t vector_stride;        /* bytes, a multiple of 4 */
    const void *shadow;          /* the backend's shadow of vectors (shadow_sync; rows
                                    contiguous), or NULL: with it the candidates are
                                    re-ranked from it first, and from vectors only
                                    those whose exact key could rank in the top k */
    int bin_shift;
    int64_t nbins;               /* <= 4096 */
    int64_t extra_bins;
    uint32_t spread_q16;         /* <= 65536; 0: the window is extra_bins alone */
} sml_xfbq_scan_args;

static inline int sml_xfbq_scan_args_ok(const sml_xfbq_scan_args *a)
{
    return sml_ivf_scan_args_ok(&a->scan) && a->scan.lists.code_stride % 16 == 0 &&
           a->vector_stride % 4 == 0 && a->query_bits >= 1 && a->query_bits <= 8 &&
           a->base_bits >= 1 && a->base_bits <= 8 && a->words * 64 >= a->scan.dim &&
           a->nbins >= 1 && a->nbins <= 4096 && a->bin_shift >= 0 && a->extra_bins >= 0 &&
           a->spread_q16 <= 65536;
}

/* XFBQ codes of n vectors with `bits` sign planes each, bit for bit those of
 * the host encoder (core/xfbq_code.h, algo/xfbq.h). */
typedef struct sml_xfbq_encode_args {
    const float *x;              /* mem: n x dim */
    int64_t n;
    int64_t dim;
    int bits;
    int64_t words;               /* 64-bit words per bit plane */
    float alpha;
    int normalize;               /* scale each row by alpha / ||x||, not alpha */
    uint64_t *codes;             /* mem: n x (bits x words) */
} sml_xfbq_encode_args;

typedef struct sml_backend_ops {
    void (*close)(sml_backend *b);

    /* Backend memory.  alloc returns SIMIL_ERR_OUT_OF_MEMORY when it runs out. */
    simil_status (*mem_alloc)(sml_backend *b, size_t bytes, void **mem);
    void (*mem_free)(sml_backend *b, void *mem);
    simil_status (*mem_upload)(sml_backend *b, void *mem, const void *host, size_t bytes);
    simil_status (*mem_download)(sml_backend *b, void *host, const void *mem, size_t bytes);
    simil_status (*mem_copy)(sml_backend *b, void *dst_mem, const void *src_mem, size_t bytes);
    /* For i < n: dst row d(i) = src row s(i), where d(i) = dst_rows[i] and
     * s(i) = src_rows[i], or i where the array is NULL (arrays: host).  Rows
     * are row_bytes wide, a multiple of 4; dst and src do not overlap. */
    simil_status (*mem_move_rows)(sml_backend *b, void *dst_mem, const int64_t *dst_rows,
                                  const void *src_mem, const int64_t *src_rows,
                                  size_t row_bytes, int64_t n);

    /* norms[i] = ||x_i||^2 for n rows of x (both mem). */
    simil_status (*row_norms)(sml_backend *b, int64_t n, int64_t dim, const float *x,
                              float *norms);

    simil_status (*knn)(sml_backend *b, const sml_knn_args *args);

    /* k-NN graphs: each row of a list against the rows of its candidate
     * lists (sml_join_args). */
    simil_status (*knn_join)(sml_backend *b, const sml_join_args *args);

    /* IVF-Flat: exact distances to every row of the probed lists. */
    simil_status (*ivf_flat_scan)(sml_backend *b, const sml_ivf_scan_args *args);
    /* IVF-PQ: asymmetric distances through lookup tables (the GPU paper's
     * IVFADC); with pq_term1_at (L2) or for IP, a query's table is term 3
     * and a row's key is term 2 (the coarse key) + its term 1 + m entries. */
    simil_status (*ivf_pq_scan)(sml_backend *b, const sml_ivf_pq_scan_args *args);
    /* 1 where ivf_pq_scan keys IP rows with codes_of_vectors without the
     * coarse key (the CPU); 0 (the CUDA backend, whose scans always add it):
     * the index layer refuses such indexes on this backend. */
    int ivf_pq_ip_vector_codes;
    simil_status (*pq_encode)(sml_backend *b, const sml_pq_encode_args *args);
    /* Scalar quantizers: keys of the decoded rows (sml_sq_scan_args). */
    simil_status (*sq_scan)(sml_backend *b, const sml_sq_scan_args *args);
    /* XFBQ: histogram selection and exact re-ranking (sml_xfbq_scan_args). */
    simil_status (*xfbq_scan)(sml_backend *b, const sml_xfbq_scan_args *args);
    /* Optional, NULL on the CPU: XFBQ codes of vectors already in backend
     * memory.  A search does not call it (a GPU's scan codes its staged
     * queries with the same kernel); tests compare it with the host's. */
    simil_status (*xfbq_encode)(sml_backend *b, const sml_xfbq_encode_args *args);

    /* The k smallest (largest when largest != 0) values of each row of a
     * rows x cols matrix, sorted, with their column indices; past cols the
     * slots get +-inf and -1.  Pointers: any (all of one kind). */
    simil_status (*select_k)(sml_backend *b, int64_t rows, int64_t cols, const float *values,
                             int64_t k, int largest, float *out_values, int64_t *out_indices);

    /* k-means update: sums (host, k x dim) = for each cluster c, the sum of the
     * rows i of x (mem, n x dim) with labels[i] == c (labels: host, in
     * [0, k)), added in row order so the result does not depend on threads;
     * counts (host, k) = the rows per cluster. */
    simil_status (*cluster_sums)(sml_backend *b, int64_t n, int64_t dim, const float *x,
                                 const int64_t *labels, int64_t k, float *sums, int64_t *counts);

    /* Optional, NULL where a backend has none: a private copy of a stored
     * matrix that makes knn faster (the CUDA backend keeps scaled fp16 rows).
     * shadow_sync brings *shadow (NULL at first) up to date with rows [0, n)
     * of base (mem), of which rows [0, have) are unchanged since the last
     * sync.  On failure *shadow is left as it was.  knn receives the shadow
     * through sml_knn_args.base_shadow (XFBQ's scan through its shadow); a
     * row store keeps one of a column (row_store.h). */
    simil_status (*shadow_sync)(sml_backend *b, void **shadow, const float *base, int64_t have,
                                int64_t n, int64_t dim, simil_metric metric);
    void (*shadow_free)(sml_backend *b, void *shadow);

    /* Optional, NULL on the CPU (whose backend memory is host memory):
     * streaming host data into backend memory behind other work
     * (index/stream_search.c).  pinned_alloc gives host memory the device
     * copies from directly; host_pinned says whether [host, host + bytes)
     * already is such memory (the caller's cudaMallocHost or
     * cudaHostRegister), which can then be uploaded without a staging copy.
     * A copier has SML_COPIER_LANES lanes, all on one stream, in order:
     * copier_upload queues a copy from pinned memory into backend memory and
     * returns, and marks the lane (bytes 0: only marks it); copier_wait
     * blocks until everything queued up to the lane's last mark has landed.
     * The copier calls do not take the device lock, so one thread may upload
     * while another runs knn on the same backend. */
    simil_status (*pinned_alloc)(sml_backend *b, size_t bytes, void **host);
    void (*pinned_free)(sml_backend *b, void *host);
    int (*host_pinned)(sml_backend *b, const void *host, size_t bytes);
    simil_status (*copier_open)(sml_backend *b, void **copier);
    simil_status (*copier_upload)(sml_backend *b, void *copier, int lane, void *mem,
                                  const void *host, size_t bytes);
    simil_status (*copier_wait)(sml_backend *b, void *copier, int lane);
    void (*copier_close)(sml_backend *b, void *copier);
    /* Optional: queue on the copier, behind everything queued before, a
     * check of the n rows of dim at mem (backend memory) as
     * sml_vectors_check makes it (NaN, Inf, and with bound_norms a squared
     * norm above SML_NORM2_BOUND, in double), and mark the lane;
     * copier_checked waits for the lane and gives the first such row, or -1.
     * Checking rows where they land spares the host a pass over them, which
     * takes longer than their copy (docs/benchmarks.md). */
    simil_status (*copier_check)(sml_backend *b, void *copier, int lane, const float *mem,
                                 int64_t n, int64_t dim, int bound_norms);
    simil_status (*copier_checked)(sml_backend *b, void *copier, int lane, int64_t *bad);
    /* Optional: overwrite a shadow made by shadow_sync (with room for n rows
     * of dim) with rows [0, n) of base, in place.  Unlike shadow_sync it
     * allocates and frees nothing, so it does not wait for copies in flight;
     * on failure the shadow holds garbage and must be freed. */
    simil_status (*shadow_refill)(sml_backend *b, void *shadow, const float *base, int64_t n,
                                  int64_t dim);

    /* Optional: a generator of docs/datasets.md that writes backend memory,
     * bit for bit what simil_generate gives.  generator_open prepares kind
     * (checked by the caller) for dimension dim and seed; generator_fill
     * writes rows [first, first + n) to mem (n x dim floats). */
    simil_status (*generator_open)(sml_backend *b, const char *kind, int64_t dim, uint64_t seed,
                                   void **gen);
    simil_status (*generator_fill)(sml_backend *b, void *gen, int64_t first, int64_t n,
                                   float *mem);
    void (*generator_close)(sml_backend *b, void *gen);
} sml_backend_ops;

struct sml_backend {
    const sml_backend_ops *ops;
    int gpu;          /* GPU ordinal, or -1 for the CPU */
    char name[128];   /* for simil_backend_name() */
    void *impl;
    /* Searches of at most batch_max_queries queries, for at most batch_max_k
     * neighbours, give each query the results it gets alone, whatever the
     * other queries: the searches of several callers may then run as one
     * (index/search_batch.c).  Beyond, a method may change with the batch
     * (the CPU's exact search leaves its direct loops; a GEMM's rounding may
     * depend on the rows beside a query). */
    int64_t batch_max_queries;
    int64_t batch_max_k;
    /* Batches that may run at once, from several threads, without waiting
     * for each other (the GPU's lanes; 1 on the CPU, whose every batch has
     * all the cores): the batcher starts the next batch while up to
     * batch_lanes - 1 others run. */
    int batch_lanes;
};

/* ---- The backends' entry points ----
 * What code above the backends (src/index, src/algo) may call besides the ops
 * table: opening a backend, and asking where a caller's memory lives.  The
 * CPU backend implements its part in src/cpu, the CUDA backend its part in
 * src/cuda (cuda_stub.c in a build without CUDA); their own headers
 * (cpu/..., cuda/...) are for the backends and their tests alone. */

/* Open the CPU backend (never fails but for memory). */
simil_status sml_cpu_backend_open(sml_backend **backend);

/* Open GPU gpu.  SIMIL_ERR_NO_DEVICE if it does not exist or CUDA is absent. */
simil_status sml_cuda_backend_open(int gpu, sml_backend **backend);

/* GPUs usable by this process: 0 without CUDA, driver or device. */
int sml_cuda_device_count(void);

/* Bytes free and in total on GPU gpu (cudaMemGetInfo: what every process
 * holds counts).  SIMIL_ERR_NO_DEVICE if it does not exist or CUDA is absent. */
simil_status sml_cuda_memory_info(int gpu, size_t *free_bytes, size_t *total_bytes);

/* 1 when built with CUDA. */
int sml_cuda_built(void);

/* 1 if p points to GPU memory (device or managed); 0 for host memory and in
 * builds without CUDA. */
int sml_cuda_pointer_is_device(const void *p);

/* The GPU that device pointer p belongs to (0 when unknown). */
int sml_cuda_pointer_device(const void *p);

/* Close a backend opened by one of the functions above.  NULL is allowed. */
void sml_backend_close(sml_backend *backend);

/* *fresh = a new block of bytes of backend memory holding the first keep bytes
 * of mem, which is left as it is (growing an array is clone, fill, then free
 * the old block once nothing else can fail).  On failure *fresh is NULL. */
simil_status sml_mem_clone(sml_backend *b, void **fresh, const void *mem, size_t keep,
                           size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
