/* tools/cli_recall.c: ground truth and the recall measures that "simil
 * search" and "simil bench" report (see cli.h).
 *
 * Recall is counted the way ann-benchmarks counts it wherever the true
 * distances are known: a result counts when its exact distance to the query
 * is within 1e-3 of the true distance it stands for, so that ties (duplicate
 * vectors, equidistant points) do not turn correct answers into misses.
 * Distances are those of ann-benchmarks: the Euclidean distance (not squared)
 * for l2, 1 - cosine similarity for cosine ("angular"), and the negated inner
 * product for ip, all computed in double precision from the stored vectors.
 * Where no distances are known, recall compares ids. */
#define _POSIX_C_SOURCE 200809L

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* ann-benchmarks' tolerance on distances (knn_threshold's epsilon). */
static const double cli_recall_epsilon = 1e-3;

void cli_truth_free(cli_truth *t)
{
    free(t->ids);
    free(t->distances);
    memset(t, 0, sizeof *t);
}

/* ---- reading ---- */

/* "FILE.hdf5:neighbors" -> "FILE.hdf5:distances" into out; 0 if path is not
 * an HDF5 neighbors dataset. */
static int cli_distances_spec(const char *path, char *out, size_t size)
{
    static const char tail[] = ":neighbors";
    size_t n = strlen(path), m = sizeof tail - 1;
    if (n <= m || n - m >= size || strcmp(path + n - m, tail) != 0) return 0;
    snprintf(out, size, "%.*s", (int)(n - m), path);
    if (!cli_is_ann_file(out)) return 0;
    return snprintf(out, size, "%.*s:distances", (int)(n - m), path) < (int)size;
}

/* The true distances of an ann-benchmarks file, when it has them and they
 * are distances in metric; else t->distances stays NULL. */
static int cli_truth_read_distances(const char *path, simil_metric metric, cli_truth *t)
{
    char spec[4096];
    simil_matrix m = {0, 0, SIMIL_DTYPE_FLOAT32, NULL};
    simil_metric declared;
    int has = 0;
    int64_t rows = 0, cols = 0;
    if (!cli_distances_spec(path, spec, sizeof spec)) return CLI_EXIT_OK;
    if (simil_dataset_metric(spec, &declared, &has) != SIMIL_OK || !has || declared != metric)
        return CLI_EXIT_OK;
    if (simil_matrix_info(spec, &rows, &cols, NULL) != SIMIL_OK) return CLI_EXIT_OK;
    if (rows != t->nq || cols < t->cols) return CLI_EXIT_OK;
    simil_status st = simil_matrix_read_float(spec, 0, -1, &m);
    if (st != SIMIL_OK) return cli_fail(st, spec);
    if (!(t->distances = malloc((size_t)(t->nq * t->cols) * sizeof *t->distances))) {
        simil_matrix_free(&m);
        return cli_error("out of memory for the true distances");
    }
    for (int64_t q = 0; q < t->nq; q++)
        for (int64_t j = 0; j < t->cols; j++)
            t->distances[q * t->cols + j] = ((const float *)m.data)[q * cols + j];
    simil_matrix_free(&m);
    return CLI_EXIT_OK;
}

int cli_truth_read(const char *path, int64_t nq, int64_t k, simil_metric metric, cli_truth *t)
{
    simil_matrix m = {0, 0, SIMIL_DTYPE_INT32, NULL};
    int rc = CLI_EXIT_OK;
    memset(t, 0, sizeof *t);
    simil_status st = simil_matrix_read(path, 0, -1, &m);
    if (st != SIMIL_OK) return cli_fail(st, path);
    rc = cli_truth_take(path, &m, nq, k, t);
    simil_matrix_free(&m);
    if (!rc) rc = cli_truth_read_distances(path, metric, t);
    if (rc) cli_truth_free(t);
    return rc;
}

int cli_truth_take(const char *path, const simil_matrix *m, int64_t nq, int64_t k, cli_truth *t)
{
    memset(t, 0, sizeof *t);
    if (m->dtype != SIMIL_DTYPE_INT32 && m->dtype != SIMIL_DTYPE_INT64)
        return cli_error("%s: ground truth must hold int32 or int64 ids", path);
    if (m->rows != nq)
        return cli_error("%s has %" PRId64 " rows but there are %" PRId64 " queries", path,
                         m->rows, nq);
    if (m->cols < k)
        return cli_error("%s has %" PRId64 " neighbours per query, fewer than k=%" PRId64, path,
                         m->cols, k);
    if (!(t->ids = malloc(((size_t)(m->rows * m->cols) + 1) * sizeof *t->ids)))
        return cli_error("out of memory for the ground truth");
    for (int64_t i = 0; i < m->rows * m->cols; i++)
        t->ids[i] = m->dtype == SIMIL_DTYPE_INT64 ? ((const int64_t *)m->data)[i]
                                                  : ((const int32_t *)m->data)[i];
    t->nq = m->rows;
    t->cols = m->cols;
    return CLI_EXIT_OK;
}

/* ---- exact distances ---- */

/* The distance of ann-benchmarks between query q and vector x, in double. */
static double cli_distance(simil_metric metric, const float *q, const float *x, int64_t dim)
{
    double dot = 0, qq = 0, xx = 0, l2 = 0;
    for (int64_t j = 0; j < dim; j++) {
        double a = q[j], b = x[j];
        dot += a * b;
        qq += a * a;
        xx += b * b;
        l2 += (a - b) * (a - b);
    }
    switch (metric) {
    case SIMIL_METRIC_L2: return sqrt(l2);
    case SIMIL_METRIC_IP: return -dot;
    case SIMIL_METRIC_COSINE:
        /* simil's cosine of a zero vector is 0 (simil/index.h) */
        return qq > 0 && xx > 0 ? 1.0 - dot / (sqrt(qq) * sqrt(xx)) : 1.0;
    }
    return INFINITY;
}

void cli_exact_distances(simil_metric metric, const simil_matrix *base,
                         const simil_matrix *queries, int64_t k, const int64_t *ids,
                         double *out)
{
    const float *xb = base->data, *xq = queries->data;
    const int64_t dim = base->cols;
    for (int64_t q = 0; q < queries->rows; q++)
        for (int64_t j = 0; j < k; j++) {
            int64_t id = ids[q * k + j];
            out[q * k + j] = id >= 0 && id < base->rows
                                 ? cli_distance(metric, xq + q * dim, xb + id * dim, dim)
                                 : INFINITY;
        }
}

int cli_truth_distances(cli_truth *t, simil_metric metric, const simil_matrix *base,
                        const simil_matrix *queries)
{
    if (t->distances) return CLI_EXIT_OK;
    if (!(t->distances = malloc(((size_t)(t->nq * t->cols) + 1) * sizeof *t->distances)))
        return cli_error("out of memory for the true distances");
    cli_exact_distances(metric, base, queries, t->cols, t->ids, t->distances);
    return CLI_EXIT_OK;
}

/* ---- recall ---- */

static int cli_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sort the ids >= 0 of v[0..n) into out without repeats; returns how many. */
static int64_t cli_id_set(const int64_t *v, int64_t n, int64_t *out)
{
    int64_t m = 0, u = 0;
    for (int64_t i = 0; i < n; i++)
        if (v[i] >= 0) out[m++] = v[i];
    qsort(out, (size_t)m, sizeof *out, cli_cmp_i64);
    for (int64_t i = 0; i < m; i++)
        if (u == 0 || out[i] != out[u - 1]) out[u++] = out[i];
    return u;
}

/* One query by id: *first (found[0] is the true nearest), *anywhere (the
 * true nearest is among found), and how many of the true top k were found. */
static int64_t cli_recall_ids(const int64_t *f, const int64_t *t, int64_t k, int64_t *scratch,
                              int *first, int *anywhere)
{
    *first = t[0] >= 0 && f[0] == t[0];
    *anywhere = 0;
    for (int64_t j = 0; j < k && t[0] >= 0; j++) *anywhere |= f[j] == t[0];
    int64_t *a = scratch, *b = scratch + k;
    int64_t na = cli_id_set(f, k, a), nb = cli_id_set(t, k, b), i = 0, j = 0, both = 0;
    while (i < na && j < nb) {
        if (a[i] == b[j]) both++, i++, j++;
        else if (a[i] < b[j]) i++;
        else j++;
    }
    return both;
}

/* One query by distance, as ann-benchmarks: a result counts when within
 * epsilon of the true distance it stands for. */
static int64_t cli_recall_distances(const double *f, const double *t, int64_t k, int *first,
                                    int *anywhere)
{
    const double near1 = t[0] + cli_recall_epsilon, neark = t[k - 1] + cli_recall_epsilon;
    int64_t within = 0;
    *first = f[0] <= near1;
    *anywhere = 0;
    for (int64_t j = 0; j < k; j++) {
        *anywhere |= f[j] <= near1;
        within += f[j] <= neark;
    }
    return within;
}

int cli_recall(int64_t nq, int64_t k, const int64_t *found, const double *found_distances,
               const cli_truth *truth, cli_recall_result *r)
{
    int64_t *scratch = malloc(2 * (size_t)k * sizeof *scratch);
    int64_t first = 0, anywhere = 0;
    double sum = 0;
    assert(k >= 1 && truth->cols >= k && truth->nq == nq);
    if (!scratch) return -1;
    r->by_distance = found_distances && truth->distances;
    for (int64_t q = 0; q < nq; q++) {
        int one, any;
        int64_t n = r->by_distance
                        ? cli_recall_distances(found_distances + q * k,
                                               truth->distances + q * truth->cols, k, &one, &any)
                        : cli_recall_ids(found + q * k, truth->ids + q * truth->cols, k, scratch,
                                         &one, &any);
        first += one;
        anywhere += any;
        sum += (double)n / (double)k;
    }
    free(scratch);
    r->one_at_1 = nq > 0 ? (double)first / (double)nq : 0.0;
    r->one_at_k = nq > 0 ? (double)anywhere / (double)nq : 0.0;
    r->k_at_k = nq > 0 ? sum / (double)nq : 0.0;
    return 0;
}
