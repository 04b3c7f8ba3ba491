/* test_cuda_range.c: range search on the GPU (Flat, IVF-Flat, IVF-PQ) against
 * float64 brute force and against the GPU's own full ranking (filtered
 * search: test_cuda_filter.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/test_util.h"

enum { N = 20000, DIM = 32, NQ = 40 };

static simil_index *filled(const char *desc, simil_metric metric, const float *x)
{
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, DIM, desc, metric, "gpu"));
    SML_ASSERT_OK(simil_index_train(index, N, x));
    SML_ASSERT_OK(simil_index_add(index, N, x, NULL));
    return index;
}

/* The distance of query 0's count-th neighbour. */
static float radius_for(const simil_index *index, const float *q, int64_t count,
                        const simil_search_params *p)
{
    float *d = sml_test_malloc(sizeof(float) * (size_t)count);
    int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)count);
    SML_ASSERT_OK(simil_index_search(index, 1, q, count, p, d, l));
    const float r = d[count - 1];
    free(d);
    free(l);
    return r;
}

/* Every vector inside the radius and none outside (float64 distances, but
 * for those within rounding of the radius), each once, sorted. */
static void check_brute_force(const char *what, const float *x, const float *q, float radius,
                              simil_metric metric, const simil_range_result *r)
{
    unsigned char *found = sml_test_malloc(N);
    const int l2 = metric == SIMIL_METRIC_L2;
    for (int64_t i = 0; i < NQ; i++) {
        memset(found, 0, N);
        for (int64_t j = r->offsets[i]; j < r->offsets[i + 1]; j++) {
            const int64_t id = r->labels[j];
            assert_true(id >= 0 && id < N && !found[id]);
            found[id] = 1;
            const double ref = sml_test_distance(q + i * DIM, x + id * DIM, DIM, metric);
            if (fabs(ref - r->distances[j]) > 1e-3 * fmax(1.0, fabs(ref)))
                fail_msg("%s: query %ld id %ld at %g, true %g", what, (long)i, (long)id,
                         (double)r->distances[j], ref);
        }
        for (int64_t id = 0; id < N; id++) {
            const double ref = sml_test_distance(q + i * DIM, x + id * DIM, DIM, metric);
            const double slack = 1e-3 * fmax(1.0, fabs(ref));
            const int inside = l2 ? ref < radius - slack : ref > radius + slack;
            const int outside = l2 ? ref > radius + slack : ref < radius - slack;
            if ((inside && !found[id]) || (outside && found[id]))
                fail_msg("%s: query %ld: id %ld at %g %s radius %g", what, (long)i, (long)id,
                         ref, found[id] ? "returned, outside" : "missing, inside",
                         (double)radius);
        }
    }
    free(found);
}

static int id_order(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The range results are the full ranking's rows inside the radius (as sets:
 * past k = 2048 the GPU selects by radix, whose order of equal keys may
 * differ). */
static void check_ranking(const char *what, const simil_index *index, const float *q,
                          float radius, const simil_search_params *p,
                          const simil_range_result *r)
{
    const int l2 = simil_index_metric(index) == SIMIL_METRIC_L2;
    float *D = sml_test_malloc(sizeof(float) * NQ * N);
    int64_t *L = sml_test_malloc(sizeof(int64_t) * NQ * N);
    SML_ASSERT_OK(simil_index_search(index, NQ, q, N, p, D, L));
    for (int64_t i = 0; i < NQ; i++) {
        int64_t n = 0;
        while (n < N && L[i * N + n] >= 0 && (l2 ? D[i * N + n] < radius : D[i * N + n] > radius))
            n++;
        if (r->offsets[i + 1] - r->offsets[i] != n)
            fail_msg("%s: query %ld: %ld within, the ranking has %ld", what, (long)i,
                     (long)(r->offsets[i + 1] - r->offsets[i]), (long)n);
        int64_t *got = sml_test_malloc(sizeof(int64_t) * (size_t)(n + 1));
        memcpy(got, r->labels + r->offsets[i], sizeof(int64_t) * (size_t)n);
        qsort(got, (size_t)n, sizeof *got, id_order);
        qsort(L + i * N, (size_t)n, sizeof *got, id_order);
        assert_memory_equal(got, L + i * N, sizeof(int64_t) * (size_t)n);
        free(got);
    }
    free(D);
    free(L);
}

static void test_range(void **state)
{
    (void)state;
    float *x = sml_test_blobs(N, DIM, 50, 0.5f, 1), *q = sml_test_blobs(NQ, DIM, 50, 0.5f, 2);
    const struct {
        const char *desc, *settings;
        simil_metric metric;
        int exact;
    } cases[] = {
        {"Flat", "", SIMIL_METRIC_L2, 1},
        {"Flat", "", SIMIL_METRIC_IP, 1},
        {"IVF64,Flat", "nprobe=64", SIMIL_METRIC_L2, 1},
        {"IVF64,Flat", "nprobe=8", SIMIL_METRIC_L2, 0},
        {"IVF64,PQ8", "nprobe=8", SIMIL_METRIC_L2, 0},
    };
    const int64_t counts[] = {10, 1000};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        simil_index *index = filled(cases[c].desc, cases[c].metric, x);
        simil_search_params *p = sml_test_params(cases[c].settings);
        for (int j = 0; j < 2; j++) {
            char what[128];
            snprintf(what, sizeof what, "gpu range %s %s %s ~%ld", cases[c].desc,
                     cases[c].settings, simil_metric_name(cases[c].metric), (long)counts[j]);
            const float radius = radius_for(index, q, counts[j], p);
            simil_range_result *r;
            SML_ASSERT_OK(simil_index_range_search(index, NQ, q, radius, p, &r));
            /* Flat is checked by brute force alone: its k-NN may take
             * another arithmetic path (tensor cores) at another k */
            if (cases[c].exact) check_brute_force(what, x, q, radius, cases[c].metric, r);
            if (strcmp(cases[c].desc, "Flat") != 0) check_ranking(what, index, q, radius, p, r);
            simil_range_result_destroy(r);
        }
        simil_search_params_destroy(p);
        simil_index_destroy(index);
    }
    free(x);
    free(q);
}

int main(void)
{
    sml_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
