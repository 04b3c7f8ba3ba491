/* stream_add.c: training on a sample of a source, and adding a source chunk
 * by chunk (simil/stream.h).
 *
 * Any index takes a source through simil_index_add, one chunk at a time.
 * IVF-PQ, the index of billion-scale sets, takes it in two passes that keep
 * the device's memory at the final index: first every chunk is assigned to
 * its lists and encoded (generated on the GPU when the source is a generator,
 * so the rows never cross the bus), and the codes and lists wait in host
 * memory; then the inverted lists are laid out once at their final sizes and
 * the codes are appended chunk by chunk.  Growing the lists as chunks arrive
 * would move the whole arena many times, each time holding the old and the
 * new one in device memory at once: twice the index. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/progress.h"
#include "index/index_internal.h"
#include "index/ivf.h"
#include "index/stream_chunks.h"

static const int64_t sml_add_chunk_rows = (int64_t)1 << 20;

int64_t simil_index_train_sample(const simil_index *index, int64_t rows)
{
    if (index == NULL || rows <= 0) return 0;
    const int64_t lists = index->spec.ivf_nlist;
    const int64_t want = lists > 0 && 64 * lists > 100000 ? 64 * lists : 100000;
    return want < rows ? want : rows;
}

/* sample rows of src as `runs` evenly spaced runs of consecutive rows. */
static simil_status sml_read_sample(const simil_source *src, int64_t sample, float *out)
{
    const int64_t rows = simil_source_rows(src), dim = simil_source_dim(src);
    if (sample >= rows) return simil_source_read(src, 0, rows, out);
    const int64_t runs = sample < 256 ? sample : 256;
    int64_t at = 0;
    for (int64_t r = 0; r < runs; r++) {
        const int64_t len = sample / runs + (r < sample % runs ? 1 : 0);
        const int64_t start = rows / runs * r;  /* runs never overlap: len <= rows / runs */
        SML_TRY(simil_source_read(src, start, len, out + at * dim));
        at += len;
    }
    return SIMIL_OK;
}

simil_status simil_index_train_source(simil_index *index, const simil_source *source,
                                      int64_t sample_rows)
{
    SML_RETURN_IF(index == NULL || source == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "simil_index_train_source: index and source must not be NULL");
    SML_RETURN_IF(simil_source_dim(source) != index->dim, SIMIL_ERR_INVALID_ARGUMENT,
                  "'%s' has dimension %" PRId64 ", the index %" PRId64, simil_source_name(source),
                  simil_source_dim(source), index->dim);
    SML_RETURN_IF(sample_rows < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "train: sample_rows=%" PRId64 " is negative", sample_rows);
    if (index->vt->train == NULL) return SIMIL_OK;
    const int64_t rows = simil_source_rows(source);
    int64_t n = sample_rows > 0 ? sample_rows : simil_index_train_sample(index, rows);
    if (n > rows) n = rows;
    float *x;
    SML_TRY(sml_alloc((void **)&x, (size_t)(n > 0 ? n : 1), sizeof(float) * (size_t)index->dim,
                      "the training sample"));
    simil_status s = sml_read_sample(source, n, x);
    if (s == SIMIL_OK) s = simil_index_train(index, n, x);
    sml_free(x);
    return s;
}

/* ---- adding ---- */

typedef struct sml_add_job {
    simil_index *index;
    const simil_source *src;
    int64_t rows, chunk_rows, first_id;
    int64_t added;        /* rows in the index so far, ids first_id.. */
    int64_t *ids;         /* host: chunk_rows */
} sml_add_job;

static void sml_add_ids(sml_add_job *j, int64_t first, int64_t n)
{
    for (int64_t i = 0; i < n; i++) j->ids[i] = j->first_id + first + i;
}

/* Take back the rows added so far (their ids are new to the index) after
 * error s; if that fails too, say how many rows stayed. */
static simil_status sml_add_rollback(sml_add_job *j, simil_status s)
{
    char message[1024];
    snprintf(message, sizeof message, "%s", simil_last_error());
    int64_t at = 0;
    for (; at < j->added; at += j->chunk_rows) {
        const int64_t n = j->added - at < j->chunk_rows ? j->added - at : j->chunk_rows;
        sml_add_ids(j, at, n);
        int64_t removed;
        if (simil_index_remove(j->index, n, j->ids, &removed) != SIMIL_OK) break;
    }
    if (at < j->added)
        return sml_error(s, "%s; taking back the rows already added failed too (%s): the index "
                            "keeps the %" PRId64 " rows from id %" PRId64,
                         message, simil_last_error(), j->added - at, j->first_id + at);
    return sml_error(s, "%s", message);
}

/* Any index: simil_index_add, chunk by chunk. */
static simil_status sml_add_chunked(sml_add_job *j)
{
    simil_index *index = j->index;
    const unsigned flags = index->metric == SIMIL_METRIC_COSINE ? 0 : SML_CHUNKS_BOUND_NORMS;
    sml_chunks *chunks;
    SML_TRY(sml_chunks_open(&chunks, index->backend, j->src, j->chunk_rows, SML_CHUNKS_HOST,
                            flags, "the data"));
    simil_status s = SIMIL_OK;
    for (;;) {
        const float *x;
        int64_t first, n;
        s = sml_chunks_next(chunks, &x, &first, &n);
        if (s != SIMIL_OK || n == 0) break;
        sml_add_ids(j, first, n);
        sml_progress_mute();
        s = simil_index_add(index, n, x, j->ids);
        sml_progress_unmute();
        if (s != SIMIL_OK) break;
        j->added += n;
        sml_progress("add", first + n, j->rows);
    }
    sml_chunks_close(chunks);
    return s;
}

/* IVF-PQ, first pass: every row's list (as int32) and code, on the host. */
typedef struct sml_pq_store {
    int32_t *lists;      /* rows */
    uint8_t *codes;      /* rows x code_bytes */
    size_t code_bytes;   /* the PQ code, without the derived term 1 */
    size_t row_bytes;    /* an arena row */
    int64_t *chunk_lists;
    uint8_t *chunk_rows; /* chunk_rows x row_bytes */
} sml_pq_store;

static void sml_pq_store_free(sml_pq_store *st)
{
    sml_free(st->lists);
    sml_free(st->codes);
    sml_free(st->chunk_lists);
    sml_free(st->chunk_rows);
}

static simil_status sml_pq_store_init(const sml_add_job *j, sml_pq_store *st)
{
    const simil_index *index = j->index;
    const size_t rows = (size_t)(j->rows > 0 ? j->rows : 1), chunk = (size_t)j->chunk_rows;
    st->code_bytes = sml_ivf_pq_code_bytes(index);
    st->row_bytes = sml_ivf_pq_row_bytes(index->spec.pq_m, sml_kernel_metric(index->metric));
    SML_TRY(sml_alloc((void **)&st->lists, rows, sizeof *st->lists, "the list of every row"));
    SML_TRY(sml_alloc((void **)&st->codes, rows, st->code_bytes, "the code of every row"));
    SML_TRY(sml_alloc((void **)&st->chunk_lists, chunk, sizeof(int64_t), "a chunk's lists"));
    return sml_alloc((void **)&st->chunk_rows, chunk, st->row_bytes, "a chunk's codes");
}

static simil_status sml_pq_encode_all(sml_add_job *j, sml_pq_store *st)
{
    simil_index *index = j->index;
    const int cosine = index->metric == SIMIL_METRIC_COSINE;
    sml_chunks *chunks;
    SML_TRY(sml_chunks_open(&chunks, index->backend, j->src, j->chunk_rows, SML_CHUNKS_BACKEND,
                            cosine ? SML_CHUNKS_NORMALIZE : SML_CHUNKS_BOUND_NORMS, "the data"));
    simil_status s = SIMIL_OK;
    for (;;) {
        const float *x;
        int64_t first, n;
        s = sml_chunks_next(chunks, &x, &first, &n);
        if (s != SIMIL_OK || n == 0) break;
        sml_progress_mute();
        s = sml_ivf_pq_encode(index, n, x, 1, st->chunk_lists, st->chunk_rows);
        sml_progress_unmute();
        if (s != SIMIL_OK) break;
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) {
            st->lists[first + i] = (int32_t)st->chunk_lists[i];
            memcpy(st->codes + (size_t)(first + i) * st->code_bytes,
                   st->chunk_rows + (size_t)i * st->row_bytes, st->code_bytes);
        }
        sml_progress("add", first + n, j->rows);
    }
    sml_chunks_close(chunks);
    return s;
}

/* Second pass: lists laid out at their final sizes, then the rows appended. */
static simil_status sml_pq_place_all(sml_add_job *j, sml_pq_store *st)
{
    simil_index *index = j->index;
    const int64_t nlist = index->spec.ivf_nlist > 0 ? index->spec.ivf_nlist : 1;
    int64_t *extra;
    SML_TRY(sml_calloc((void **)&extra, (size_t)nlist, sizeof *extra, "list sizes"));
    for (int64_t i = 0; i < j->rows; i++) extra[st->lists[i]]++;
    simil_status s = sml_ivf_pq_reserve(index, extra);
    sml_free(extra);
    for (int64_t first = 0; first < j->rows && s == SIMIL_OK; first += j->chunk_rows) {
        const int64_t n = j->rows - first < j->chunk_rows ? j->rows - first : j->chunk_rows;
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) {
            st->chunk_lists[i] = st->lists[first + i];
            uint8_t *row = st->chunk_rows + (size_t)i * st->row_bytes;
            memcpy(row, st->codes + (size_t)(first + i) * st->code_bytes, st->code_bytes);
            memset(row + st->code_bytes, 0, st->row_bytes - st->code_bytes);
        }
        sml_add_ids(j, first, n);
        s = sml_ivf_pq_append(index, n, st->chunk_lists, st->chunk_rows, j->ids);
        if (s == SIMIL_OK) {
            index->ntotal += n;
            if (j->first_id + first + n > index->next_id) index->next_id = j->first_id + first + n;
        }
        sml_progress("add: placing", first + n, j->rows);
    }
    return s;
}

/* Encode, then place; a failure while placing truncates the lists back to
 * their sizes before (no allocation: it cannot fail for want of memory). */
static simil_status sml_add_ivf_pq(sml_add_job *j)
{
    simil_index *index = j->index;
    sml_ivf *ivf;
    struct sml_pq *pq;
    int by_residual; /* the encoding (sml_ivf_pq_encode) knows; placing does not */
    sml_ivf_pq_parts(index, &ivf, &pq, &by_residual);
    sml_pq_store st = {0};
    int64_t *sizes = NULL;
    const int64_t ntotal = index->ntotal, next_id = index->next_id;
    simil_status s = sml_pq_store_init(j, &st);
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&sizes, (size_t)ivf->nlist, sizeof *sizes, "list sizes");
    if (s == SIMIL_OK) s = sml_pq_encode_all(j, &st);
    if (s == SIMIL_OK) {
        memcpy(sizes, ivf->size, sizeof *sizes * (size_t)ivf->nlist);
        s = sml_pq_place_all(j, &st);
        if (s != SIMIL_OK) {
            sml_ivf_truncate(ivf, sizes);
            index->ntotal = ntotal;
            index->next_id = next_id;
        }
    }
    sml_free(sizes);
    sml_pq_store_free(&st);
    return s;
}

static simil_status sml_add_check(const simil_index *index, const simil_source *source,
                                  const simil_stream_params *p)
{
    SML_RETURN_IF(index == NULL || source == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "simil_index_add_source: index and source must not be NULL");
    SML_RETURN_IF(!index->trained, SIMIL_ERR_NOT_TRAINED,
                  "index '%s' must be trained before vectors are added; call train first "
                  "(simil_index_train_source)",
                  index->description);
    SML_RETURN_IF(simil_source_dim(source) != index->dim, SIMIL_ERR_INVALID_ARGUMENT,
                  "'%s' has dimension %" PRId64 ", the index %" PRId64, simil_source_name(source),
                  simil_source_dim(source), index->dim);
    SML_RETURN_IF(p->chunk_rows < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "add: chunk_rows=%" PRId64 " is negative", p->chunk_rows);
    SML_RETURN_IF(p->first_id < -1, SIMIL_ERR_INVALID_ARGUMENT,
                  "add: first_id=%" PRId64 " must be -1 (sequential ids) or an id", p->first_id);
    SML_RETURN_IF(p->first_id >= 0 && p->first_id < index->next_id, SIMIL_ERR_INVALID_ARGUMENT,
                  "add: first_id=%" PRId64 " is below %" PRId64 ", one past the largest id the "
                  "index has held; ids of a source must be new to the index",
                  p->first_id, index->next_id);
    const int64_t first = p->first_id >= 0 ? p->first_id : index->next_id;
    SML_RETURN_IF(simil_source_rows(source) > INT64_MAX - 1 - first, SIMIL_ERR_INVALID_ARGUMENT,
                  "add: ids from %" PRId64 " for %" PRId64 " rows would overflow int64", first,
                  simil_source_rows(source));
    return SIMIL_OK;
}

simil_status simil_index_add_source(simil_index *index, const simil_source *source,
                                    const simil_stream_params *params)
{
    simil_stream_params p;
    simil_stream_params_init(&p);
    if (params != NULL) p = *params;
    SML_TRY(sml_add_check(index, source, &p));
    sml_add_job j = {
        .index = index,
        .src = source,
        .rows = simil_source_rows(source),
        .chunk_rows = p.chunk_rows > 0 ? p.chunk_rows : sml_add_chunk_rows,
        .first_id = p.first_id >= 0 ? p.first_id : index->next_id,
    };
    if (j.rows == 0) return SIMIL_OK;
    if (j.chunk_rows > j.rows) j.chunk_rows = j.rows;
    SML_TRY(sml_alloc((void **)&j.ids, (size_t)j.chunk_rows, sizeof *j.ids, "ids"));
    simil_status s = sml_index_is_ivf_pq(index) ? sml_add_ivf_pq(&j) : sml_add_chunked(&j);
    if (s != SIMIL_OK && j.added > 0) s = sml_add_rollback(&j, s);
    sml_free(j.ids);
    return s;
}
