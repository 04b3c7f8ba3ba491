/* test_filter_range.c: filtered search (allowed ids) and range search on the
 * CPU, for Flat, IVF-Flat, IVF-PQ, SQ8, IVF-SQ8, XFBQ, IVF-XFBQ and sharded
 * indexes.
 *
 * Two oracles.  Brute force (float64, test_util) checks Flat: its filtered
 * top k are the true top k among the allowed vectors, and its range results
 * are every vector inside the radius.  For every type, a search of k = all
 * rows ranks everything the index scans; its allowed rows, first k, must be
 * the filtered search's results, and its rows inside the radius the range
 * search's, bit for bit (XFBQ with extra_distance=1, where the scan ranks
 * every row it reads by its exact distance).  Also the stamps that filters
 * get when they are set. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index/index_internal.h"
#include "util/test_util.h"

enum { N = 3000, DIM = 16, NQ = 10, K = 20 };

static simil_index *filled(const char *desc, simil_metric metric, const char *device,
                           const float *x, int64_t n, const int64_t *ids)
{
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, DIM, desc, metric, device));
    SML_ASSERT_OK(simil_index_train(index, n, x));
    SML_ASSERT_OK(simil_index_add(index, n, x, ids));
    return index;
}

/* Sparse ids (3 * row + 1), so that bitset and list cover ids no row has. */
static int64_t row_id(int64_t row) { return 3 * row + 1; }

/* allowed[id] for ids below 3 * N + 1: a pseudo-random share `percent`. */
static unsigned char *random_allowed(int percent, uint64_t seed)
{
    return sml_test_random_allowed(3 * N + 1, percent, seed);
}

/* The filtered search against the full ranking, and bitset against list. */
static void check_filtered(const char *what, const simil_index *index, const float *q,
                           const unsigned char *allowed, const char *settings)
{
    simil_search_params *plain = sml_test_params(settings), *bits, *list;
    sml_test_allow_params(allowed, 3 * N + 1, settings, &bits, &list);
    const int64_t all = simil_index_size(index);
    float *D = sml_test_malloc(sizeof(float) * NQ * (size_t)all);
    int64_t *L = sml_test_malloc(sizeof(int64_t) * NQ * (size_t)all);
    float d[NQ * K], d2[NQ * K];
    int64_t l[NQ * K], l2[NQ * K];
    SML_ASSERT_OK(simil_index_search(index, NQ, q, all, plain, D, L));
    SML_ASSERT_OK(simil_index_search(index, NQ, q, K, bits, d, l));
    SML_ASSERT_OK(simil_index_search(index, NQ, q, K, list, d2, l2));
    assert_memory_equal(l, l2, sizeof l);
    assert_memory_equal(d, d2, sizeof d);
    const float empty = simil_index_metric(index) == SIMIL_METRIC_L2 ? INFINITY : -INFINITY;
    sml_test_check_filtered_ranking(what, NQ, K, all, D, L, d, l, allowed, &empty);
    /* k = 1 and one query a call take other paths of some scans */
    SML_ASSERT_OK(simil_index_search(index, NQ, q, 1, bits, d, l));
    sml_test_check_filtered_ranking(what, NQ, 1, all, D, L, d, l, allowed, &empty);
    for (int64_t i = 0; i < NQ; i++) {
        SML_ASSERT_OK(simil_index_search(index, 1, q + i * DIM, K, bits, d, l));
        sml_test_check_filtered_ranking(what, 1, K, all, D + i * all, L + i * all, d, l, allowed,
                                        &empty);
    }
    free(D);
    free(L);
    simil_search_params_destroy(plain);
    simil_search_params_destroy(bits);
    simil_search_params_destroy(list);
}

/* The first RANGE_TYPES are range-searched too. */
static const char *const types[][2] = {
    {"Flat", ""},
    {"IVF16,Flat", "nprobe=5"},
    {"IVF16,PQ8", "nprobe=5"},
    {"IVF16,PQ8", "nprobe=5,precomputed_tables=0"},
    {"SQ8", ""},
    {"IVF16,SQ8", "nprobe=5"},
    {"XFBQ", "extra_distance=1"},
    {"IVF16,XFBQ", "nprobe=4,extra_distance=1"},
};
enum { RANGE_TYPES = 6 };

static void test_filtered_every_type(void **state)
{
    (void)state;
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};
    float *x = sml_test_blobs(N, DIM, 20, 0.4f, 11), *q = sml_test_blobs(NQ, DIM, 20, 0.4f, 12);
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * N);
    for (int64_t i = 0; i < N; i++) ids[i] = row_id(i);
    const int percents[] = {1, 10, 50};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int m = 0; m < 3; m++) {
            simil_index *index = filled(types[t][0], metrics[m], "cpu", x, N, ids);
            for (int p = 0; p < 3; p++) {
                unsigned char *allowed = random_allowed(percents[p], 7 + (uint64_t)p);
                char what[128];
                snprintf(what, sizeof what, "%s %s %s, %d%% allowed", types[t][0], types[t][1],
                         simil_metric_name(metrics[m]), percents[p]);
                check_filtered(what, index, q, allowed, types[t][1]);
                free(allowed);
            }
            simil_index_destroy(index);
        }
    free(ids);
    free(x);
    free(q);
}

/* Flat: the true top k among the allowed vectors (float64 brute force over
 * them alone), for the direct path (few queries) and the GEMM path, and at
 * k = 1 over a base that fits cpu_nearest.h's book (800 rows of 16 floats,
 * under its 64 KiB), which an unfiltered search of k = 1 takes and which
 * holds every row. */
static void test_flat_filtered_brute_force(void **state)
{
    (void)state;
    const int64_t nq = 100;
    float *x = sml_test_blobs(N, DIM, 20, 0.4f, 21), *q = sml_test_blobs(nq, DIM, 20, 0.4f, 22);
    unsigned char *allowed = random_allowed(10, 3);
    float *sub = sml_test_malloc(sizeof(float) * N * DIM);
    int64_t *pos = sml_test_malloc(sizeof(int64_t) * N);
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * N);
    float *d = sml_test_malloc(sizeof(float) * nq * K);
    int64_t *l = sml_test_malloc(sizeof(int64_t) * nq * K);
    const int64_t sizes[] = {N, 800}, counts[] = {3, nq}, ks[] = {K, 1};
    for (int z = 0; z < 2; z++) {
        const int64_t n = sizes[z];
        simil_index *index = filled("Flat", SIMIL_METRIC_L2, "cpu", x, n, NULL);
        int64_t nsub = 0;
        for (int64_t i = 0; i < n; i++)
            if (allowed[i]) {
                memcpy(sub + nsub * DIM, x + i * DIM, sizeof(float) * DIM);
                pos[i] = nsub;
                ids[nsub++] = i;
            }
        simil_search_params *p = sml_test_params("");
        SML_ASSERT_OK(simil_search_params_allow_ids(p, nsub, ids));
        for (int c = 0; c < 2; c++)
            for (int j = 0; j < 2; j++) {
                const int64_t k = ks[j];
                SML_ASSERT_OK(simil_index_search(index, counts[c], q, k, p, d, l));
                for (int64_t i = 0; i < counts[c] * k; i++) {
                    assert_true(l[i] >= 0 && l[i] < n && allowed[l[i]]);
                    l[i] = pos[l[i]];
                }
                sml_test_check_knn("Flat filtered", sub, nsub, q, counts[c], DIM, k,
                                   SIMIL_METRIC_L2, d, l, 1e-4);
            }
        simil_search_params_destroy(p);
        simil_index_destroy(index);
    }
    free(d);
    free(l);
    free(sub);
    free(pos);
    free(ids);
    free(allowed);
    free(x);
    free(q);
}

/* Sharded indexes pass the filter to every shard: the same results as one. */
static void test_filtered_shards(void **state)
{
    (void)state;
    float *x = sml_test_blobs(N, DIM, 20, 0.4f, 31), *q = sml_test_blobs(NQ, DIM, 20, 0.4f, 32);
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * N);
    for (int64_t i = 0; i < N; i++) ids[i] = row_id(i);
    unsigned char *allowed = random_allowed(10, 5);
    const char *descs[] = {"Flat", "IVF16,Flat"};
    for (int t = 0; t < 2; t++) {
        simil_index *one = filled(descs[t], SIMIL_METRIC_L2, "cpu", x, N, ids);
        simil_index *sh = filled(descs[t], SIMIL_METRIC_L2, "cpu:3", x, N, ids);
        simil_search_params *bits, *list;
        sml_test_allow_params(allowed, 3 * N + 1, "nprobe=16", &bits, &list);
        float d[NQ * K], d2[NQ * K];
        int64_t l[NQ * K], l2[NQ * K];
        SML_ASSERT_OK(simil_index_search(one, NQ, q, K, bits, d, l));
        SML_ASSERT_OK(simil_index_search(sh, NQ, q, K, list, d2, l2));
        for (int64_t i = 0; i < NQ * K; i++) {
            assert_true(l2[i] >= 0 && allowed[l2[i]]);
            assert_true(fabsf(d[i] - d2[i]) <= 1e-4f * fmaxf(1.0f, fabsf(d[i])));
        }
        check_filtered(descs[t], sh, q, allowed, "nprobe=16");
        simil_search_params_destroy(bits);
        simil_search_params_destroy(list);
        simil_index_destroy(one);
        simil_index_destroy(sh);
    }
    free(allowed);
    free(ids);
    free(x);
    free(q);
}

static void test_filter_bad_input(void **state)
{
    (void)state;
    float *x = sml_test_blobs(200, DIM, 4, 0.4f, 41);
    simil_index *index = filled("Flat", SIMIL_METRIC_L2, "cpu", x, 200, NULL);
    simil_search_params *p = sml_test_params("");
    const int64_t unsorted[] = {4, 2}, repeated[] = {2, 2}, negative[] = {-1, 3};
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_search_params_allow_ids(p, 2, unsorted));
    assert_non_null(strstr(simil_last_error(), "ascending"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_search_params_allow_ids(p, 2, repeated));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_search_params_allow_ids(p, 2, negative));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_search_params_allow_ids(p, 3, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_search_params_allow_bitset(p, -1, (const uint8_t *)"x"));
    assert_false(simil_search_params_has_filter(p)); /* failed calls changed nothing */
    /* a bitset shorter than the ids: refused at search, naming both */
    uint8_t bytes[25];
    memset(bytes, 0xff, sizeof bytes);
    SML_ASSERT_OK(simil_search_params_allow_bitset(p, 199, bytes));
    float d[K];
    int64_t l[K];
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_search(index, 1, x, K, p, d, l));
    assert_non_null(strstr(simil_last_error(), "199 bits"));
    assert_non_null(strstr(simil_last_error(), "200 bits"));
    SML_ASSERT_OK(simil_search_params_allow_bitset(p, 200, bytes));
    SML_ASSERT_OK(simil_index_search(index, 1, x, K, p, d, l));
    assert_int_equal(l[0], 0);
    /* nothing allowed: every slot empty */
    SML_ASSERT_OK(simil_search_params_allow_ids(p, 0, NULL));
    SML_ASSERT_OK(simil_index_search(index, 1, x, K, p, d, l));
    for (int j = 0; j < K; j++) assert_int_equal(l[j], -1);
    simil_search_params_allow_all(p);
    assert_false(simil_search_params_has_filter(p));
    SML_ASSERT_OK(simil_index_search(index, 1, x, K, p, d, l));
    assert_int_equal(l[0], 0);
    simil_search_params_destroy(p);
    simil_index_destroy(index);
    free(x);
}

/* ---- range search ---- */

/* Range results against the full ranking: the rows inside the radius, in
 * order, bit for bit. */
static void check_range(const char *what, const simil_index *index, const float *q, float radius,
                        const simil_search_params *p, const simil_range_result *r)
{
    const int64_t all = simil_index_size(index);
    const int l2 = simil_index_metric(index) == SIMIL_METRIC_L2;
    float *D = sml_test_malloc(sizeof(float) * NQ * (size_t)all);
    int64_t *L = sml_test_malloc(sizeof(int64_t) * NQ * (size_t)all);
    SML_ASSERT_OK(simil_index_search(index, NQ, q, all, p, D, L));
    assert_int_equal(r->nq, NQ);
    assert_int_equal(r->offsets[0], 0);
    for (int64_t i = 0; i < NQ; i++) {
        int64_t n = 0;
        while (n < all && L[i * all + n] >= 0 &&
               (l2 ? D[i * all + n] < radius : D[i * all + n] > radius))
            n++;
        const int64_t at = r->offsets[i];
        if (r->offsets[i + 1] - at != n)
            fail_msg("%s: query %ld has %ld neighbours within %g, expected %ld", what, (long)i,
                     (long)(r->offsets[i + 1] - at), (double)radius, (long)n);
        assert_memory_equal(r->labels + at, L + i * all, sizeof(int64_t) * (size_t)n);
        assert_memory_equal(r->distances + at, D + i * all, sizeof(float) * (size_t)n);
    }
    free(D);
    free(L);
}

/* A radius that holds about `count` neighbours of query 0 (fewer where the
 * index scans fewer). */
static float radius_for(const simil_index *index, const float *q, int64_t count,
                        const simil_search_params *p)
{
    float *d = sml_test_malloc(sizeof(float) * (size_t)count);
    int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)count);
    SML_ASSERT_OK(simil_index_search(index, 1, q, count, p, d, l));
    int64_t last = count - 1;
    while (last > 0 && l[last] < 0) last--;
    const float r = d[last];
    free(d);
    free(l);
    return r;
}

static void test_range_every_type(void **state)
{
    (void)state;
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};
    float *x = sml_test_blobs(N, DIM, 20, 0.4f, 51), *q = sml_test_blobs(NQ, DIM, 20, 0.4f, 52);
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * N);
    for (int64_t i = 0; i < N; i++) ids[i] = row_id(i);
    unsigned char *allowed = random_allowed(50, 9);
    /* few neighbours (one round), about 300 (three rounds: k = 64, 256,
     * 1024), and nearly all (k grows to the index size) */
    const int64_t counts[] = {5, 300, N - 10};
    for (size_t t = 0; t < RANGE_TYPES; t++)
        for (int m = 0; m < 3; m++) {
            simil_index *index = filled(types[t][0], metrics[m], "cpu", x, N, ids);
            simil_search_params *plain = sml_test_params(types[t][1]), *bits, *list;
            sml_test_allow_params(allowed, 3 * N + 1, types[t][1], &bits, &list);
            for (int c = 0; c < 3; c++) {
                const float radius = radius_for(index, q, counts[c], plain);
                char what[128];
                snprintf(what, sizeof what, "range %s %s %s, ~%ld within", types[t][0],
                         types[t][1], simil_metric_name(metrics[m]), (long)counts[c]);
                simil_range_result *r;
                SML_ASSERT_OK(simil_index_range_search(index, NQ, q, radius, plain, &r));
                check_range(what, index, q, radius, plain, r);
                simil_range_result_destroy(r);
                /* with a filter: the allowed ones among them */
                SML_ASSERT_OK(simil_index_range_search(index, NQ, q, radius, list, &r));
                check_range(what, index, q, radius, bits, r);
                for (int64_t j = 0; j < r->offsets[NQ]; j++) assert_true(allowed[r->labels[j]]);
                simil_range_result_destroy(r);
            }
            simil_search_params_destroy(plain);
            simil_search_params_destroy(bits);
            simil_search_params_destroy(list);
            simil_index_destroy(index);
        }
    free(allowed);
    free(ids);
    free(x);
    free(q);
}

/* Flat range search against float64 brute force: every vector inside the
 * radius, none outside, but for distances within rounding of the radius. */
static void test_range_flat_brute_force(void **state)
{
    (void)state;
    float *x = sml_test_blobs(N, DIM, 20, 0.4f, 61), *q = sml_test_blobs(NQ, DIM, 20, 0.4f, 62);
    simil_index *index = filled("Flat", SIMIL_METRIC_L2, "cpu", x, N, NULL);
    simil_search_params *p = sml_test_params("");
    const float radius = radius_for(index, q, 500, p);
    simil_range_result *r;
    SML_ASSERT_OK(simil_index_range_search(index, NQ, q, radius, NULL, &r));
    unsigned char *found = sml_test_malloc(N);
    for (int64_t i = 0; i < NQ; i++) {
        memset(found, 0, N);
        for (int64_t j = r->offsets[i]; j < r->offsets[i + 1]; j++) {
            const int64_t id = r->labels[j];
            assert_true(id >= 0 && id < N && !found[id]);
            found[id] = 1;
            const double ref = sml_test_distance(q + i * DIM, x + id * DIM, DIM, SIMIL_METRIC_L2);
            assert_true(fabs(ref - r->distances[j]) <= 1e-4 * fmax(1.0, ref));
            if (j > r->offsets[i]) assert_true(r->distances[j] >= r->distances[j - 1]);
        }
        for (int64_t id = 0; id < N; id++) {
            const double ref = sml_test_distance(q + i * DIM, x + id * DIM, DIM, SIMIL_METRIC_L2);
            const double slack = 1e-4 * fmax(1.0, ref);
            if (ref < radius - slack && !found[id])
                fail_msg("query %ld: id %ld at %g inside %g is missing", (long)i, (long)id, ref,
                         (double)radius);
            if (ref > radius + slack && found[id])
                fail_msg("query %ld: id %ld at %g outside %g is returned", (long)i, (long)id,
                         ref, (double)radius);
        }
    }
    free(found);
    simil_range_result_destroy(r);
    simil_search_params_destroy(p);
    simil_index_destroy(index);
    free(x);
    free(q);
}

static void test_range_bad_input(void **state)
{
    (void)state;
    float *x = sml_test_blobs(100, DIM, 4, 0.4f, 71);
    simil_index *l2 = filled("Flat", SIMIL_METRIC_L2, "cpu", x, 100, NULL);
    simil_index *ip = filled("Flat", SIMIL_METRIC_IP, "cpu", x, 100, NULL);
    simil_range_result *r = (simil_range_result *)1;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_range_search(l2, 1, x, -1, NULL, &r));
    assert_null(r);
    assert_non_null(strstr(simil_last_error(), "negative"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_range_search(l2, 1, x, NAN, NULL, &r));
    assert_non_null(strstr(simil_last_error(), "finite"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_range_search(ip, 1, x, INFINITY, NULL, &r));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_range_search(l2, 1, NULL, 1, NULL, &r));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_range_search(l2, 1, x, 1, NULL, NULL));
    /* an IP radius may be negative: a similarity */
    SML_ASSERT_OK(simil_index_range_search(ip, 1, x, -1e30f, NULL, &r));
    assert_int_equal(r->offsets[1], 100);
    simil_range_result_destroy(r);
    /* radius 0 for L2: strictly inside nothing */
    SML_ASSERT_OK(simil_index_range_search(l2, 2, x, 0, NULL, &r));
    assert_int_equal(r->offsets[2], 0);
    simil_range_result_destroy(r);
    /* NaN queries are refused, also by an empty index */
    float bad[DIM] = {NAN};
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_range_search(l2, 1, bad, 1, NULL, &r));
    SML_ASSERT_OK(simil_index_reset(l2));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_range_search(l2, 1, bad, 1, NULL, &r));
    SML_ASSERT_OK(simil_index_range_search(l2, 3, x, 1, NULL, &r));
    assert_int_equal(r->nq, 3);
    assert_int_equal(r->offsets[3], 0);
    simil_range_result_destroy(r);
    SML_ASSERT_OK(simil_index_range_search(l2, 0, NULL, 1, NULL, &r));
    assert_int_equal(r->offsets[0], 0);
    simil_range_result_destroy(r);
    simil_range_result_destroy(NULL);
    simil_index_destroy(l2);
    simil_index_destroy(ip);
    free(x);
}

/* Each filter set on a handle gets a stamp no other filter has had (a GPU
 * index knows its copy by it, cuda_filter.cu): new on every set, the same
 * bytes included, and none once every id is allowed again. */
static void test_filter_stamps(void **state)
{
    (void)state;
    simil_search_params *a, *b;
    SML_ASSERT_OK(simil_search_params_create(&a));
    SML_ASSERT_OK(simil_search_params_create(&b));
    const uint8_t bits[2] = {0x0f, 0xf0};
    const int64_t ids[3] = {1, 5, 9};
    uint64_t seen[4];
    SML_ASSERT_OK(simil_search_params_allow_bitset(a, 16, bits));
    seen[0] = a->allow->stamp;
    SML_ASSERT_OK(simil_search_params_allow_bitset(a, 16, bits));
    seen[1] = a->allow->stamp;
    SML_ASSERT_OK(simil_search_params_allow_ids(a, 3, ids));
    seen[2] = a->allow->stamp;
    SML_ASSERT_OK(simil_search_params_allow_bitset(b, 16, bits));
    seen[3] = b->allow->stamp;
    for (int i = 0; i < 4; i++) {
        assert_true(seen[i] != 0);
        for (int j = 0; j < i; j++) assert_true(seen[i] != seen[j]);
    }
    simil_search_params_allow_all(a);
    assert_null(a->allow);
    simil_search_params_destroy(a);
    simil_search_params_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filtered_every_type),
        cmocka_unit_test(test_flat_filtered_brute_force),
        cmocka_unit_test(test_filtered_shards),
        cmocka_unit_test(test_filter_bad_input),
        cmocka_unit_test(test_filter_stamps),
        cmocka_unit_test(test_range_every_type),
        cmocka_unit_test(test_range_flat_brute_force),
        cmocka_unit_test(test_range_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
