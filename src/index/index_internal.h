/* index_internal.h: what every index type shares.
 *
 * simil_index is a handle over one index type's vtable.  index.c checks the
 * caller's arguments, prepares vectors (finite, normalized for cosine) and
 * keeps the counters; a type's functions receive only valid arguments:
 *   - vectors in host memory, already normalized for cosine;
 *   - explicit ids (index.c numbers them when the caller gives none);
 *   - metric L2 or IP (cosine is IP on normalized vectors);
 * and must leave the index unchanged when they fail. */
#ifndef SML_INDEX_INTERNAL_H
#define SML_INDEX_INTERNAL_H

#include "core/backend.h"
#include "core/file_io.h"
#include "core/section_mem.h"
#include "index/index_spec.h"
#include "simil/index.h"

/* The settings of a search, opaque to users (simil/search_params.h).  The
 * table in search_params.c names each field, with its range and default;
 * values are checked when they are set, so index types read them as they
 * are.  A new setting is a field here and a row there. */
struct simil_search_params {
    int64_t nprobe;          /* inverted lists to visit, >= 1 */
    int threads;             /* CPU threads, 0: all */
    int refine_factor;       /* ...,Refine: k * this many candidates, >= 1 */
    float extra_distance;    /* XFBQ: candidate window, a fraction in [0, 1] */
    int extra_of;            /* XFBQ: what extra_distance is a fraction of, an sml_extra_of */
    int lut;                 /* IVF-PQ on a GPU: an sml_lut_precision */
    int precomputed_tables;  /* IVF-PQ, L2: 1 term tables per query, 0 per (query, list) */
    unsigned given;          /* bit i: the setting of row i of the table was set */
    /* The allowed ids (simil_search_params_allow_*), or NULL: every id.  One
     * block owned by the handle (the filter, then its words or ids); the
     * copy a search call holds borrows it. */
    sml_id_filter *allow;
};

/* Precision of IVF-PQ lookup tables in GPU shared memory. */
typedef enum sml_lut_precision {
    SML_LUT_AUTO = 0,  /* fp32 where the tables fit, else fp16 */
    SML_LUT_FP32 = 1,
    SML_LUT_FP16 = 2   /* offset per sub-table before rounding; sums in fp32 */
} sml_lut_precision;

/* What the XFBQ extra distance is a fraction of (algo/xfbq.h,
 * sml_xfbq_selection). */
typedef enum sml_extra_of {
    SML_EXTRA_OF_RANGE = 0,  /* the theoretical range of the code distance D */
    SML_EXTRA_OF_SPREAD = 1  /* each query's observed spread: median D - smallest D */
} sml_extra_of;

/* Every setting at its default (what a NULL params means). */
const simil_search_params *sml_search_defaults(void);

/* 1 if the setting called name was set in params (not left at its default):
 * an index's own default nprobe applies only where nprobe was not. */
int sml_search_param_given(const simil_search_params *params, const char *name);

/* 1 if every setting of a equals that of b and both hold the same allowed-ids
 * handle (or none). */
int sml_search_params_equal(const simil_search_params *a, const simil_search_params *b);

/* Queries and results are in host memory, except for a type with device_io
 * set, which also gets the caller's GPU arrays as they are (cosine queries
 * always come as a normalized host copy). */
typedef struct sml_search_call {
    int64_t nq;
    const float *queries;   /* prepared, nq x dim */
    int64_t k;              /* >= 1; may exceed the index size */
    simil_search_params params;
    float *distances;       /* nq x k */
    int64_t *labels;        /* nq x k */
    /* Nonzero: queries (outputs) are known to be host memory, as index.c
     * found once per search; 0: not known (a backend asks). */
    int queries_host;
    int outputs_host;
} sml_search_call;

typedef struct sml_index_vtable {
    /* NULL when the type needs no training. */
    simil_status (*train)(simil_index *index, int64_t n, const float *x);
    simil_status (*add)(simil_index *index, int64_t n, const float *x, const int64_t *ids);
    simil_status (*search)(const simil_index *index, const sml_search_call *call);
    simil_status (*remove)(simil_index *index, int64_t n_sorted, const int64_t *sorted_ids,
                           int64_t *removed);
    simil_status (*reconstruct)(const simil_index *index, int64_t id, float *out);
    /* The ids of the ntotal stored vectors, in any order, into out. */
    void (*ids)(const simil_index *index, int64_t *out);
    void (*reset)(simil_index *index);
    /* Type-specific sections after the common header. */
    simil_status (*save)(const simil_index *index, sml_writer *w);
    simil_status (*load)(simil_index *index, sml_reader *r);
    void (*destroy)(simil_index *index);
    /* Nonzero when search reads queries and writes results in GPU memory
     * itself (the exact search does); other types get host copies from
     * index.c. */
    int device_io;
    /* Nonzero when each query's results depend only on that query (within
     * the backend's batch_max_queries and batch_max_k), so that concurrent
     * searches may run as one batch (search_batch.h). */
    int batchable;
} sml_index_vtable;

struct simil_index {
    const sml_index_vtable *vt;
    sml_index_spec spec;
    char description[96];
    int64_t dim;
    simil_metric metric;
    sml_backend *backend;
    char device[48];   /* the device string it was created with, for inner indexes */
    int64_t ntotal;
    int64_t next_id;   /* one past the largest id ever added (see sml_id_fits) */
    int64_t nprobe;    /* inverted lists a search visits when its parameters do
                          not set nprobe; 0 here means the table's default, 1 */
    int trained;
    int loading;       /* set while its type's init runs for a file about to be
                          read into it: what the file holds (an RR rotation)
                          need not be made first */
    void *impl;
    struct sml_batcher *batcher;  /* concurrent searches (search_batch.h) */
};

/* Ids.  Every stored id is in [0, next_id).  next_id is one past the largest
 * id ever added, and stops at INT64_MAX: add refuses the id INT64_MAX and
 * sequential numbering past 2^63-2, but a Faiss file may hold INT64_MAX
 * (Faiss takes any int64), and such an index keeps next_id = INT64_MAX, where
 * every id >= 0 fits and only explicit ids can be added. */
static inline int sml_id_fits(int64_t id, int64_t next_id)
{
    return id >= 0 && (id < next_id || next_id == INT64_MAX);
}

/* next_id after storing id (>= 0). */
static inline int64_t sml_next_id_after(int64_t id, int64_t next_id)
{
    if (id == INT64_MAX) return INT64_MAX;
    return id + 1 > next_id ? id + 1 : next_id;
}

/* SIMIL_ERR_CORRUPT naming the file and the first of n ids that does not fit
 * next_id (a file whose ids contradict its header), else SIMIL_OK. */
simil_status sml_ids_check(const char *path, int64_t n, const int64_t *ids, int64_t next_id);

/* The metric the kernels see: cosine runs as IP on normalized vectors. */
static inline simil_metric sml_kernel_metric(simil_metric m)
{
    return m == SIMIL_METRIC_COSINE ? SIMIL_METRIC_IP : m;
}

/* The candidates a Refine search asks its inner index for: k * factor, but
 * no more than the count of vectors (slots past them stay empty). */
int64_t sml_refine_candidates(int64_t k, int64_t factor, int64_t count);

/* Each type's constructor fills index->vt and index->impl. */
simil_status sml_flat_init(simil_index *index);
simil_status sml_ivf_flat_init(simil_index *index);
simil_status sml_ivf_pq_init(simil_index *index);
simil_status sml_opq_init(simil_index *index);
simil_status sml_refine_init(simil_index *index);
/* XFBQ (index_xfbq.c) and IVFn,XFBQ (index_ivf_xfbq.c); the scale alpha of
 * such an index (0 until chosen, and for other types), its RR rotation
 * (dim x dim, or NULL), and how many rotations the process has made by SVD,
 * for tests (index_xfbq_common.c). */
simil_status sml_xfbq_flat_init(simil_index *index);
simil_status sml_ivf_xfbq_init(simil_index *index);
float sml_xfbq_index_alpha(const simil_index *index);
const float *sml_xfbq_index_rotation(const simil_index *index);
int64_t sml_xfbq_rotations_made(void);
simil_status sml_shards_init(simil_index *index);
/* Scalar quantizers: SQ8, SQfp16, SQbf16 (index_sq.c) and IVFn,SQ.. (index_ivf_sq.c). */
simil_status sml_sq_flat_init(simil_index *index);
simil_status sml_ivf_sq_init(simil_index *index);

/* Reading and writing Faiss files (faiss_read.c, faiss_write.c) needs the
 * insides of three types.  Flat: its vectors (backend memory, ntotal x dim)
 * and host ids.  IVF-PQ: its inverted file, product quantizer and whether
 * its codes are of residuals (Faiss's by_residual); set_trained makes a fresh,
 * untrained IVF-PQ index trained with these coarse centroids (nlist x dim)
 * and codebooks (m x ksub x dsub), uploading both, its codes of residuals or
 * (by_residual = 0) of the vectors; if it fails (SIMIL_ERR_UNSUPPORTED for
 * an IP index of codes of the vectors on a backend without
 * ivf_pq_ip_vector_codes, a GPU), the caller destroys the index. */
struct sml_ivf;
struct sml_pq;
void sml_flat_data(const simil_index *index, const float **vectors, const int64_t **host_ids);
simil_status sml_ivf_pq_set_trained(simil_index *index, const float *coarse,
                                    const float *codebooks, int by_residual);
void sml_ivf_pq_parts(const simil_index *index, struct sml_ivf **ivf, struct sml_pq **pq,
                      int *by_residual);

/* OPQ: its rotation (host, dim x dout: y = x rt) and the index inside. */
void sml_opq_parts(const simil_index *index, float **rt, int64_t *dout, simil_index **inner);

/* Make the fresh OPQ index take rotation rt (copied) and the trained index
 * inner (adopted, of the description and dimension its own inner index has,
 * which goes), with inner's counters and default nprobe. */
simil_status sml_opq_adopt(simil_index *index, const float *rt, simil_index *inner);

/* Bytes of an IVF-PQ row: the code (sml_pq_code_size), then, for the L2
 * kernel metric, the row's term 1 as a float. */
size_t sml_ivf_pq_row_bytes(int64_t m, simil_metric kernel_metric);

/* Append n rows (host, sml_ivf_pq_row_bytes apart, codes filled in) to lists
 * `lists` with these ids; writes each row's term 1 first (L2). */
simil_status sml_ivf_pq_append(simil_index *index, int64_t n, const int64_t *lists,
                               uint8_t *rows, const int64_t *ids);

/* Streamed adds to IVF-PQ (stream_add.c).  is_ivf_pq: index is one IVF-PQ
 * (no wrapper, no shards); code_bytes: the bytes of its codes, which rows
 * widen to sml_ivf_pq_row_bytes.  encode: the list and the code of
 * each of n prepared vectors x (host, or backend memory when in_backend),
 * into lists and rows (host, sml_ivf_pq_row_bytes apart, term 1 not yet
 * written), as add computes them.  reserve: room in every list l for
 * extra[l] more rows, so that appends of that many move nothing. */
int sml_index_is_ivf_pq(const simil_index *index);
size_t sml_ivf_pq_code_bytes(const simil_index *index);
simil_status sml_ivf_pq_encode(const simil_index *index, int64_t n, const float *x,
                               int in_backend, int64_t *lists, uint8_t *rows);
simil_status sml_ivf_pq_reserve(simil_index *index, const int64_t *extra);

/* Load a Faiss index file (faiss_read.c) when sml_faiss_file(path) says it
 * looks like one (its first four bytes are a Faiss type code); index.c
 * chooses between this and sml_index_file_load. */
int sml_faiss_file(const char *path);
simil_status sml_faiss_load(const char *path, const char *device, simil_index **index);

/* Open the backend a single-device string names: "auto" (NULL), "cpu", "gpu",
 * "gpu:N". */
simil_status sml_device_open(const char *device, sml_backend **backend);

/* Where the parts of an index go: count single-device strings, grouped into
 * replicas (count / replicas shards each).  See device_select.c. */
#define SML_MAX_PARTS 64
typedef struct sml_placement {
    int count;
    int replicas;
    char device[SML_MAX_PARTS][16];
} sml_placement;

simil_status sml_device_placement(const char *device, sml_placement *placement);

/* Index files: the common header (index_file.c). */
simil_status sml_index_file_save(const simil_index *index, const char *path);
simil_status sml_index_file_load(simil_index **index, const char *path, const char *device);

/* ---- index_factory.c ---- */

/* A new, empty index of this description on device (create, load, and the
 * parts of wrapper types). */
simil_status sml_index_new(simil_index **index, int64_t dim, const char *description,
                           simil_metric metric, const char *device);

/* sml_index_new for a file about to be read into the index (index_file.c):
 * its type's init sees index->loading. */
simil_status sml_index_new_to_load(simil_index **index, int64_t dim, const char *description,
                                   simil_metric metric, const char *device);

/* Add n prepared vectors (host, finite, normalized for cosine) to a trained
 * index: checks the ids (NULL: numbered from next_id), calls the type's add
 * and keeps ntotal and next_id.  On failure the index is unchanged. */
simil_status sml_index_append(simil_index *index, int64_t n, const float *x, const int64_t *ids);

/* Destroy an index and its backend; NULL does nothing. */
void sml_index_free(simil_index *index);

/* An OPQ index of dimension dim, OPQm with rotation rt (dim x inner's
 * dimension, copied), around inner, a trained index on device (loading
 * Faiss's IndexPreTransform).  On success *out owns inner; on failure the
 * caller still does. */
simil_status sml_index_new_opq(simil_index **out, int64_t dim, int64_t m, const float *rt,
                               simil_index *inner, const char *device);

/* The index a wrapper type (OPQ, Refine) holds: spec without the wrapper's
 * part, on the same device, with the counters of the outer index. */
simil_status sml_index_inner(const simil_index *outer, const sml_index_spec *spec, int64_t dim,
                             simil_metric metric, simil_index **inner);

#endif
