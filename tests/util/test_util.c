/* test_util.c: seeded data, the float64 reference search, result checks, the
 * fault-injection driver. */
#define _GNU_SOURCE
#include "util/test_util.h"

#include "cuda/cuda_backend.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t sml_test_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void sml_test_fill_uniform(float *x, int64_t n, uint64_t seed, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(sml_test_mix(seed * 0x100000001b3ull + (uint64_t)i) >> 11) * 0x1p-53;
        x[i] = lo + (float)u * (hi - lo);
    }
}

void *sml_test_malloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

double sml_test_distance(const float *a, const float *b, int64_t dim, simil_metric metric)
{
    double s = 0;
    for (int64_t j = 0; j < dim; j++) {
        if (metric == SIMIL_METRIC_L2) {
            double d = (double)a[j] - (double)b[j];
            s += d * d;
        } else {
            s += (double)a[j] * (double)b[j];
        }
    }
    return s;
}

static int sml_test_key_pos_cmp(const void *pa, const void *pb)
{
    const sml_test_key_pos *a = pa, *b = pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

void sml_test_sort_key_pos(sml_test_key_pos *pairs, int64_t n)
{
    qsort(pairs, (size_t)n, sizeof *pairs, sml_test_key_pos_cmp);
}

typedef struct {
    double key;
    int64_t pos;
} sml_test_pair;

static int sml_test_pair_cmp(const void *pa, const void *pb)
{
    const sml_test_pair *a = pa, *b = pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

void sml_test_reference_graph(const float *x, int64_t n, int64_t dim, int64_t k,
                              simil_metric metric, int64_t *ids, float *distances)
{
    double *rd = sml_test_malloc(sizeof *rd * (size_t)(n * (k + 1)));
    int64_t *rl = sml_test_malloc(sizeof *rl * (size_t)(n * (k + 1)));
    sml_test_reference_knn(x, n, x, n, dim, k + 1, metric, rd, rl);
    for (int64_t i = 0; i < n; i++) {
        int64_t o = 0, dropped = 0;
        for (int64_t j = 0; j <= k && o < k; j++) {
            if (!dropped && rl[i * (k + 1) + j] == i) {
                dropped = 1;
                continue;
            }
            ids[i * k + o] = rl[i * (k + 1) + j];
            distances[i * k + o++] = (float)rd[i * (k + 1) + j];
        }
    }
    free(rd);
    free(rl);
}

float *sml_test_blobs(int64_t n, int64_t dim, int64_t clusters, float spread, uint64_t seed)
{
    float *c = sml_test_malloc(sizeof(float) * (size_t)(clusters * dim));
    float *x = sml_test_malloc(sizeof(float) * (size_t)(n * dim + 1));
    sml_test_fill_uniform(c, clusters * dim, seed, -1, 1);
    sml_test_fill_uniform(x, n * dim, seed + 1, -spread, spread);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < dim; j++) x[i * dim + j] += c[(i % clusters) * dim + j];
    free(c);
    return x;
}

void sml_test_reference_knn(const float *base, int64_t n, const float *queries, int64_t nq,
                            int64_t dim, int64_t k, simil_metric metric, double *distances,
                            int64_t *labels)
{
    sml_test_pair *pairs = sml_test_malloc(sizeof *pairs * (size_t)(n ? n : 1));
    double sign = metric == SIMIL_METRIC_L2 ? 1.0 : -1.0;
    for (int64_t q = 0; q < nq; q++) {
        for (int64_t i = 0; i < n; i++) {
            pairs[i].key = sign * sml_test_distance(queries + q * dim, base + i * dim, dim, metric);
            pairs[i].pos = i;
        }
        qsort(pairs, (size_t)n, sizeof *pairs, sml_test_pair_cmp);
        for (int64_t j = 0; j < k; j++) {
            if (j < n) {
                distances[q * k + j] = sign * pairs[j].key;
                labels[q * k + j] = pairs[j].pos;
            } else {
                distances[q * k + j] = sign * INFINITY;
                labels[q * k + j] = -1;
            }
        }
    }
    free(pairs);
}

static double sml_test_max_norm2(const float *base, int64_t n, int64_t dim);

static int sml_test_close(double a, double b, double rel_tol, double scale)
{
    if (isinf(a) || isinf(b)) return a == b;
    double m = fmax(fmax(fabs(a), fabs(b)), scale);
    return fabs(a - b) <= rel_tol * m;
}

void sml_test_check_knn(const char *context, const float *base, int64_t n,
                        const float *queries, int64_t nq, int64_t dim, int64_t k,
                        simil_metric metric, const float *distances, const int64_t *labels,
                        double rel_tol)
{
    /* one rank more than asked, to see whether the last rank is tied */
    int64_t kr = k + 1;
    double *ref_d = sml_test_malloc(sizeof *ref_d * (size_t)(nq * kr));
    int64_t *ref_l = sml_test_malloc(sizeof *ref_l * (size_t)(nq * kr));
    sml_test_reference_knn(base, n, queries, nq, dim, kr, metric, ref_d, ref_l);
    char *seen = sml_test_malloc((size_t)(n ? n : 1));
    double max_norm2 = sml_test_max_norm2(base, n, dim);
    for (int64_t q = 0; q < nq; q++) {
        /* Distances of near neighbours can be far smaller than the norms
         * they are computed from (GEMM form), so the tolerance is relative to
         * the norms' scale as well as to the distance itself. */
        double qn = sml_test_distance(queries + q * dim, queries + q * dim, dim, SIMIL_METRIC_IP);
        double scale = 0.1 * (metric == SIMIL_METRIC_L2 ? qn + max_norm2 : sqrt(qn * max_norm2));
        memset(seen, 0, (size_t)(n ? n : 1));
        for (int64_t j = 0; j < k; j++) {
            int64_t got = labels[q * k + j];
            double gd = distances[q * k + j], rd = ref_d[q * kr + j];
            if (j >= n) {
                if (got != -1 || !isinf(gd))
                    fail_msg("%s: query %lld rank %lld past n=%lld: label %lld dist %g, want -1 inf",
                             context, (long long)q, (long long)j, (long long)n, (long long)got, gd);
                continue;
            }
            if (!sml_test_close(gd, rd, rel_tol, scale))
                fail_msg("%s: query %lld rank %lld: distance %.9g, reference %.9g", context,
                         (long long)q, (long long)j, gd, rd);
            if (got < 0 || got >= n)
                fail_msg("%s: query %lld rank %lld: label %lld out of [0,%lld)", context,
                         (long long)q, (long long)j, (long long)got, (long long)n);
            if (seen[got])
                fail_msg("%s: query %lld: label %lld returned twice", context, (long long)q,
                         (long long)got);
            seen[got] = 1;
            double true_d = sml_test_distance(queries + q * dim, base + got * dim, dim, metric);
            if (!sml_test_close(gd, true_d, rel_tol, scale))
                fail_msg("%s: query %lld rank %lld: label %lld has distance %.9g, returned %.9g",
                         context, (long long)q, (long long)j, (long long)got, true_d, gd);
            int tie = (j > 0 && sml_test_close(rd, ref_d[q * kr + j - 1], rel_tol, scale)) ||
                      (j + 1 < n && sml_test_close(rd, ref_d[q * kr + j + 1], rel_tol, scale));
            if (!tie && got != ref_l[q * kr + j])
                fail_msg("%s: query %lld rank %lld: label %lld, reference %lld (no tie)", context,
                         (long long)q, (long long)j, (long long)got, (long long)ref_l[q * kr + j]);
        }
    }
    free(seen);
    free(ref_d);
    free(ref_l);
}

void sml_test_check_knn_metric(const char *context, float *base, int64_t n, float *queries,
                               int64_t nq, int64_t dim, int64_t k, simil_metric metric,
                               const float *distances, const int64_t *labels, double rel_tol)
{
    if (metric == SIMIL_METRIC_COSINE) {
        sml_test_normalize(base, n, dim);
        sml_test_normalize(queries, nq, dim);
    }
    sml_test_check_knn(context, base, n, queries, nq, dim, k,
                       metric == SIMIL_METRIC_L2 ? SIMIL_METRIC_L2 : SIMIL_METRIC_IP, distances,
                       labels, rel_tol);
}

static double sml_test_max_norm2(const float *base, int64_t n, int64_t dim)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, sml_test_distance(base + i * dim, base + i * dim, dim, SIMIL_METRIC_IP));
    return m;
}

void sml_test_check_same(const char *context, const float *base, int64_t n, const float *queries,
                         int64_t nq, int64_t dim, int64_t k, simil_metric metric,
                         const float *distances, const int64_t *labels,
                         const float *ref_distances, const int64_t *ref_labels, double rel_tol)
{
    double max_norm2 = sml_test_max_norm2(base, n, dim);
    for (int64_t q = 0; q < nq; q++) {
        double qn = sml_test_distance(queries + q * dim, queries + q * dim, dim, SIMIL_METRIC_IP);
        double scale = 0.1 * (metric == SIMIL_METRIC_L2 ? qn + max_norm2 : sqrt(qn * max_norm2));
        const float *d = distances + q * k, *rd = ref_distances + q * k;
        const int64_t *l = labels + q * k, *rl = ref_labels + q * k;
        for (int64_t j = 0; j < k; j++) {
            if (rl[j] < 0 || l[j] < 0) {
                if (rl[j] != l[j])
                    fail_msg("%s: query %lld rank %lld: label %lld, reference %lld", context,
                             (long long)q, (long long)j, (long long)l[j], (long long)rl[j]);
                continue;
            }
            if (!sml_test_close(d[j], rd[j], rel_tol, scale))
                fail_msg("%s: query %lld rank %lld: distance %.9g, reference %.9g", context,
                         (long long)q, (long long)j, d[j], rd[j]);
            if (l[j] >= n)
                fail_msg("%s: query %lld rank %lld: label %lld out of [0,%lld), reference %lld",
                         context, (long long)q, (long long)j, (long long)l[j], (long long)n,
                         (long long)rl[j]);
            double true_d = sml_test_distance(queries + q * dim, base + l[j] * dim, dim,
                                              metric == SIMIL_METRIC_L2 ? metric : SIMIL_METRIC_IP);
            if (!sml_test_close(d[j], true_d, rel_tol, scale))
                fail_msg("%s: query %lld rank %lld: label %lld has distance %.9g, returned %.9g",
                         context, (long long)q, (long long)j, (long long)l[j], true_d, d[j]);
            int tie = (j > 0 && sml_test_close(rd[j], rd[j - 1], rel_tol, scale)) ||
                      (j + 1 < k && sml_test_close(rd[j], rd[j + 1], rel_tol, scale)) ||
                      j + 1 == k;
            if (!tie && l[j] != rl[j])
                fail_msg("%s: query %lld rank %lld: label %lld, reference %lld (no tie)", context,
                         (long long)q, (long long)j, (long long)l[j], (long long)rl[j]);
        }
    }
}

int sml_test_quick(void) { return getenv("SIMIL_TEST_QUICK") != NULL; }

void sml_test_require_gpu(void)
{
    /* one test function of the program only (cmocka's * and ? wildcards),
     * for the sanitizers' slow runs (scripts/gpu-sanitize.sh) */
    const char *filter = getenv("SIMIL_TEST_FILTER");
    if (filter != NULL && filter[0] != '\0') cmocka_set_test_filter(filter);
    /* every k-selection of the program by one design (DESIGN[:WARPS], the
     * numbers of cuda_backend.h), so that every search path tries it */
    const char *design = getenv("SIMIL_TEST_SELECT");
    if (design != NULL && design[0] != '\0') {
        const char *colon = strchr(design, ':');
        sml_cuda_select_force(atoi(design), colon ? atoi(colon + 1) : 0);
        printf("k-selection forced to %s (SIMIL_TEST_SELECT=%s)\n",
               sml_cuda_select_design_name(atoi(design)), design);
    }
    if (simil_gpu_count() > 0) return;
    printf("no usable GPU: skipping the GPU tests\n");
    exit(SML_TEST_SKIP);
}

simil_index *sml_test_flat_index(const char *device, int64_t dim, simil_metric metric, int64_t n,
                                 const float *base)
{
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, dim, "Flat", metric, device));
    SML_ASSERT_OK(simil_index_add(index, n, base, NULL));
    return index;
}

simil_index *sml_test_trained_index(const char *device, const char *desc, int64_t dim,
                                    simil_metric metric, int64_t n, const float *x,
                                    int check_trained)
{
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, dim, desc, metric, device));
    if (check_trained) assert_false(simil_index_is_trained(index));
    SML_ASSERT_OK(simil_index_train(index, n, x));
    if (check_trained) assert_true(simil_index_is_trained(index));
    SML_ASSERT_OK(simil_index_add(index, n, x, NULL));
    return index;
}

void sml_test_search_nprobe(const simil_index *index, int64_t nq, const float *queries,
                            int64_t k, int64_t nprobe, float *distances, int64_t *labels)
{
    simil_search_params *p = sml_test_params("");
    SML_ASSERT_OK(simil_search_params_set_int(p, "nprobe", nprobe));
    SML_ASSERT_OK(simil_index_search(index, nq, queries, k, p, distances, labels));
    simil_search_params_destroy(p);
}

double sml_test_recall(const int64_t *found, const int64_t *truth, int64_t nq, int64_t k,
                       int64_t r)
{
    int64_t hits = 0;
    for (int64_t q = 0; q < nq; q++)
        for (int64_t j = 0; j < k; j++)
            for (int64_t t = 0; t < r; t++) hits += found[q * k + j] == truth[q * k + t];
    return (double)hits / (double)(nq * r);
}

void sml_test_normalize(float *x, int64_t n, int64_t dim)
{
    for (int64_t i = 0; i < n; i++) {
        double s = 0;
        for (int64_t j = 0; j < dim; j++) s += (double)x[i * dim + j] * x[i * dim + j];
        if (s == 0) continue;
        float inv = (float)(1.0 / sqrt(s));
        for (int64_t j = 0; j < dim; j++) x[i * dim + j] *= inv;
    }
}

static char sml_test_dir[256];

static int sml_test_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void sml_test_cleanup(void)
{
    if (sml_test_dir[0]) nftw(sml_test_dir, sml_test_rm, 16, FTW_DEPTH | FTW_PHYS);
}

simil_search_params *sml_test_params(const char *settings)
{
    simil_search_params *p = NULL;
    simil_status s = simil_search_params_create(&p);
    if (s == SIMIL_OK) s = simil_search_params_parse(p, settings);
    if (s != SIMIL_OK) fail_msg("search parameters '%s': %s", settings, simil_last_error());
    return p;
}

const char *sml_test_tmpdir(void)
{
    if (!sml_test_dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(sml_test_dir, sizeof sml_test_dir, "%s/simil-test-XXXXXX", base ? base : "/tmp");
        if (mkdtemp(sml_test_dir) == NULL) {
            fprintf(stderr, "cannot create a temporary folder\n");
            exit(1);
        }
        atexit(sml_test_cleanup);
    }
    return sml_test_dir;
}

const char *sml_test_path(const char *name)
{
    static char slots[8][512];
    static int next;
    char *p = slots[next++ % 8];
    snprintf(p, 512, "%s/%s", sml_test_tmpdir(), name);
    return p;
}

int64_t sml_fi_run(const sml_fi_driver *d, const sml_fi_case *c, void *ctx, int sticky)
{
    for (int64_t n = 1;; n++) {
        if (c->prepare) c->prepare(ctx);
        d->fail_at(n, sticky);
        simil_status s = c->run(ctx);
        int64_t made = d->fail_at(0, 0);
        if (s == SIMIL_OK) {
            if (made >= n)
                fail_msg("%s: allocation %lld of %lld failed (sticky=%d), yet the call succeeded",
                         c->name, (long long)n, (long long)made, sticky);
            if (c->check_ok) c->check_ok(ctx);
            if (c->finish) c->finish(ctx);
            if (d->after_each) d->after_each(c, n, sticky, ctx);
            return n - 1;
        }
        if (s != SIMIL_ERR_OUT_OF_MEMORY)
            fail_msg("%s: allocation %lld failed (sticky=%d): got %s (%s), expected "
                     "SIMIL_ERR_OUT_OF_MEMORY",
                     c->name, (long long)n, sticky, simil_status_name(s), simil_last_error());
        if (simil_last_error()[0] == '\0')
            fail_msg("%s: allocation %lld failed without a message", c->name, (long long)n);
        if (c->check_failed) c->check_failed(ctx);
        if (c->finish) c->finish(ctx);
        if (d->after_each) d->after_each(c, n, sticky, ctx);
    }
}

int64_t sml_fi_both(sml_fi_driver *d, const sml_fi_case *c, void *ctx)
{
    int64_t once = sml_fi_run(d, c, ctx, 0);
    if (!d->once_only) {
        int64_t sticky = sml_fi_run(d, c, ctx, 1);
        if (sticky != once)
            fail_msg("%s: %lld allocation points failing alone, %lld sticky", c->name,
                     (long long)once, (long long)sticky);
    }
    d->total_points += once;
    printf("  %-40s %3lld allocation points\n", c->name, (long long)once);
    fflush(stdout);
    return once;
}

unsigned char *sml_test_read_file(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    *size = ftell(f);
    assert_true(*size >= 0);
    rewind(f);
    unsigned char *buf = sml_test_malloc((size_t)*size + 1);
    assert_int_equal(fread(buf, 1, (size_t)*size, f), (size_t)*size);
    fclose(f);
    return buf;
}

void sml_test_write_file(const char *path, const unsigned char *buf, long size)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
}

unsigned char *sml_test_random_allowed(int64_t nids, int percent, uint64_t seed)
{
    unsigned char *a = sml_test_malloc((size_t)nids);
    uint64_t s = seed * 2654435761u + 1;
    for (int64_t id = 0; id < nids; id++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        a[id] = (int)((s >> 33) % 100) < percent;
    }
    return a;
}

void sml_test_allow_params(const unsigned char *allowed, int64_t nids, const char *settings,
                           simil_search_params **bits, simil_search_params **list)
{
    uint8_t *bytes = calloc((size_t)(nids + 7) / 8, 1);
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * (size_t)(nids > 0 ? nids : 1));
    assert_non_null(bytes);
    int64_t n = 0;
    for (int64_t id = 0; id < nids; id++)
        if (allowed[id]) {
            bytes[id / 8] |= (uint8_t)(1u << (id % 8));
            ids[n++] = id;
        }
    *bits = sml_test_params(settings);
    *list = sml_test_params(settings);
    SML_ASSERT_OK(simil_search_params_allow_bitset(*bits, nids, bytes));
    SML_ASSERT_OK(simil_search_params_allow_ids(*list, n, ids));
    assert_true(simil_search_params_has_filter(*bits));
    free(bytes);
    free(ids);
}

void sml_test_check_filtered_ranking(const char *what, int64_t nq, int64_t k, int64_t all,
                                     const float *D, const int64_t *L, const float *d,
                                     const int64_t *l, const unsigned char *allowed,
                                     const float *empty)
{
    for (int64_t i = 0; i < nq; i++) {
        int64_t j = 0;
        for (int64_t r = 0; r < all && j < k; r++) {
            const int64_t id = L[i * all + r];
            if (id < 0 || !allowed[id]) continue;
            if (l[i * k + j] != id || d[i * k + j] != D[i * all + r])
                fail_msg("%s: query %ld rank %ld: id %ld at %g, the ranking's %ld at %g", what,
                         (long)i, (long)j, (long)l[i * k + j], (double)d[i * k + j], (long)id,
                         (double)D[i * all + r]);
            j++;
        }
        for (; j < k; j++)
            if (l[i * k + j] != -1 || (empty != NULL && d[i * k + j] != *empty))
                fail_msg("%s: query %ld rank %ld should be empty, holds id %ld", what, (long)i,
                         (long)j, (long)l[i * k + j]);
    }
}

simil_status sml_test_sink_rows(void *user, int64_t first, int64_t count, int64_t k,
                                const int64_t *ids, const float *dist)
{
    sml_test_sink *s = user;
    assert_int_equal(first, s->next); /* in order, no gaps */
    memcpy(s->ids + first * k, ids, sizeof *ids * (size_t)(count * k));
    memcpy(s->dist + first * k, dist, sizeof *dist * (size_t)(count * k));
    s->next = first + count;
    return SIMIL_OK;
}
