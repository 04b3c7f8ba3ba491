/* knn_graph.c: the parts of k-NN graph construction that need no index
 * (knn_graph.h): dropping each row's self, seeded samples of nodes, merging
 * top-r lists and counting their overlap for the GPU paper's quality measure,
 * and graph files written chunk by chunk so that a graph larger than memory
 * can be built. */
#include "algo/knn_graph.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/rng.h"

void sml_knn_graph_drop_self(int64_t rows, int64_t first, const int64_t *self, int64_t k,
                             const int64_t *in_ids, const float *in_dist, int64_t *out_ids,
                             float *out_dist)
{
    for (int64_t i = 0; i < rows; i++) {
        const int64_t *src = in_ids + i * (k + 1);
        int64_t me = self != NULL ? self[i] : first + i, drop = k;
        for (int64_t j = 0; j <= k; j++)
            if (src[j] == me) {
                drop = j;
                break;
            }
        int64_t *dst = out_ids + i * k;
        memcpy(dst, src, sizeof *dst * (size_t)drop);
        memcpy(dst + drop, src + drop + 1, sizeof *dst * (size_t)(k - drop));
        if (out_dist != NULL) {
            const float *dsrc = in_dist + i * (k + 1);
            float *ddst = out_dist + i * k;
            memcpy(ddst, dsrc, sizeof *ddst * (size_t)drop);
            memcpy(ddst + drop, dsrc + drop + 1, sizeof *ddst * (size_t)(k - drop));
        }
    }
}

/* Knuth's selection sampling (TAOCP 3.4.2, algorithm S): one pass over the
 * ids, each taken with probability (still needed) / (still left), which gives
 * every m-subset the same chance and the result already sorted. */
void sml_knn_graph_sample(int64_t n, int64_t m, uint64_t seed, int64_t *out)
{
    uint64_t state = seed ^ 0x6b6e6e2d67726170ull; /* "knn-grap" */
    int64_t taken = 0;
    for (int64_t i = 0; i < n && taken < m; i++) {
        double u = sml_rng_uniform(&state);
        if ((double)(n - i) * u < (double)(m - taken)) out[taken++] = i;
    }
}

/* 1 if slot (ia, da) ranks before slot (ib, db). */
static int sml_knn_before(int largest, int64_t ia, float da, int64_t ib, float db)
{
    if (ia < 0 || ib < 0) return ib < 0 && ia >= 0;
    if (da != db) return largest ? da > db : da < db;
    return ia < ib;
}

void sml_knn_graph_merge(int64_t r, int largest, int64_t *a_ids, float *a_dist,
                         const int64_t *b_ids, const float *b_dist, int64_t *tmp_ids,
                         float *tmp_dist)
{
    int64_t i = 0, j = 0;
    for (int64_t o = 0; o < r; o++) {
        if (sml_knn_before(largest, b_ids[j], b_dist[j], a_ids[i], a_dist[i])) {
            tmp_ids[o] = b_ids[j];
            tmp_dist[o] = b_dist[j++];
        } else {
            tmp_ids[o] = a_ids[i];
            tmp_dist[o] = a_dist[i++];
        }
    }
    memcpy(a_ids, tmp_ids, sizeof *a_ids * (size_t)r);
    memcpy(a_dist, tmp_dist, sizeof *a_dist * (size_t)r);
}

int64_t sml_knn_graph_overlap(const int64_t *found, const int64_t *truth, int64_t r)
{
    int64_t both = 0;
    for (int64_t j = 0; j < r; j++) {
        if (truth[j] < 0) continue;
        for (int64_t i = 0; i < r; i++)
            if (found[i] == truth[j]) {
                both++;
                break;
            }
    }
    return both;
}

/* ---- graph files ---- */

typedef enum sml_graph_format { SML_GRAPH_TEXMEX, SML_GRAPH_NPY } sml_graph_format;

struct sml_graph_file {
    sml_writer *w;
    sml_graph_format format;
    int is_ids;
    int64_t n, k, written;
    int32_t *narrow; /* one .ivecs row */
};

static int sml_graph_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The npy 1.0 header of an n x k matrix, padded so the data starts at a
 * multiple of 64 bytes, as numpy writes it. */
static size_t sml_graph_npy_header(int is_ids, int64_t n, int64_t k, char out[256])
{
    char dict[192];
    int len = snprintf(dict, sizeof dict,
                       "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRId64
                       ", %" PRId64 "), }",
                       is_ids ? "<i8" : "<f4", n, k);
    size_t total = (10 + (size_t)len + 1 + 63) / 64 * 64, hlen = total - 10;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (char)(hlen & 0xff);
    out[9] = (char)(hlen >> 8);
    memcpy(out + 10, dict, (size_t)len);
    memset(out + 10 + len, ' ', hlen - (size_t)len - 1);
    out[total - 1] = '\n';
    return total;
}

static simil_status sml_graph_file_format(const char *path, int is_ids, sml_graph_format *fmt)
{
    SML_RETURN_IF(path == NULL || !*path, SIMIL_ERR_INVALID_ARGUMENT,
                  "no %s file name given", is_ids ? "graph ids" : "graph distances");
    if (sml_graph_ends_with(path, ".npy")) {
        *fmt = SML_GRAPH_NPY;
        return SIMIL_OK;
    }
    *fmt = SML_GRAPH_TEXMEX;
    SML_RETURN_IF(!sml_graph_ends_with(path, is_ids ? ".ivecs" : ".fvecs"),
                  SIMIL_ERR_INVALID_ARGUMENT, "cannot write '%s': graph %s go to %s or .npy",
                  path, is_ids ? "ids" : "distances", is_ids ? ".ivecs" : ".fvecs");
    return SIMIL_OK;
}

simil_status sml_graph_file_open(sml_graph_file **out, const char *path, int is_ids, int64_t n,
                                 int64_t k)
{
    *out = NULL;
    sml_graph_format fmt;
    SML_TRY(sml_graph_file_format(path, is_ids, &fmt));
    SML_RETURN_IF(fmt == SML_GRAPH_TEXMEX && k > INT32_MAX, SIMIL_ERR_INVALID_ARGUMENT,
                  "cannot write '%s': k=%" PRId64 " is too wide for a texmex row", path, k);
    sml_graph_file *f;
    SML_TRY(sml_calloc((void **)&f, 1, sizeof *f, "a graph file"));
    f->format = fmt;
    f->is_ids = is_ids;
    f->n = n;
    f->k = k;
    simil_status s = SIMIL_OK;
    if (fmt == SML_GRAPH_TEXMEX && is_ids)
        s = sml_alloc((void **)&f->narrow, (size_t)k, sizeof *f->narrow, "an .ivecs row");
    if (s == SIMIL_OK) s = sml_writer_open(&f->w, path);
    if (s == SIMIL_OK && fmt == SML_GRAPH_NPY) {
        char header[256];
        s = sml_writer_write(f->w, header, sml_graph_npy_header(is_ids, n, k, header));
    }
    if (s != SIMIL_OK) {
        sml_graph_file_abort(f);
        return s;
    }
    *out = f;
    return SIMIL_OK;
}

static simil_status sml_graph_file_texmex_row(sml_graph_file *f, const void *row)
{
    int32_t dim = (int32_t)f->k;
    SML_TRY(sml_writer_write(f->w, &dim, sizeof dim));
    if (!f->is_ids) return sml_writer_write(f->w, row, sizeof(float) * (size_t)f->k);
    const int64_t *ids = row;
    for (int64_t j = 0; j < f->k; j++) {
        SML_RETURN_IF(ids[j] > INT32_MAX, SIMIL_ERR_INVALID_ARGUMENT,
                      "cannot write '%s': id %" PRId64 " does not fit in the int32 of .ivecs; "
                      "write .npy instead",
                      sml_writer_path(f->w), ids[j]);
        f->narrow[j] = (int32_t)ids[j];
    }
    return sml_writer_write(f->w, f->narrow, sizeof(int32_t) * (size_t)f->k);
}

simil_status sml_graph_file_rows(sml_graph_file *f, int64_t count, const void *rows)
{
    size_t row_bytes = (size_t)f->k * (f->is_ids ? sizeof(int64_t) : sizeof(float));
    SML_RETURN_IF(f->written + count > f->n, SIMIL_ERR_INTERNAL,
                  "graph file '%s': %" PRId64 " rows written past the %" PRId64 " announced",
                  sml_writer_path(f->w), f->written + count, f->n);
    if (f->format == SML_GRAPH_NPY) {
        SML_TRY(sml_writer_write(f->w, rows, row_bytes * (size_t)count));
    } else {
        for (int64_t i = 0; i < count; i++)
            SML_TRY(sml_graph_file_texmex_row(f, (const char *)rows + row_bytes * (size_t)i));
    }
    f->written += count;
    return SIMIL_OK;
}

simil_status sml_graph_file_commit(sml_graph_file *f)
{
    if (f->written != f->n) {
        simil_status s = sml_error(SIMIL_ERR_INTERNAL,
                                   "graph file '%s': %" PRId64 " of %" PRId64 " rows written",
                                   sml_writer_path(f->w), f->written, f->n);
        sml_graph_file_abort(f);
        return s;
    }
    simil_status s = sml_writer_commit(f->w);
    f->w = NULL;
    sml_free(f->narrow);
    sml_free(f);
    return s;
}

void sml_graph_file_abort(sml_graph_file *f)
{
    if (f == NULL) return;
    sml_writer_abort(f->w);
    sml_free(f->narrow);
    sml_free(f);
}
