/* row_store.c: growable arrays of rows in backend memory (row_store.h). */
#include "index/row_store.h"

#include <assert.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/id_map.h"
#include "core/section_mem.h"
#include "index/index_internal.h"

sml_row_store sml_row_store_empty(size_t width0, size_t width1)
{
    assert(width0 % 4 == 0 && width1 % 4 == 0);
    return (sml_row_store){.width = {width0, width1}, .shadow_column = -1};
}

void sml_row_store_shadow(sml_row_store *s, int c, simil_metric metric)
{
    assert(c >= 0 && c < SML_ROW_STORE_COLUMNS && s->capacity == 0);
    assert(s->width[c] > 0 && s->width[c] % sizeof(float) == 0);
    s->shadow_column = c;
    s->shadow_metric = metric;
}

void sml_row_store_host_column(sml_backend *b, sml_row_store *s, int c)
{
    assert(c >= 0 && c < SML_ROW_STORE_COLUMNS && s->capacity == 0);
    /* host memory is backend memory where the backend has no memory of its own */
    if (b->gpu >= 0 && b->ops->pinned_alloc != NULL) s->host |= 1u << c;
}

static int sml_row_store_is_host(const sml_row_store *s, int c) { return (s->host >> c) & 1; }

static simil_status sml_row_store_alloc(sml_backend *b, const sml_row_store *s, int c,
                                        size_t bytes, void **out)
{
    if (!sml_row_store_is_host(s, c)) return b->ops->mem_alloc(b, bytes, out);
    *out = NULL;
    return b->ops->pinned_alloc(b, bytes, out);
}

static void sml_row_store_release(sml_backend *b, const sml_row_store *s, int c, void *mem)
{
    if (mem == NULL) return;
    if (sml_row_store_is_host(s, c))
        b->ops->pinned_free(b, mem);
    else
        b->ops->mem_free(b, mem);
}

simil_status sml_row_store_put(sml_backend *b, const sml_row_store *s, int c, int64_t at,
                               const void *host, size_t bytes)
{
    assert(at >= 0 && bytes <= (size_t)(s->capacity - at) * s->width[c]);
    void *dst = sml_row_store_at(s, c, at);
    if (!sml_row_store_is_host(s, c)) return b->ops->mem_upload(b, dst, host, bytes);
    if (bytes > 0) memcpy(dst, host, bytes);
    return SIMIL_OK;
}

simil_status sml_row_store_get(sml_backend *b, const sml_row_store *s, int c, int64_t at,
                               void *host, size_t bytes)
{
    const void *src = sml_row_store_at(s, c, at);
    if (!sml_row_store_is_host(s, c)) return b->ops->mem_download(b, host, src, bytes);
    if (bytes > 0) memcpy(host, src, bytes);
    return SIMIL_OK;
}

simil_status sml_row_store_write_column(sml_writer *w, uint32_t tag, sml_backend *b,
                                        const sml_row_store *s, int c, int64_t n)
{
    const uint64_t bytes = (uint64_t)n * s->width[c];
    if (!sml_row_store_is_host(s, c))
        return sml_section_write_mem(w, tag, b, s->column[c], bytes);
    return sml_section_write(w, tag, s->column[c], bytes);
}

simil_status sml_row_store_read_column(sml_reader *r, uint32_t tag, sml_backend *b,
                                       const sml_row_store *s, int c, int64_t n)
{
    const uint64_t bytes = (uint64_t)n * s->width[c];
    if (!sml_row_store_is_host(s, c))
        return sml_section_read_mem(r, tag, b, s->column[c], bytes);
    return sml_section_read_host(r, tag, s->column[c], bytes);
}

/* Free s's blocks, not its shadow (which a commit may hand on). */
static void sml_row_store_free_blocks(sml_backend *b, sml_row_store *s)
{
    for (int c = 0; c < SML_ROW_STORE_COLUMNS; c++) {
        sml_row_store_release(b, s, c, s->column[c]);
        s->column[c] = NULL;
    }
    b->ops->mem_free(b, s->ids);
    sml_free(s->host_ids);
    s->ids = NULL;
    s->host_ids = NULL;
    s->capacity = 0;
}

static void sml_row_store_free_shadow(sml_backend *b, sml_row_store *s)
{
    if (s->shadow != NULL) b->ops->shadow_free(b, s->shadow);
    s->shadow = NULL;
    s->shadow_rows = 0;
}

void sml_row_store_free(sml_backend *b, sml_row_store *s)
{
    sml_row_store_free_blocks(b, s);
    sml_row_store_free_shadow(b, s);
}

simil_status sml_row_store_sync(sml_backend *b, sml_row_store *s, int64_t used)
{
    assert(used >= 0 && used <= s->capacity);
    const int c = s->shadow_column;
    if (c < 0 || b->ops->shadow_sync == NULL) return SIMIL_OK;
    SML_TRY(b->ops->shadow_sync(b, &s->shadow, s->column[c], s->shadow_rows, used,
                                (int64_t)(s->width[c] / sizeof(float)), s->shadow_metric));
    s->shadow_rows = used;
    return SIMIL_OK;
}

/* A store of s's widths, host columns and shadowed column whose blocks are
 * all fresh (none yet), and no shadow yet. */
static sml_row_store sml_row_store_fresh(const sml_row_store *s, int64_t capacity)
{
    sml_row_store next = sml_row_store_empty(s->width[0], s->width[1]);
    next.host = s->host;
    next.shadow_column = s->shadow_column;
    next.shadow_metric = s->shadow_metric;
    next.capacity = capacity;
    return next;
}

simil_status sml_row_store_reserve(sml_backend *b, const sml_row_store *s, int64_t used,
                                   int64_t need, sml_row_store *next)
{
    assert(used >= 0 && used <= s->capacity);
    *next = *s;
    /* the shadow goes on with next, whose first used rows are s's */
    next->shadow_rows = used;
    if (need <= s->capacity) return SIMIL_OK;
    int64_t cap = s->capacity + s->capacity / 2;
    if (cap < need) cap = need;
    sml_row_store fresh = sml_row_store_fresh(s, cap);
    simil_status st = SIMIL_OK;
    for (int c = 0; c < SML_ROW_STORE_COLUMNS && st == SIMIL_OK; c++) {
        if (s->width[c] == 0) continue;
        if (!sml_row_store_is_host(s, c)) {
            st = sml_mem_clone(b, &fresh.column[c], s->column[c], (size_t)used * s->width[c],
                               (size_t)cap * s->width[c]);
        } else {
            st = sml_row_store_alloc(b, s, c, (size_t)cap * s->width[c], &fresh.column[c]);
            if (st == SIMIL_OK && used > 0)
                memcpy(fresh.column[c], s->column[c], (size_t)used * s->width[c]);
        }
    }
    if (st == SIMIL_OK)
        st = sml_mem_clone(b, (void **)&fresh.ids, s->ids, (size_t)used * sizeof(int64_t),
                           (size_t)cap * sizeof(int64_t));
    if (st == SIMIL_OK)
        st = sml_alloc((void **)&fresh.host_ids, (size_t)cap, sizeof(int64_t), "ids");
    if (st != SIMIL_OK) {
        sml_row_store_free_blocks(b, &fresh);
        return st;
    }
    if (used > 0) memcpy(fresh.host_ids, s->host_ids, (size_t)used * sizeof(int64_t));
    fresh.shadow = next->shadow;
    fresh.shadow_rows = next->shadow_rows;
    *next = fresh;
    return SIMIL_OK;
}

simil_status sml_row_store_commit(sml_backend *b, sml_row_store *s, sml_row_store *next,
                                  int64_t used)
{
    /* reserve hands s's shadow on to next, which the sync then replaces or
     * extends (freeing the old one itself); keep gives next none yet, and
     * s's is freed once next has its own */
    const int own_shadow = next->shadow != s->shadow;
    assert(!own_shadow || next->shadow == NULL);
    const simil_status st = sml_row_store_sync(b, next, used);
    if (st != SIMIL_OK) {
        sml_row_store_discard(b, s, next);
        return st;
    }
    if (next->host_ids != s->host_ids) sml_row_store_free_blocks(b, s);
    if (own_shadow) sml_row_store_free_shadow(b, s);
    *s = *next;
    return SIMIL_OK;
}

void sml_row_store_discard(sml_backend *b, const sml_row_store *s, sml_row_store *next)
{
    /* next's shadow is s's or none: only commit syncs it, and on success */
    assert(next->shadow == s->shadow || next->shadow == NULL);
    if (next->host_ids != s->host_ids) sml_row_store_free_blocks(b, next);
    *next = *s;
}

simil_status sml_row_store_put_ids(sml_backend *b, sml_row_store *s, int64_t at, int64_t n,
                                   const int64_t *ids)
{
    assert(at >= 0 && at + n <= s->capacity);
    SML_TRY(b->ops->mem_upload(b, s->ids + at, ids, (size_t)n * sizeof(int64_t)));
    memcpy(s->host_ids + at, ids, (size_t)n * sizeof(int64_t));
    return SIMIL_OK;
}

/* *out = a new block holding rows keep[0..n) of src. */
static simil_status sml_row_store_gather(sml_backend *b, void **out, const void *src,
                                         size_t row_bytes, int64_t n, const int64_t *keep)
{
    SML_TRY(b->ops->mem_alloc(b, (size_t)(n > 0 ? n : 1) * row_bytes, out));
    return b->ops->mem_move_rows(b, *out, NULL, src, keep, row_bytes, n);
}

/* The same for host column c of s. */
static simil_status sml_row_store_gather_host(sml_backend *b, const sml_row_store *s, int c,
                                              void **out, int64_t n, const int64_t *keep)
{
    const size_t w = s->width[c];
    SML_TRY(sml_row_store_alloc(b, s, c, (size_t)(n > 0 ? n : 1) * w, out));
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)*out + (size_t)i * w, (const char *)s->column[c] + (size_t)keep[i] * w, w);
    return SIMIL_OK;
}

simil_status sml_row_store_keep(sml_backend *b, const sml_row_store *s, int64_t used,
                                int64_t n_sorted, const int64_t *sorted_ids, sml_row_store *next,
                                int64_t *kept)
{
    *next = *s;
    *kept = used;
    int64_t *keep;
    SML_TRY(sml_alloc((void **)&keep, (size_t)(used > 0 ? used : 1), sizeof *keep,
                      "rows to keep"));
    int64_t n = 0;
    for (int64_t i = 0; i < used; i++)
        if (!sml_sorted_ids_contain(sorted_ids, n_sorted, s->host_ids[i])) keep[n++] = i;
    simil_status st = SIMIL_OK;
    if (n < used) {
        sml_row_store fresh = sml_row_store_fresh(s, n);
        for (int c = 0; c < SML_ROW_STORE_COLUMNS && st == SIMIL_OK; c++) {
            if (s->width[c] == 0) continue;
            st = sml_row_store_is_host(s, c)
                     ? sml_row_store_gather_host(b, s, c, &fresh.column[c], n, keep)
                     : sml_row_store_gather(b, &fresh.column[c], s->column[c], s->width[c], n,
                                            keep);
        }
        if (st == SIMIL_OK)
            st = sml_row_store_gather(b, (void **)&fresh.ids, s->ids, sizeof(int64_t), n, keep);
        if (st == SIMIL_OK)
            st = sml_alloc((void **)&fresh.host_ids, (size_t)(n > 0 ? n : 1), sizeof(int64_t),
                           "ids");
        if (st == SIMIL_OK) {
            for (int64_t i = 0; i < n; i++) fresh.host_ids[i] = s->host_ids[keep[i]];
            *next = fresh;
            *kept = n;
        } else {
            sml_row_store_free_blocks(b, &fresh);
        }
    }
    sml_free(keep);
    return st;
}

/* The first of the `used` rows with this id, or -1. */
static int64_t sml_row_store_find(const sml_row_store *s, int64_t used, int64_t id)
{
    for (int64_t i = 0; i < used; i++)
        if (s->host_ids[i] == id) return i;
    return -1;
}

void sml_row_store_ids(const sml_row_store *s, int64_t used, int64_t *out)
{
    if (used > 0) memcpy(out, s->host_ids, sizeof(int64_t) * (size_t)used);
}

simil_status sml_row_store_reconstruct(sml_backend *b, const sml_row_store *s, int64_t used,
                                       int64_t id, int c, void *out)
{
    const int64_t i = sml_row_store_find(s, used, id);
    SML_RETURN_IF(i < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "reconstruct: id %" PRId64 " is not in the index", id);
    return sml_row_store_get(b, s, c, i, out, s->width[c]);
}

simil_status sml_row_store_load_ids(sml_backend *b, sml_row_store *s, sml_reader *r,
                                    uint32_t tag, int64_t n, int64_t next_id,
                                    uint64_t file_row_bytes)
{
    assert(s->capacity == 0 && s->shadow == NULL && file_row_bytes > 0);
    uint64_t bytes;
    SML_TRY(sml_section_open(r, tag, &bytes));
    SML_RETURN_IF(bytes != (uint64_t)n * sizeof(int64_t), SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: %" PRId64 " vectors but %llu bytes of ids", r->path, n,
                  (unsigned long long)bytes);
    SML_RETURN_IF((uint64_t)n > r->size / file_row_bytes, SIMIL_ERR_CORRUPT,
                  "'%s' is truncated: %" PRId64 " vectors of %llu bytes cannot fit in %llu "
                  "bytes", r->path, n, (unsigned long long)file_row_bytes,
                  (unsigned long long)r->size);
    sml_row_store next;
    SML_TRY(sml_row_store_reserve(b, s, 0, n, &next));
    /* s was empty: nothing to free, and no shadow to sync before the rows
     * are read (the caller syncs it after, to the size of the rows) */
    *s = next;
    SML_TRY(sml_section_read(r, s->host_ids, (size_t)bytes));
    SML_TRY(sml_section_close(r));
    SML_TRY(sml_ids_check(r->path, n, s->host_ids, next_id));
    return b->ops->mem_upload(b, s->ids, s->host_ids, (size_t)bytes);
}

simil_status sml_row_store_remove(sml_backend *b, sml_row_store *s, int64_t used,
                                  int64_t n_sorted, const int64_t *sorted_ids, int64_t *removed)
{
    sml_row_store next;
    int64_t kept;
    *removed = 0;
    SML_TRY(sml_row_store_keep(b, s, used, n_sorted, sorted_ids, &next, &kept));
    if (kept == used) return SIMIL_OK; /* next is s */
    SML_TRY(sml_row_store_commit(b, s, &next, kept));
    *removed = used - kept;
    return SIMIL_OK;
}

simil_status sml_row_store_scan(const sml_row_store *s, int c, int64_t used, int64_t dim,
                                simil_metric metric, const sml_search_call *call,
                                sml_one_list *one, sml_ivf_scan_args *scan)
{
    one->offset = 0;
    one->size = used;
    SML_TRY(sml_calloc((void **)&one->probes, (size_t)(call->nq > 0 ? call->nq : 1),
                       sizeof *one->probes, "probes"));
    *scan = (sml_ivf_scan_args){
        .queries = call->queries,
        .nq = call->nq,
        .dim = dim,
        .lists = {
            .offset = &one->offset,
            .size = &one->size,
            .nlist = 1,
            .codes = s->column[c],
            .code_stride = s->width[c],
            .ids = s->ids,
        },
        .probes = {.nprobe = 1, .lists = one->probes},
        .k = call->k,
        .metric = metric,
        .distances = call->distances,
        .labels = call->labels,
        .threads = call->params.threads,
        .filter = call->params.allow,
        .queries_host = call->queries_host,
    };
    return SIMIL_OK;
}

void sml_row_store_scan_free(sml_one_list *one)
{
    sml_free(one->probes);
    one->probes = NULL;
}
