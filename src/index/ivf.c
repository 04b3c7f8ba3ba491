/* ivf.c: the coarse quantizer and the inverted-list arena (see ivf.h). */
#include "index/ivf.h"

#include <assert.h>
#include <string.h>

#include "algo/kmeans.h"
#include "core/alloc.h"
#include "core/cluster_order.h"
#include "core/error.h"
#include "core/id_map.h"
#include "core/progress.h"
#include "index/index_internal.h"

static const uint32_t sml_tag_centroids = SML_TAG('I', 'V', 'F', 'C');
static const uint32_t sml_tag_sizes = SML_TAG('L', 'S', 'I', 'Z');
static const uint32_t sml_tag_list_ids = SML_TAG('L', 'I', 'D', 'S');
static const uint32_t sml_tag_codes = SML_TAG('L', 'C', 'O', 'D');

/* The arena's invariants (ivf.h), in debug builds: rows a multiple of 4
 * bytes, derived bytes rebuilt on load, and each list's rows inside its room,
 * the rooms apart and within the arena. */
static void sml_ivf_check(const sml_ivf *ivf)
{
    assert(ivf->code_size % 4 == 0);
    assert(ivf->file_code_size <= ivf->code_size);
    assert(ivf->file_code_size == ivf->code_size || ivf->derive != NULL);
#ifndef NDEBUG
    int64_t end = 0;
    for (int64_t l = 0; l < ivf->nlist && ivf->size != NULL; l++) {
        assert(ivf->size[l] >= 0 && ivf->size[l] <= ivf->cap[l]);
        if (ivf->cap[l] == 0) continue;
        assert(ivf->offset[l] >= end);
        end = ivf->offset[l] + ivf->cap[l];
    }
    assert(end <= ivf->capacity);
#endif
}

simil_status sml_ivf_init(sml_ivf *ivf, int64_t nlist, int64_t dim, simil_metric metric,
                          int spherical, size_t code_size)
{
    memset(ivf, 0, sizeof *ivf);
    ivf->nlist = nlist;
    ivf->dim = dim;
    ivf->metric = metric;
    ivf->spherical = spherical;
    ivf->code_size = code_size;
    ivf->file_code_size = code_size;
    return SIMIL_OK;
}

/* The per-list arrays, empty, unless the IVF has them: allocated with the
 * centroids, so that an untrained IVF (or file) costs nothing per list. */
/* The host list arrays, and on a GPU their copy in backend memory (filled
 * by sml_ivf_layout_sync): allocated together, so that a failure fails the
 * call that needs the lists, before anything changed. */
static simil_status sml_ivf_lists_alloc(sml_backend *b, sml_ivf *ivf)
{
    if (ivf->offset != NULL) return SIMIL_OK;
    int64_t *offset = NULL, *size = NULL, *cap = NULL, *layout = NULL;
    const size_t nlist = (size_t)ivf->nlist;
    simil_status s = sml_calloc((void **)&offset, nlist, sizeof(int64_t), "lists");
    if (s == SIMIL_OK) s = sml_calloc((void **)&size, nlist, sizeof(int64_t), "lists");
    if (s == SIMIL_OK) s = sml_calloc((void **)&cap, nlist, sizeof(int64_t), "lists");
    if (s == SIMIL_OK && b->gpu >= 0 && ivf->layout_mem == NULL)
        s = b->ops->mem_alloc(b, 2 * sizeof(int64_t) * nlist, (void **)&layout);
    if (s != SIMIL_OK) {
        sml_free(offset);
        sml_free(size);
        sml_free(cap);
        return s;
    }
    ivf->offset = offset;
    ivf->size = size;
    ivf->cap = cap;
    if (layout != NULL) ivf->layout_mem = layout;
    return SIMIL_OK;
}

/* offset and size to layout_mem (sml_ivf), where there is one (a GPU's);
 * the CPU's scans read the host arrays.  It allocates nothing
 * (sml_ivf_lists_alloc did); a copy that fails leaves layout_ok clear, and
 * the scans send the host arrays. */
static void sml_ivf_layout_sync(sml_backend *b, sml_ivf *ivf)
{
    ivf->layout_ok = 0;
    if (ivf->layout_mem == NULL || ivf->offset == NULL) return;
    const size_t bytes = sizeof(int64_t) * (size_t)ivf->nlist;
    if (b->ops->mem_upload(b, ivf->layout_mem, ivf->offset, bytes) == SIMIL_OK &&
        b->ops->mem_upload(b, ivf->layout_mem + ivf->nlist, ivf->size, bytes) == SIMIL_OK)
        ivf->layout_ok = 1;
}

static void sml_ivf_free_arena(sml_backend *b, sml_ivf *ivf)
{
    b->ops->mem_free(b, ivf->codes_mem);
    b->ops->mem_free(b, ivf->ids_mem);
    sml_free(ivf->host_ids);
    ivf->codes_mem = NULL;
    ivf->ids_mem = NULL;
    ivf->host_ids = NULL;
    ivf->capacity = 0;
}

void sml_ivf_free(sml_backend *b, sml_ivf *ivf)
{
    sml_ivf_free_arena(b, ivf);
    b->ops->mem_free(b, ivf->centroids_mem);
    b->ops->mem_free(b, ivf->centroid_norms_mem);
    b->ops->mem_free(b, ivf->centroid_ids_mem);
    b->ops->mem_free(b, ivf->layout_mem);
    if (ivf->centroid_shadow != NULL) b->ops->shadow_free(b, ivf->centroid_shadow);
    sml_free(ivf->centroids);
    sml_free(ivf->offset);
    sml_free(ivf->size);
    sml_free(ivf->cap);
    memset(ivf, 0, sizeof *ivf);
}

/* Put the host centroids in backend memory with their norms and ids, and the
 * backend's shadow of them where it keeps one: assigning every vector of a
 * large add to its list is a k-NN search against the centroids, and the
 * shadow puts it on the CUDA backend's exact tensor-core path. */
static simil_status sml_ivf_upload_quantizer(sml_backend *b, sml_ivf *ivf)
{
    const int64_t nlist = ivf->nlist;
    float *c = NULL, *cn = NULL;
    int64_t *ids = NULL, *host = NULL;
    void *shadow = NULL;
    simil_status s = b->ops->mem_alloc(b, sizeof(float) * (size_t)(nlist * ivf->dim), (void **)&c);
    if (s == SIMIL_OK) s = b->ops->mem_alloc(b, sizeof(float) * (size_t)nlist, (void **)&cn);
    if (s == SIMIL_OK) s = b->ops->mem_alloc(b, sizeof(int64_t) * (size_t)nlist, (void **)&ids);
    if (s == SIMIL_OK) s = sml_alloc((void **)&host, (size_t)nlist, sizeof *host, "list ids");
    if (s == SIMIL_OK)
        s = b->ops->mem_upload(b, c, ivf->centroids, sizeof(float) * (size_t)(nlist * ivf->dim));
    if (s == SIMIL_OK) s = b->ops->row_norms(b, nlist, ivf->dim, c, cn);
    if (s == SIMIL_OK) {
        for (int64_t l = 0; l < nlist; l++) host[l] = l;
        s = b->ops->mem_upload(b, ids, host, sizeof(int64_t) * (size_t)nlist);
    }
    if (s == SIMIL_OK && b->ops->shadow_sync != NULL)
        s = b->ops->shadow_sync(b, &shadow, c, 0, nlist, ivf->dim, ivf->metric);
    sml_free(host);
    if (s != SIMIL_OK) {
        b->ops->mem_free(b, c);
        b->ops->mem_free(b, cn);
        b->ops->mem_free(b, ids);
        return s;
    }
    b->ops->mem_free(b, ivf->centroids_mem);
    b->ops->mem_free(b, ivf->centroid_norms_mem);
    b->ops->mem_free(b, ivf->centroid_ids_mem);
    if (ivf->centroid_shadow != NULL) b->ops->shadow_free(b, ivf->centroid_shadow);
    ivf->centroids_mem = c;
    ivf->centroid_norms_mem = cn;
    ivf->centroid_ids_mem = ids;
    ivf->centroid_shadow = shadow;
    return SIMIL_OK;
}

void sml_ivf_kmeans_params(int64_t nlist, int spherical, simil_kmeans_params *p)
{
    simil_kmeans_params_init(p);
    p->k = nlist;
    p->iterations = 10; /* as Faiss trains its IVF quantizers */
    p->spherical = spherical;
}

simil_status sml_ivf_train(sml_backend *b, sml_ivf *ivf, int64_t n, const float *x)
{
    SML_RETURN_IF(n < ivf->nlist, SIMIL_ERR_INVALID_ARGUMENT,
                  "IVF%" PRId64 " needs at least %" PRId64 " training vectors (one per list), "
                  "got %" PRId64 "; train on more vectors or use fewer lists",
                  ivf->nlist, ivf->nlist, n);
    simil_kmeans_params p;
    sml_ivf_kmeans_params(ivf->nlist, ivf->spherical, &p);
    float *centroids;
    SML_TRY(sml_ivf_lists_alloc(b, ivf));
    SML_TRY(sml_alloc((void **)&centroids, (size_t)(ivf->nlist * ivf->dim), sizeof(float),
                      "coarse centroids"));
    simil_status s = sml_kmeans_run(b, &p, n, ivf->dim, x, centroids, NULL, NULL);
    if (s == SIMIL_OK) {
        float *old = ivf->centroids;
        ivf->centroids = centroids;
        s = sml_ivf_upload_quantizer(b, ivf);
        if (s == SIMIL_OK) {
            centroids = old;
            ivf->trained = 1;
        } else {
            ivf->centroids = old;
        }
    }
    sml_free(centroids);
    return s;
}

void sml_ivf_swap_quantizer(sml_ivf *ivf, sml_ivf *other)
{
    assert(ivf->nlist == other->nlist && ivf->dim == other->dim);
    if (ivf->offset == NULL) {
        /* an untrained IVF takes the (empty) lists of the trained one too */
        assert(ivf->capacity == 0);
        ivf->offset = other->offset;
        ivf->size = other->size;
        ivf->cap = other->cap;
        other->offset = other->size = other->cap = NULL;
        /* and their copy (an untrained IVF has none) */
        assert(ivf->layout_mem == NULL);
        ivf->layout_mem = other->layout_mem;
        ivf->layout_ok = other->layout_ok;
        other->layout_mem = NULL;
        other->layout_ok = 0;
    }
    const sml_ivf t = *ivf;
    ivf->centroids = other->centroids;
    ivf->centroids_mem = other->centroids_mem;
    ivf->centroid_norms_mem = other->centroid_norms_mem;
    ivf->centroid_ids_mem = other->centroid_ids_mem;
    ivf->centroid_shadow = other->centroid_shadow;
    ivf->trained = other->trained;
    other->centroids = t.centroids;
    other->centroids_mem = t.centroids_mem;
    other->centroid_norms_mem = t.centroid_norms_mem;
    other->centroid_ids_mem = t.centroid_ids_mem;
    other->centroid_shadow = t.centroid_shadow;
    other->trained = t.trained;
}

simil_status sml_ivf_set_centroids(sml_backend *b, sml_ivf *ivf, const float *centroids)
{
    float *copy;
    SML_TRY(sml_ivf_lists_alloc(b, ivf));
    SML_TRY(sml_alloc((void **)&copy, (size_t)(ivf->nlist * ivf->dim), sizeof(float),
                      "coarse centroids"));
    memcpy(copy, centroids, sizeof(float) * (size_t)(ivf->nlist * ivf->dim));
    float *old = ivf->centroids;
    ivf->centroids = copy;
    simil_status s = sml_ivf_upload_quantizer(b, ivf);
    if (s != SIMIL_OK) {
        ivf->centroids = old;
        sml_free(copy);
        return s;
    }
    sml_free(old);
    ivf->trained = 1;
    return SIMIL_OK;
}

/* The coarse quantizer as a k-NN search: its stored side only. */
static sml_knn_args sml_ivf_coarse_search(const sml_ivf *ivf)
{
    return (sml_knn_args){
        .base = ivf->centroids_mem,
        .base_norms = ivf->metric == SIMIL_METRIC_L2 ? ivf->centroid_norms_mem : NULL,
        .base_ids = ivf->centroid_ids_mem,
        .base_shadow = ivf->centroid_shadow,
        .n = ivf->nlist,
        .dim = ivf->dim,
        .metric = ivf->metric,
    };
}

simil_status sml_ivf_probe(sml_backend *b, const sml_ivf *ivf, int64_t n, const float *x,
                           int64_t nprobe, int64_t *lists)
{
    float *dists;
    SML_TRY(sml_alloc((void **)&dists, (size_t)(n * nprobe), sizeof(float), "probe distances"));
    const sml_knn_args args = sml_knn_of(sml_ivf_coarse_search(ivf), x, n, nprobe, dists, lists);
    simil_status s = b->ops->knn(b, &args);
    sml_free(dists);
    return s;
}

sml_ivf_lists sml_ivf_lists_of(const sml_ivf *ivf)
{
    sml_ivf_check(ivf);
    return (sml_ivf_lists){
        .offset = ivf->offset,
        .size = ivf->size,
        .layout = ivf->layout_ok ? ivf->layout_mem : NULL,
        .nlist = ivf->nlist,
        .codes = ivf->codes_mem,
        .code_stride = ivf->code_size,
        .ids = ivf->ids_mem,
    };
}

sml_ivf_scan_args sml_ivf_scan_of(const sml_ivf *ivf, const sml_search_call *call)
{
    const int64_t nprobe = call->params.nprobe > 0 ? call->params.nprobe : 1;
    return (sml_ivf_scan_args){
        .queries = call->queries,
        .nq = call->nq,
        .dim = ivf->dim,
        .lists = sml_ivf_lists_of(ivf),
        .probes = {
            .nprobe = nprobe < ivf->nlist ? nprobe : ivf->nlist,
            .coarse_search = sml_ivf_coarse_search(ivf),
        },
        .k = call->k,
        .metric = ivf->metric,
        .distances = call->distances,
        .labels = call->labels,
        .threads = call->params.threads,
        .filter = call->params.allow,
        .queries_host = call->queries_host,
    };
}

/* A new, empty arena of capacity rows (all three parts, or none). */
static simil_status sml_ivf_arena_new(sml_backend *b, size_t code_size, int64_t capacity,
                                      uint8_t **codes, int64_t **ids, int64_t **host_ids)
{
    size_t rows = (size_t)(capacity > 0 ? capacity : 1);
    *codes = NULL;
    *ids = NULL;
    *host_ids = NULL;
    simil_status s = b->ops->mem_alloc(b, rows * code_size, (void **)codes);
    if (s == SIMIL_OK) s = b->ops->mem_alloc(b, rows * sizeof(int64_t), (void **)ids);
    if (s == SIMIL_OK) s = sml_alloc((void **)host_ids, rows, sizeof(int64_t), "list ids");
    if (s != SIMIL_OK) {
        b->ops->mem_free(b, *codes);
        b->ops->mem_free(b, *ids);
        *codes = NULL;
        *ids = NULL;
    }
    return s;
}

/* An arena beside the IVF's own: where an append writes, swapped in when the
 * append is complete (or the IVF's own arena, when it has the room). */
typedef struct sml_ivf_arena {
    uint8_t *codes_mem;
    int64_t *ids_mem;
    int64_t *host_ids;
    int64_t capacity;
    int64_t *offset; /* host, per list */
    int own;         /* the IVF's own arena: nothing to swap or free */
} sml_ivf_arena;

static void sml_ivf_arena_discard(sml_backend *b, sml_ivf_arena *a)
{
    if (!a->own) {
        b->ops->mem_free(b, a->codes_mem);
        b->ops->mem_free(b, a->ids_mem);
        sml_free(a->host_ids);
        sml_free(a->offset);
    }
    memset(a, 0, sizeof *a);
}

/* *out = a new arena laid out with capacities new_cap (>= size) holding the
 * rows of every list of the current one, which is left as it is. */
static simil_status sml_ivf_relayout(sml_backend *b, const sml_ivf *ivf, const int64_t *new_cap,
                                     sml_ivf_arena *out)
{
    int64_t total = 0, used = 0;
    for (int64_t l = 0; l < ivf->nlist; l++) {
        total += new_cap[l];
        used += ivf->size[l];
    }
    sml_ivf_arena a = {.capacity = total};
    int64_t *src = NULL, *dst = NULL;
    simil_status s = sml_alloc((void **)&a.offset, (size_t)ivf->nlist, sizeof *a.offset, "lists");
    if (s == SIMIL_OK) s = sml_alloc((void **)&src, (size_t)(used + 1), sizeof *src, "rows");
    if (s == SIMIL_OK) s = sml_alloc((void **)&dst, (size_t)(used + 1), sizeof *dst, "rows");
    if (s == SIMIL_OK)
        s = sml_ivf_arena_new(b, ivf->code_size, total, &a.codes_mem, &a.ids_mem, &a.host_ids);
    if (s == SIMIL_OK) {
        int64_t at = 0, r = 0;
        for (int64_t l = 0; l < ivf->nlist; l++) {
            a.offset[l] = at;
            for (int64_t j = 0; j < ivf->size[l]; j++, r++) {
                src[r] = ivf->offset[l] + j;
                dst[r] = at + j;
                a.host_ids[at + j] = ivf->host_ids[ivf->offset[l] + j];
            }
            at += new_cap[l];
        }
        s = b->ops->mem_move_rows(b, a.codes_mem, dst, ivf->codes_mem, src, ivf->code_size, used);
        if (s == SIMIL_OK)
            s = b->ops->mem_move_rows(b, a.ids_mem, dst, ivf->ids_mem, src, sizeof(int64_t), used);
    }
    sml_free(src);
    sml_free(dst);
    if (s != SIMIL_OK) {
        sml_ivf_arena_discard(b, &a);
        return s;
    }
    *out = a;
    return SIMIL_OK;
}

/* Place n new rows at the arena rows pos[] (host codes and ids). */
static simil_status sml_ivf_scatter(sml_backend *b, const sml_ivf *ivf, const sml_ivf_arena *a,
                                    int64_t n, const int64_t *pos, const void *codes,
                                    const int64_t *ids)
{
    if (b->gpu < 0) {
        SML_TRY(b->ops->mem_move_rows(b, a->codes_mem, pos, codes, NULL, ivf->code_size, n));
        return b->ops->mem_move_rows(b, a->ids_mem, pos, ids, NULL, sizeof(int64_t), n);
    }
    /* backend memory is elsewhere: stage the rows there first */
    void *tmp;
    SML_TRY(b->ops->mem_alloc(b, (size_t)n * (ivf->code_size + sizeof(int64_t)), &tmp));
    uint8_t *tmp_ids = (uint8_t *)tmp + (size_t)n * ivf->code_size;
    simil_status s = b->ops->mem_upload(b, tmp, codes, (size_t)n * ivf->code_size);
    if (s == SIMIL_OK) s = b->ops->mem_upload(b, tmp_ids, ids, (size_t)n * sizeof(int64_t));
    if (s == SIMIL_OK)
        s = b->ops->mem_move_rows(b, a->codes_mem, pos, tmp, NULL, ivf->code_size, n);
    if (s == SIMIL_OK)
        s = b->ops->mem_move_rows(b, a->ids_mem, pos, tmp_ids, NULL, sizeof(int64_t), n);
    b->ops->mem_free(b, tmp);
    return s;
}

/* Make a (from sml_ivf_relayout, capacities new_cap) the IVF's arena. */
static void sml_ivf_arena_commit(sml_backend *b, sml_ivf *ivf, sml_ivf_arena *a,
                                 const int64_t *new_cap)
{
    if (a->own) return;
    sml_ivf_free_arena(b, ivf);
    ivf->codes_mem = a->codes_mem;
    ivf->ids_mem = a->ids_mem;
    ivf->host_ids = a->host_ids;
    ivf->capacity = a->capacity;
    ivf->layout_ok = 0;
    memcpy(ivf->offset, a->offset, sizeof(int64_t) * (size_t)ivf->nlist);
    memcpy(ivf->cap, new_cap, sizeof(int64_t) * (size_t)ivf->nlist);
    sml_free(a->offset);
    memset(a, 0, sizeof *a);
}

/* Rows counted per (slice, list) over T contiguous slices of the input, one
 * thread each, so that the counting and placing passes of a large append run
 * in parallel and still keep each list's new rows in input order.  T is 1
 * when n is small against nlist (the per-slice counts would cost more than
 * they save).  Done serially, these passes were seconds of a 100M-vector
 * add. */
simil_status sml_ivf_append(sml_backend *b, sml_ivf *ivf, int64_t n, const int64_t *lists,
                            const void *codes, const int64_t *ids)
{
    const int64_t nlist = ivf->nlist;
    int64_t *add = NULL, *new_cap = NULL, *pos = NULL, *start = NULL;
    sml_ivf_arena arena = {.codes_mem = ivf->codes_mem, .ids_mem = ivf->ids_mem,
                           .host_ids = ivf->host_ids, .capacity = ivf->capacity,
                           .offset = ivf->offset, .own = 1};
    simil_status s = sml_alloc((void **)&add, (size_t)nlist, sizeof *add, "list counts");
    if (s == SIMIL_OK) s = sml_alloc((void **)&new_cap, (size_t)nlist, sizeof *new_cap, "lists");
    if (s == SIMIL_OK) s = sml_alloc((void **)&pos, (size_t)n, sizeof *pos, "row positions");
    if (s == SIMIL_OK) s = sml_alloc((void **)&start, (size_t)nlist, sizeof *start, "lists");
    if (s == SIMIL_OK)
        s = sml_cluster_order_by(n, lists, 1, nlist, 0, NULL, add, NULL, NULL, NULL, NULL);
    int grow = 0;
    if (s == SIMIL_OK) {
        for (int64_t l = 0; l < nlist; l++) {
            int64_t need = ivf->size[l] + add[l];
            new_cap[l] = ivf->cap[l];
            if (need > ivf->cap[l]) {
                new_cap[l] = need + need / 2 + 4;
                grow = 1;
            }
        }
        /* a list that outgrows its room moves the whole arena; the new rows
         * go to the new one, which replaces the old only at the end */
        if (grow || ivf->codes_mem == NULL) s = sml_ivf_relayout(b, ivf, new_cap, &arena);
    }
    if (s == SIMIL_OK) {
        /* pos[i]: the arena row of new row i, after its list's rows and the
         * new rows of that list before it */
        for (int64_t l = 0; l < nlist; l++) start[l] = arena.offset[l] + ivf->size[l];
        s = sml_cluster_order_by(n, lists, 1, nlist, 0, start, NULL, NULL, NULL, pos, NULL);
        if (s == SIMIL_OK) s = sml_ivf_scatter(b, ivf, &arena, n, pos, codes, ids);
    }
    if (s == SIMIL_OK) {
        sml_ivf_arena_commit(b, ivf, &arena, new_cap);
#pragma omp parallel for schedule(static) num_threads(sml_pass_threads(0, n))
        for (int64_t i = 0; i < n; i++) ivf->host_ids[pos[i]] = ids[i];
        for (int64_t l = 0; l < nlist; l++) ivf->size[l] += add[l];
        sml_ivf_check(ivf);
        sml_ivf_layout_sync(b, ivf);
    } else {
        sml_ivf_arena_discard(b, &arena);
    }
    sml_free(start);
    sml_free(add);
    sml_free(new_cap);
    sml_free(pos);
    return s;
}

simil_status sml_ivf_reserve(sml_backend *b, sml_ivf *ivf, const int64_t *extra)
{
    int64_t *new_cap;
    SML_TRY(sml_alloc((void **)&new_cap, (size_t)ivf->nlist, sizeof *new_cap, "lists"));
    int grow = ivf->codes_mem == NULL;
    for (int64_t l = 0; l < ivf->nlist; l++) {
        assert(extra[l] >= 0);
        new_cap[l] = ivf->size[l] + extra[l] > ivf->cap[l] ? ivf->size[l] + extra[l] : ivf->cap[l];
        grow |= new_cap[l] > ivf->cap[l];
    }
    sml_ivf_arena arena = {0};
    simil_status s = grow ? sml_ivf_relayout(b, ivf, new_cap, &arena) : SIMIL_OK;
    if (s == SIMIL_OK && grow) {
        sml_ivf_arena_commit(b, ivf, &arena, new_cap);
        sml_ivf_layout_sync(b, ivf);
    }
    sml_free(new_cap);
    return s;
}

void sml_ivf_truncate(sml_ivf *ivf, const int64_t *sizes)
{
    ivf->layout_ok = 0;  /* scans send the host arrays until a mutator copies them again */
    for (int64_t l = 0; l < ivf->nlist; l++) {
        assert(sizes[l] <= ivf->size[l]);
        ivf->size[l] = sizes[l];
    }
}

/* The kept rows of every list, copied into a new tight arena. */
static simil_status sml_ivf_compact(sml_backend *b, sml_ivf *ivf, int64_t n_sorted,
                                    const int64_t *sorted_ids, int64_t kept)
{
    int64_t *src = NULL, *off = NULL, *host_ids = NULL, *ids = NULL, *sizes = NULL;
    uint8_t *codes = NULL;
    simil_status s = sml_alloc((void **)&src, (size_t)(kept + 1), sizeof *src, "rows");
    if (s == SIMIL_OK) s = sml_alloc((void **)&off, (size_t)ivf->nlist * 2, sizeof *off, "lists");
    if (s == SIMIL_OK) s = sml_ivf_arena_new(b, ivf->code_size, kept, &codes, &ids, &host_ids);
    if (s == SIMIL_OK) {
        sizes = off + ivf->nlist;
        int64_t r = 0;
        for (int64_t l = 0; l < ivf->nlist; l++) {
            off[l] = r;
            for (int64_t j = 0; j < ivf->size[l]; j++) {
                int64_t at = ivf->offset[l] + j;
                if (sml_sorted_ids_contain(sorted_ids, n_sorted, ivf->host_ids[at])) continue;
                src[r] = at;
                host_ids[r++] = ivf->host_ids[at];
            }
            sizes[l] = r - off[l];
        }
        s = b->ops->mem_move_rows(b, codes, NULL, ivf->codes_mem, src, ivf->code_size, kept);
        if (s == SIMIL_OK)
            s = b->ops->mem_move_rows(b, ids, NULL, ivf->ids_mem, src, sizeof(int64_t), kept);
    }
    if (s == SIMIL_OK) {
        sml_ivf_free_arena(b, ivf);
        ivf->codes_mem = codes;
        ivf->ids_mem = ids;
        ivf->host_ids = host_ids;
        ivf->capacity = kept;
        memcpy(ivf->offset, off, sizeof(int64_t) * (size_t)ivf->nlist);
        memcpy(ivf->size, sizes, sizeof(int64_t) * (size_t)ivf->nlist);
        memcpy(ivf->cap, sizes, sizeof(int64_t) * (size_t)ivf->nlist);
        sml_ivf_layout_sync(b, ivf);
    } else {
        b->ops->mem_free(b, codes);
        b->ops->mem_free(b, ids);
        sml_free(host_ids);
    }
    sml_free(src);
    sml_free(off);
    return s;
}

simil_status sml_ivf_remove(sml_backend *b, sml_ivf *ivf, int64_t n_sorted,
                            const int64_t *sorted_ids, int64_t *removed)
{
    *removed = 0;
    int64_t total = 0, kept = 0;
    for (int64_t l = 0; l < ivf->nlist; l++)
        for (int64_t j = 0; j < ivf->size[l]; j++) {
            total++;
            kept += !sml_sorted_ids_contain(sorted_ids, n_sorted, ivf->host_ids[ivf->offset[l] + j]);
        }
    if (kept == total) return SIMIL_OK;
    SML_TRY(sml_ivf_compact(b, ivf, n_sorted, sorted_ids, kept));
    *removed = total - kept;
    return SIMIL_OK;
}

int64_t sml_ivf_find(const sml_ivf *ivf, int64_t id)
{
    for (int64_t l = 0; l < ivf->nlist && ivf->size != NULL; l++)
        for (int64_t j = 0; j < ivf->size[l]; j++)
            if (ivf->host_ids[ivf->offset[l] + j] == id) return ivf->offset[l] + j;
    return -1;
}

void sml_ivf_ids(const sml_ivf *ivf, int64_t *out)
{
    int64_t at = 0;
    for (int64_t l = 0; l < ivf->nlist && ivf->size != NULL; l++) {
        if (ivf->size[l] > 0)
            memcpy(out + at, ivf->host_ids + ivf->offset[l], sizeof(int64_t) * (size_t)ivf->size[l]);
        at += ivf->size[l];
    }
}

int64_t sml_ivf_list_of(const sml_ivf *ivf, int64_t row)
{
    for (int64_t l = 0; l < ivf->nlist && ivf->size != NULL; l++)
        if (row >= ivf->offset[l] && row < ivf->offset[l] + ivf->size[l]) return l;
    return -1;
}

void sml_ivf_reset(sml_backend *b, sml_ivf *ivf)
{
    sml_ivf_free_arena(b, ivf);
    if (ivf->offset == NULL) return; /* untrained: no lists yet */
    memset(ivf->offset, 0, sizeof(int64_t) * (size_t)ivf->nlist);
    memset(ivf->size, 0, sizeof(int64_t) * (size_t)ivf->nlist);
    memset(ivf->cap, 0, sizeof(int64_t) * (size_t)ivf->nlist);
    sml_ivf_layout_sync(b, ivf);
}

simil_status sml_ivf_save(sml_backend *b, const sml_ivf *ivf, sml_writer *w)
{
    const int64_t nlist = ivf->nlist;
    int64_t total = 0;
    for (int64_t l = 0; l < nlist; l++) total += ivf->size[l];
    SML_TRY(sml_section_write(w, sml_tag_centroids, ivf->centroids,
                              sizeof(float) * (uint64_t)(nlist * ivf->dim)));
    SML_TRY(sml_section_write(w, sml_tag_sizes, ivf->size, sizeof(int64_t) * (uint64_t)nlist));
    SML_TRY(sml_section_begin(w, sml_tag_list_ids, sizeof(int64_t) * (uint64_t)total));
    for (int64_t l = 0; l < nlist; l++)
        SML_TRY(sml_writer_write(w, ivf->host_ids + ivf->offset[l],
                                 sizeof(int64_t) * (size_t)ivf->size[l]));
    SML_TRY(sml_section_end(w));
    /* codes list by list, through a host buffer where the arena is on a GPU
     * or the rows carry derived bytes */
    const size_t file_row = ivf->file_code_size;
    SML_TRY(sml_section_begin(w, sml_tag_codes, file_row * (uint64_t)total));
    if (sml_writer_measuring(w)) {
        sml_writer_skip(w, file_row * (uint64_t)total);
        return sml_section_end(w);
    }
    int64_t largest = 0;
    for (int64_t l = 0; l < nlist; l++)
        if (ivf->size[l] > largest) largest = ivf->size[l];
    uint8_t *buf = NULL;
    if ((b->gpu >= 0 || file_row < ivf->code_size) && largest > 0)
        SML_TRY(sml_alloc((void **)&buf, (size_t)largest, ivf->code_size, "a save buffer"));
    simil_status s = SIMIL_OK;
    for (int64_t l = 0; l < nlist && s == SIMIL_OK; l++) {
        const uint8_t *src = ivf->codes_mem + (size_t)ivf->offset[l] * ivf->code_size;
        const int64_t n = ivf->size[l];
        if (buf != NULL && n > 0) {
            s = b->ops->mem_download(b, buf, src, (size_t)n * ivf->code_size);
            sml_rows_narrow(buf, n, ivf->code_size, file_row);
            src = buf;
        }
        if (s == SIMIL_OK) s = sml_writer_write(w, src, (size_t)n * file_row);
    }
    sml_free(buf);
    SML_TRY(s);
    return sml_section_end(w);
}

void sml_rows_widen(uint8_t *base, int64_t n, size_t from, size_t to)
{
    for (int64_t j = n - 1; j >= 0 && to > from; j--) {
        memmove(base + (size_t)j * to, base + (size_t)j * from, from);
        memset(base + (size_t)j * to + from, 0, to - from);
    }
}

void sml_rows_narrow(uint8_t *base, int64_t n, size_t from, size_t to)
{
    for (int64_t j = 1; j < n && to < from; j++)
        memmove(base + (size_t)j * to, base + (size_t)j * from, to);
}

/* LCOD through the owner's derive hook: list by list, widened to the arena's
 * rows, checked and completed, then uploaded. */
static simil_status sml_ivf_load_derived(sml_backend *b, sml_ivf *ivf, sml_reader *r,
                                         int64_t ntotal)
{
    uint64_t bytes;
    SML_TRY(sml_section_open(r, sml_tag_codes, &bytes));
    SML_RETURN_IF(bytes != ivf->file_code_size * (uint64_t)ntotal, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: codes of %llu bytes, %llu expected", r->path,
                  (unsigned long long)bytes,
                  (unsigned long long)(ivf->file_code_size * (uint64_t)ntotal));
    int64_t largest = 0;
    for (int64_t l = 0; l < ivf->nlist; l++)
        if (ivf->size[l] > largest) largest = ivf->size[l];
    uint8_t *buf;
    SML_TRY(sml_alloc((void **)&buf, (size_t)(largest > 0 ? largest : 1), ivf->code_size,
                      "a load buffer"));
    simil_status s = SIMIL_OK;
    for (int64_t l = 0; l < ivf->nlist && s == SIMIL_OK; l++) {
        const int64_t n = ivf->size[l];
        if (n == 0) continue;
        s = sml_section_read(r, buf, (size_t)n * ivf->file_code_size);
        if (s != SIMIL_OK) break;
        sml_rows_widen(buf, n, ivf->file_code_size, ivf->code_size);
        if (!ivf->derive(ivf->derive_owner, l, n, buf)) {
            s = sml_error(SIMIL_ERR_CORRUPT,
                          "'%s' is damaged: list %" PRId64 " holds a code past its codebook",
                          r->path, l);
            break;
        }
        s = b->ops->mem_upload(b, ivf->codes_mem + (size_t)ivf->offset[l] * ivf->code_size, buf,
                               (size_t)n * ivf->code_size);
    }
    sml_free(buf);
    SML_TRY(s);
    return sml_section_close(r);
}

/* Read the sizes and check them against the header's ntotal and the file. */
static simil_status sml_ivf_load_sizes(sml_ivf *ivf, sml_reader *r, int64_t ntotal)
{
    uint64_t bytes;
    SML_TRY(sml_section_open(r, sml_tag_sizes, &bytes));
    SML_RETURN_IF(bytes != sizeof(int64_t) * (uint64_t)ivf->nlist, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: list sizes for %llu lists, the index has %" PRId64, r->path,
                  (unsigned long long)(bytes / 8), ivf->nlist);
    SML_TRY(sml_section_read(r, ivf->size, (size_t)bytes));
    SML_TRY(sml_section_close(r));
    int64_t total = 0;
    for (int64_t l = 0; l < ivf->nlist; l++) {
        SML_RETURN_IF(ivf->size[l] < 0 || ivf->size[l] > ntotal - total, SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: list %" PRId64 " claims %" PRId64 " vectors", r->path, l,
                      ivf->size[l]);
        total += ivf->size[l];
    }
    SML_RETURN_IF(total != ntotal, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: lists hold %" PRId64 " vectors, the header says %" PRId64,
                  r->path, total, ntotal);
    SML_RETURN_IF((uint64_t)ntotal > r->size / (ivf->file_code_size + sizeof(int64_t)),
                  SIMIL_ERR_CORRUPT, "'%s' is truncated: %" PRId64 " vectors cannot fit", r->path,
                  ntotal);
    return SIMIL_OK;
}

simil_status sml_ivf_load(sml_backend *b, sml_ivf *ivf, sml_reader *r, int64_t ntotal,
                          int64_t next_id)
{
    uint64_t bytes;
    SML_TRY(sml_section_open(r, sml_tag_centroids, &bytes));
    SML_RETURN_IF(bytes != sizeof(float) * (uint64_t)(ivf->nlist * ivf->dim), SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: the coarse centroids take %llu bytes", r->path,
                  (unsigned long long)bytes);
    /* sized by the section just checked against the file */
    SML_TRY(sml_ivf_lists_alloc(b, ivf));
    if (ivf->centroids == NULL)
        SML_TRY(sml_alloc((void **)&ivf->centroids, (size_t)bytes, 1, "coarse centroids"));
    SML_TRY(sml_section_read(r, ivf->centroids, (size_t)bytes));
    SML_TRY(sml_section_close(r));
    SML_TRY(sml_ivf_upload_quantizer(b, ivf));
    ivf->trained = 1;
    SML_TRY(sml_ivf_load_sizes(ivf, r, ntotal));
    SML_TRY(sml_ivf_arena_new(b, ivf->code_size, ntotal, &ivf->codes_mem, &ivf->ids_mem,
                              &ivf->host_ids));
    ivf->capacity = ntotal;
    int64_t at = 0;
    for (int64_t l = 0; l < ivf->nlist; l++) {
        ivf->offset[l] = at;
        ivf->cap[l] = ivf->size[l];
        at += ivf->size[l];
    }
    sml_ivf_layout_sync(b, ivf);
    SML_TRY(sml_section_open(r, sml_tag_list_ids, &bytes));
    SML_RETURN_IF(bytes != sizeof(int64_t) * (uint64_t)ntotal, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: ids of %llu vectors, %" PRId64 " expected", r->path,
                  (unsigned long long)(bytes / 8), ntotal);
    SML_TRY(sml_section_read(r, ivf->host_ids, (size_t)bytes));
    SML_TRY(sml_section_close(r));
    SML_TRY(sml_ids_check(r->path, ntotal, ivf->host_ids, next_id));
    SML_TRY(b->ops->mem_upload(b, ivf->ids_mem, ivf->host_ids, (size_t)bytes));
    if (ivf->derive != NULL) return sml_ivf_load_derived(b, ivf, r, ntotal);
    return sml_section_read_mem(r, sml_tag_codes, b, ivf->codes_mem,
                                ivf->code_size * (uint64_t)ntotal);
}

void sml_ivf_residuals(const sml_ivf *ivf, int64_t n, const float *x, const int64_t *lists,
                       float *out)
{
    const int64_t dim = ivf->dim;
#pragma omp parallel for schedule(static) if (n * dim > (1 << 18))
    for (int64_t r = 0; r < n; r++)
        for (int64_t t = 0; t < dim; t++)
            out[r * dim + t] = x[r * dim + t] - ivf->centroids[lists[r] * dim + t];
}
