/* kmeans.c: the k-means driver (the GPU paper, "k-means"), the same on every
 * backend.
 *
 * Each Lloyd iteration assigns the (subsampled) training points to their
 * nearest centroid with the backend's exact k-NN (k = 1: GEMM plus an
 * arg-min; on a GPU the fp16 fast path, through a shadow of the centroids
 * made anew each iteration), then recomputes each centroid as the mean of
 * its points with the backend's cluster_sums, which adds rows in a fixed order so that a seed gives
 * the same centroids on a backend whatever its thread count.  An empty cluster
 * is reseeded by splitting a large one, chosen with probability proportional
 * to its size, as Faiss does.  Centroids stay on the host between iterations
 * (k x dim floats); the training points stay in backend memory. */
#include "algo/kmeans.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/rng.h"
#include "core/vectors.h"

/* Here rather than beside simil_kmeans (src/index/kmeans_api.c): PQ training
 * and inverted files start from these defaults too, and algo must not call up
 * into index. */
void simil_kmeans_params_init(simil_kmeans_params *params)
{
    if (params == NULL) return;
    memset(params, 0, sizeof *params);
    params->iterations = 20;
    params->init = SIMIL_KMEANS_INIT_RANDOM;
    params->max_points_per_centroid = 256;
    params->seed = 1234;
    params->device = "auto";
}

static int sml_kmeans_cmp_index(const void *pa, const void *pb)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

/* The first `count` entries of a seeded shuffle of 0..n-1, sorted. */
static simil_status sml_kmeans_sample(int64_t n, int64_t count, uint64_t *rng, int64_t *out)
{
    int64_t *perm;
    SML_TRY(sml_alloc((void **)&perm, (size_t)n, sizeof *perm, "a k-means sample"));
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = 0; i < count; i++) {
        int64_t j = i + (int64_t)(sml_rng_next(rng) % (uint64_t)(n - i));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    memcpy(out, perm, sizeof *out * (size_t)count);
    sml_free(perm);
    /* ascending, for locality when the rows are copied */
    qsort(out, (size_t)count, sizeof *out, sml_kmeans_cmp_index);
    return SIMIL_OK;
}

static double sml_kmeans_l2(const float *a, const float *b, int64_t dim)
{
    double s = 0;
    for (int64_t j = 0; j < dim; j++) {
        double d = (double)a[j] - b[j];
        s += d * d;
    }
    return s;
}

/* k-means++: each new centroid drawn with probability proportional to the
 * squared distance to the nearest one chosen so far.  O(n k dim). */
static simil_status sml_kmeans_plusplus(int64_t n, int64_t dim, const float *x, int64_t k,
                                        uint64_t *rng, float *centroids)
{
    double *nearest;
    SML_TRY(sml_alloc((void **)&nearest, (size_t)n, sizeof *nearest, "k-means++ distances"));
    int64_t first = (int64_t)(sml_rng_next(rng) % (uint64_t)n);
    memcpy(centroids, x + first * dim, sizeof(float) * (size_t)dim);
    for (int64_t c = 1; c <= k; c++) {
        const float *last = centroids + (c - 1) * dim;
        double total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            double d = sml_kmeans_l2(x + i * dim, last, dim);
            if (c == 1 || d < nearest[i]) nearest[i] = d;
            total += nearest[i];
        }
        if (c == k) break;
        double target = sml_rng_uniform(rng) * total;
        int64_t pick = n - 1;
        for (int64_t i = 0; i < n; i++) {
            target -= nearest[i];
            if (target < 0) {
                pick = i;
                break;
            }
        }
        memcpy(centroids + c * dim, x + pick * dim, sizeof(float) * (size_t)dim);
        sml_progress("kmeans++", c + 1, k);
    }
    sml_free(nearest);
    return SIMIL_OK;
}

/* New centroids from sums and counts; empty clusters split a large one. */
static void sml_kmeans_update(int64_t k, int64_t dim, const float *sums, int64_t *counts,
                              int64_t points, uint64_t *rng, int spherical, float *centroids)
{
    for (int64_t c = 0; c < k; c++) {
        if (counts[c] == 0) continue;
        for (int64_t j = 0; j < dim; j++)
            centroids[c * dim + j] = sums[c * dim + j] / (float)counts[c];
    }
    const float eps = 1.0f / 1024.0f;
    for (int64_t c = 0; c < k; c++) {
        if (counts[c] > 0) continue;
        int64_t big = 0;
        for (;;) {
            /* a cluster of size s is picked with probability (s - 1) / (points - k) */
            double p = (double)(counts[big] - 1) / (double)(points - k);
            if (sml_rng_uniform(rng) < p) break;
            big = (big + 1) % k;
        }
        float *a = centroids + c * dim, *b = centroids + big * dim;
        memcpy(a, b, sizeof(float) * (size_t)dim);
        for (int64_t j = 0; j < dim; j++) {
            float s = (j % 2 == 0) ? eps : -eps;
            a[j] *= 1 + s;
            b[j] *= 1 - s;
        }
        counts[c] = counts[big] / 2;
        counts[big] -= counts[c];
    }
    if (spherical) sml_vectors_normalize(centroids, k, dim, centroids);
}

/* Nearest centroid of each of n points (any memory the backend's knn takes). */
static simil_status sml_kmeans_assign(sml_backend *b, const float *c_mem, const float *cn_mem,
                                      const int64_t *ids_mem, const void *c_shadow, int64_t k,
                                      int64_t dim, const float *points, int64_t n, float *dist,
                                      int64_t *labels)
{
    sml_knn_args args = {
        .base = c_mem,
        .base_norms = cn_mem,
        .base_ids = ids_mem,
        .base_shadow = c_shadow,
        .n = k,
        .dim = dim,
        .queries = points,
        .nq = n,
        .k = 1,
        .metric = SIMIL_METRIC_L2,
        .distances = dist,
        .labels = labels,
    };
    return b->ops->knn(b, &args);
}

typedef struct sml_kmeans_state {
    float *points;     /* host: the training sample (or the caller's x) */
    float *x_mem;      /* backend copy of points (== points on the CPU) */
    float *c_mem;      /* backend: centroids, their norms, ids 0..k-1 */
    float *cn_mem;
    int64_t *ids_mem;
    void *c_shadow;    /* the backend's shadow of the centroids, or NULL */
    float *dist;       /* host, per training point */
    int64_t *labels;
    float *sums;       /* host, k x dim */
    int64_t *counts;
    int64_t *sample;
} sml_kmeans_state;

static void sml_kmeans_free(sml_backend *b, sml_kmeans_state *s, const float *x)
{
    if (s->x_mem != s->points) b->ops->mem_free(b, s->x_mem);
    if (s->points != x) sml_free(s->points);
    b->ops->mem_free(b, s->c_mem);
    b->ops->mem_free(b, s->cn_mem);
    b->ops->mem_free(b, s->ids_mem);
    if (s->c_shadow != NULL) b->ops->shadow_free(b, s->c_shadow);
    sml_free(s->dist);
    sml_free(s->labels);
    sml_free(s->sums);
    sml_free(s->counts);
    sml_free(s->sample);
}

static simil_status sml_kmeans_setup(sml_backend *b, const simil_kmeans_params *p, int64_t n,
                                     int64_t dim, const float *x, int64_t m, uint64_t *rng,
                                     sml_kmeans_state *s)
{
    const int64_t k = p->k;
    s->points = (float *)x;
    if (m < n) {
        SML_TRY(sml_alloc((void **)&s->sample, (size_t)m, sizeof *s->sample, "a sample"));
        SML_TRY(sml_kmeans_sample(n, m, rng, s->sample));
        SML_TRY(sml_alloc((void **)&s->points, (size_t)(m * dim), sizeof(float), "a sample"));
        for (int64_t i = 0; i < m; i++)
            memcpy(s->points + i * dim, x + s->sample[i] * dim, sizeof(float) * (size_t)dim);
    }
    s->x_mem = s->points;
    if (b->gpu >= 0) {
        SML_TRY(b->ops->mem_alloc(b, sizeof(float) * (size_t)(m * dim), (void **)&s->x_mem));
        SML_TRY(b->ops->mem_upload(b, s->x_mem, s->points, sizeof(float) * (size_t)(m * dim)));
    }
    SML_TRY(b->ops->mem_alloc(b, sizeof(float) * (size_t)(k * dim), (void **)&s->c_mem));
    SML_TRY(b->ops->mem_alloc(b, sizeof(float) * (size_t)k, (void **)&s->cn_mem));
    SML_TRY(b->ops->mem_alloc(b, sizeof(int64_t) * (size_t)k, (void **)&s->ids_mem));
    SML_TRY(sml_alloc((void **)&s->dist, (size_t)m, sizeof(float), "k-means distances"));
    SML_TRY(sml_alloc((void **)&s->labels, (size_t)(n > m ? n : m), sizeof(int64_t),
                      "k-means labels"));
    SML_TRY(sml_alloc((void **)&s->sums, (size_t)(k * dim), sizeof(float), "k-means sums"));
    SML_TRY(sml_alloc((void **)&s->counts, (size_t)k, sizeof(int64_t), "k-means counts"));
    for (int64_t c = 0; c < k; c++) s->labels[c] = c;
    return b->ops->mem_upload(b, s->ids_mem, s->labels, sizeof(int64_t) * (size_t)k);
}

static simil_status sml_kmeans_upload_centroids(sml_backend *b, sml_kmeans_state *s, int64_t k,
                                                int64_t dim, const float *centroids)
{
    SML_TRY(b->ops->mem_upload(b, s->c_mem, centroids, sizeof(float) * (size_t)(k * dim)));
    SML_TRY(b->ops->row_norms(b, k, dim, s->c_mem, s->cn_mem));
    /* every centroid moved: the whole shadow anew.  With it the GPU assigns
     * on fp16 tensor cores with the exact search's proven bound and exact
     * re-rank (cuda_knn.cu), the same nearest centroids as fp32 but for
     * rounding: an assignment of 262,144 points to 4,096 centroids took
     * 30 ms a Lloyd iteration in fp32 on an H100. */
    if (b->ops->shadow_sync == NULL) return SIMIL_OK;
    return b->ops->shadow_sync(b, &s->c_shadow, s->c_mem, 0, k, dim, SIMIL_METRIC_L2);
}

static simil_status sml_kmeans_iterate(sml_backend *b, const simil_kmeans_params *p, int64_t m,
                                       int64_t dim, uint64_t *rng, sml_kmeans_state *s,
                                       float *centroids, double *objective)
{
    const int64_t k = p->k;
    for (int it = 0; it < p->iterations; it++) {
        SML_TRY(sml_kmeans_upload_centroids(b, s, k, dim, centroids));
        SML_TRY(sml_kmeans_assign(b, s->c_mem, s->cn_mem, s->ids_mem, s->c_shadow, k, dim,
                                  s->x_mem, m, s->dist, s->labels));
        double obj = 0;
        for (int64_t i = 0; i < m; i++) obj += s->dist[i];
        if (objective != NULL) objective[it] = obj;
        SML_TRY(b->ops->cluster_sums(b, m, dim, s->x_mem, s->labels, k, s->sums, s->counts));
        sml_kmeans_update(k, dim, s->sums, s->counts, m, rng, p->spherical, centroids);
        sml_progress("kmeans", it + 1, p->iterations);
    }
    return SIMIL_OK;
}

simil_status sml_kmeans_run(sml_backend *b, const simil_kmeans_params *p, int64_t n, int64_t dim,
                            const float *x, float *centroids, int64_t *assignments,
                            double *objective)
{
    const int64_t k = p->k;
    SML_RETURN_IF(k < 1, SIMIL_ERR_INVALID_ARGUMENT, "k-means: k=%" PRId64 " must be >= 1", k);
    SML_RETURN_IF(n < k, SIMIL_ERR_INVALID_ARGUMENT,
                  "k-means needs at least k=%" PRId64 " points, got %" PRId64, k, n);
    SML_RETURN_IF(dim < 1, SIMIL_ERR_INVALID_ARGUMENT, "k-means: dim=%" PRId64 " must be >= 1",
                  dim);
    SML_RETURN_IF(p->iterations < 0 || p->max_points_per_centroid < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "k-means: iterations=%d and max_points_per_centroid=%" PRId64
                  " must not be negative",
                  p->iterations, p->max_points_per_centroid);
    SML_RETURN_IF(x == NULL || centroids == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "k-means: x and centroids must not be NULL");
    SML_RETURN_IF(!sml_product_fits(n, dim, SML_MAX_FLOATS), SIMIL_ERR_INVALID_ARGUMENT,
                  "k-means: %" PRId64 " points of dimension %" PRId64
                  " exceed the address space",
                  n, dim);
    SML_TRY(sml_vectors_check(x, n, dim, 1, "k-means training data"));
    int64_t m = n;
    if (p->max_points_per_centroid > 0 && k <= n / p->max_points_per_centroid)
        m = k * p->max_points_per_centroid;
    uint64_t rng = p->seed;
    sml_kmeans_state s = {0};
    simil_status st = sml_kmeans_setup(b, p, n, dim, x, m, &rng, &s);
    if (st == SIMIL_OK) {
        if (p->init == SIMIL_KMEANS_INIT_PLUSPLUS) {
            st = sml_kmeans_plusplus(m, dim, s.points, k, &rng, centroids);
        } else {
            st = sml_kmeans_sample(m, k, &rng, s.labels);
            for (int64_t c = 0; st == SIMIL_OK && c < k; c++)
                memcpy(centroids + c * dim, s.points + s.labels[c] * dim,
                       sizeof(float) * (size_t)dim);
        }
        if (st == SIMIL_OK && p->spherical) sml_vectors_normalize(centroids, k, dim, centroids);
    }
    if (st == SIMIL_OK) st = sml_kmeans_iterate(b, p, m, dim, &rng, &s, centroids, objective);
    if (st == SIMIL_OK && assignments != NULL) {
        /* every input point, against the final centroids */
        float *dist;
        st = sml_alloc((void **)&dist, (size_t)n, sizeof *dist, "k-means distances");
        if (st == SIMIL_OK) st = sml_kmeans_upload_centroids(b, &s, k, dim, centroids);
        if (st == SIMIL_OK)
            st = sml_kmeans_assign(b, s.c_mem, s.cn_mem, s.ids_mem, s.c_shadow, k, dim, x, n,
                                   dist, assignments);
        sml_free(dist);
    }
    sml_kmeans_free(b, &s, x);
    return st;
}
