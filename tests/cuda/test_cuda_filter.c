/* test_cuda_filter.c: filtered search (allowed ids) on the GPU, for every
 * index type, against the CPU and against the GPU's own full ranking.
 *
 * Each index is trained and filled on the CPU, saved, and loaded on both
 * devices, so that both hold the same lists and codes.  Three oracles:
 *  - the GPU's filtered search with the ids as a bitset and as a list give
 *    the same results;
 *  - its results, rank by rank, are the CPU's filtered results: distances
 *    equal within rounding, ids equal but where keys tie within rounding,
 *    every id allowed, and empty slots (-1) at the same ranks;
 *  - for the types whose keys do not depend on k (not Flat, whose small k
 *    takes tensor cores, nor IVF-PQ, whose fused scan sums in another
 *    order, nor IVF-SQ8, whose few queries take the probe scan on decoded
 *    floats and whose full ranking its tensor cores), the allowed rows of a
 *    full ranking (k = every row), first k, bit for bit.
 * Flat also runs both of its paths (a few queries: the fused small-batch
 * scan, which does not read a refused row, on tensor cores and off, and one
 * query in one launch; many: the GEMM tiles) and k past 2048 (radix
 * selection). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_backend.h"
#include "util/test_util.h"

enum { N = 3000, DIM = 16, NQ_MAX = 200 };

static int64_t row_id(int64_t row) { return 3 * row + 1; }

/* allowed[id] for ids below 3 * N + 1: a pseudo-random share `percent`. */
static unsigned char *random_allowed(int percent, uint64_t seed)
{
    return sml_test_random_allowed(3 * N + 1, percent, seed);
}

static int close_to(float a, float b)
{
    if (isinf(a) || isinf(b)) return a == b;
    return fabsf(a - b) <= 1e-4f * fmaxf(1.0f, fmaxf(fabsf(a), fabsf(b)));
}

/* GPU results (d, l) against the CPU's (rd, rl), nq x k. */
static void check_against_cpu(const char *what, int64_t nq, int64_t k, const float *d,
                              const int64_t *l, const float *rd, const int64_t *rl,
                              const unsigned char *allowed)
{
    for (int64_t i = 0; i < nq; i++)
        for (int64_t j = 0; j < k; j++) {
            const int64_t e = i * k + j;
            if ((l[e] < 0) != (rl[e] < 0))
                fail_msg("%s: query %ld rank %ld: id %ld on the GPU, %ld on the CPU", what,
                         (long)i, (long)j, (long)l[e], (long)rl[e]);
            if (l[e] < 0) continue;
            if (!allowed[l[e]])
                fail_msg("%s: query %ld rank %ld: id %ld is not allowed", what, (long)i, (long)j,
                         (long)l[e]);
            if (!close_to(d[e], rd[e]))
                fail_msg("%s: query %ld rank %ld: distance %g on the GPU, %g on the CPU", what,
                         (long)i, (long)j, (double)d[e], (double)rd[e]);
            if (l[e] != rl[e]) {
                /* only a near tie may swap ids: a neighbour rank of the CPU's
                 * holds the GPU's id at about the same distance */
                int found = 0;
                for (int64_t u = i * k; u < (i + 1) * k && !found; u++)
                    found = rl[u] == l[e] && close_to(rd[u], d[e]);
                if (!found && !(j == k - 1 || (j + 1 < k && close_to(rd[e], rd[e + 1]))) &&
                    !(j > 0 && close_to(rd[e], rd[e - 1])))
                    fail_msg("%s: query %ld rank %ld: id %ld on the GPU, %ld on the CPU at %g",
                             what, (long)i, (long)j, (long)l[e], (long)rl[e], (double)rd[e]);
            }
        }
}

/* The filtered results against the allowed rows of a full ranking. */
static void check_against_ranking(const char *what, const simil_index *index, int64_t nq,
                                  const float *q, int64_t k, const simil_search_params *plain,
                                  const float *d, const int64_t *l, const unsigned char *allowed)
{
    float *D = sml_test_malloc(sizeof(float) * (size_t)(nq * N));
    int64_t *L = sml_test_malloc(sizeof(int64_t) * (size_t)(nq * N));
    SML_ASSERT_OK(simil_index_search(index, nq, q, N, plain, D, L));
    sml_test_check_filtered_ranking(what, nq, k, N, D, L, d, l, allowed, NULL);
    free(D);
    free(L);
}

/* One index on both devices, searched with filters of 1%, 10% and 50%. */
static void check_type(const char *desc, const char *settings, simil_metric metric,
                       int by_ranking, const float *x, const int64_t *ids, const float *q,
                       int64_t nq, int64_t k)
{
    simil_index *built, *cpu, *gpu;
    SML_ASSERT_OK(simil_index_create(&built, DIM, desc, metric, "cpu"));
    SML_ASSERT_OK(simil_index_train(built, N, x));
    SML_ASSERT_OK(simil_index_add(built, N, x, ids));
    const char *path = sml_test_path("filter.simil");
    SML_ASSERT_OK(simil_index_save(built, path));
    simil_index_destroy(built);
    SML_ASSERT_OK(simil_index_load(&cpu, path, "cpu"));
    SML_ASSERT_OK(simil_index_load(&gpu, path, "gpu"));
    remove(path);
    const size_t nk = (size_t)(nq * k);
    float *d = sml_test_malloc(sizeof(float) * nk), *d2 = sml_test_malloc(sizeof(float) * nk),
          *rd = sml_test_malloc(sizeof(float) * nk);
    int64_t *l = sml_test_malloc(sizeof(int64_t) * nk), *l2 = sml_test_malloc(sizeof(int64_t) * nk),
            *rl = sml_test_malloc(sizeof(int64_t) * nk);
    const int percents[] = {1, 10, 50};
    simil_search_params *plain = sml_test_params(settings);
    for (int p = 0; p < 3; p++) {
        unsigned char *allowed = random_allowed(percents[p], 7 + (uint64_t)p);
        simil_search_params *bits, *list;
        sml_test_allow_params(allowed, 3 * N + 1, settings, &bits, &list);
        char what[160];
        snprintf(what, sizeof what, "gpu %s %s %s, %ld queries, k=%ld, %d%% allowed", desc,
                 settings, simil_metric_name(metric), (long)nq, (long)k, percents[p]);
        SML_ASSERT_OK(simil_index_search(gpu, nq, q, k, bits, d, l));
        SML_ASSERT_OK(simil_index_search(gpu, nq, q, k, list, d2, l2));
        assert_memory_equal(l, l2, sizeof(int64_t) * nk);
        assert_memory_equal(d, d2, sizeof(float) * nk);
        SML_ASSERT_OK(simil_index_search(cpu, nq, q, k, bits, rd, rl));
        check_against_cpu(what, nq, k, d, l, rd, rl, allowed);
        if (by_ranking) check_against_ranking(what, gpu, nq, q, k, plain, d, l, allowed);
        simil_search_params_destroy(bits);
        simil_search_params_destroy(list);
        free(allowed);
    }
    simil_search_params_destroy(plain);
    simil_index_destroy(cpu);
    simil_index_destroy(gpu);
    free(d);
    free(d2);
    free(rd);
    free(l);
    free(l2);
    free(rl);
}

static float *x_, *q_;
static int64_t *ids_;

static int setup(void **state)
{
    (void)state;
    x_ = sml_test_blobs(N, DIM, 20, 0.4f, 11);
    q_ = sml_test_blobs(NQ_MAX, DIM, 20, 0.4f, 12);
    ids_ = sml_test_malloc(sizeof(int64_t) * N);
    for (int64_t i = 0; i < N; i++) ids_[i] = row_id(i);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(x_);
    free(q_);
    free(ids_);
    return 0;
}

static void test_every_type(void **state)
{
    (void)state;
    static const struct {
        const char *desc, *settings;
        int by_ranking;
    } types[] = {
        {"IVF16,Flat", "nprobe=5", 1},
        {"IVF16,PQ8", "nprobe=5", 0},
        {"IVF16,PQ8", "nprobe=5,precomputed_tables=0", 0},
        {"SQ8", "", 1},
        {"IVF16,SQ8", "nprobe=5", 0},
        {"XFBQ", "extra_distance=1", 1},
        {"IVF16,XFBQ", "nprobe=4,extra_distance=1", 1},
        {"IVF16,XFBQ", "nprobe=4", 0},
    };
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};
    const int nmetrics = sml_test_quick() ? 1 : 3;  /* under compute-sanitizer: L2 alone */
    /* one query probes fewer lists than there are: the pair scans (SQ)
     * test the labels of the rows they read instead of a bitset over all */
    const int64_t nqs[] = {10, 1};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int m = 0; m < nmetrics; m++)
            for (int i = 0; i < 2; i++)
                check_type(types[t].desc, types[t].settings, metrics[m], types[t].by_ranking,
                           x_, ids_, q_, nqs[i], 20);
}

static void test_flat_paths(void **state)
{
    (void)state;
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};
    const int nmetrics = sml_test_quick() ? 1 : 3;
    for (int m = 0; m < nmetrics; m++) {
        /* the small batch skips the refused rows, on tensor cores and off,
         * and one query is one launch */
        for (int tensor = 1; tensor >= 0; tensor--) {
            sml_cuda_knn_small_tensor(tensor);
            check_type("Flat", "", metrics[m], 0, x_, ids_, q_, 10, 20);
            check_type("Flat", "", metrics[m], 0, x_, ids_, q_, 1, 20);
        }
        sml_cuda_knn_small_tensor(1);
        check_type("Flat", "", metrics[m], 0, x_, ids_, q_, NQ_MAX, 20);   /* GEMM tiles */
        check_type("Flat", "", metrics[m], 0, x_, ids_, q_, 10, 2100);     /* radix, k > allowed */
    }
}

/* The GPU keeps the last filter it was sent and reads it again when the next
 * one is the same: filters of one size sent in turn (A, A, B, A, B as a
 * list, then a copy of A in other memory) each give their own results, and
 * so does a handle whose filter is set again in place. */
static void test_filter_sent_again(void **state)
{
    (void)state;
    const char *descs[] = {"IVF16,Flat", "Flat"}, *settings[] = {"nprobe=16", ""};
    const int64_t nq = 10, k = 20, nk = nq * k;
    for (int t = 0; t < 2; t++) {
        simil_index *cpu, *gpu;
        SML_ASSERT_OK(simil_index_create(&cpu, DIM, descs[t], SIMIL_METRIC_L2, "cpu"));
        SML_ASSERT_OK(simil_index_train(cpu, N, x_));
        SML_ASSERT_OK(simil_index_add(cpu, N, x_, ids_));
        const char *path = sml_test_path("filter_again.simil");
        SML_ASSERT_OK(simil_index_save(cpu, path));
        SML_ASSERT_OK(simil_index_load(&gpu, path, "gpu"));
        remove(path);
        unsigned char *allowed[2] = {random_allowed(10, 101), random_allowed(10, 102)};
        simil_search_params *bits[3], *list[3];
        for (int f = 0; f < 3; f++)
            sml_test_allow_params(allowed[f == 1], 3 * N + 1, settings[t], &bits[f], &list[f]);
        float *d = sml_test_malloc(sizeof(float) * nk), *rd = sml_test_malloc(sizeof(float) * nk);
        int64_t *l = sml_test_malloc(sizeof(int64_t) * nk);
        int64_t *rl = sml_test_malloc(sizeof(int64_t) * nk);
        /* which filter (0 or 1: A or B; 2: A's copy), and as a list */
        const int order[][2] = {{0, 0}, {0, 0}, {1, 0}, {0, 0}, {1, 1}, {2, 0}, {2, 1}};
        for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
            const int f = order[i][0];
            const simil_search_params *p = order[i][1] ? list[f] : bits[f];
            char what[96];
            snprintf(what, sizeof what, "%s, search %zu (filter %c%s)", descs[t], i,
                     "ABA"[f], order[i][1] ? " as a list" : "");
            SML_ASSERT_OK(simil_index_search(gpu, nq, q_, k, p, d, l));
            SML_ASSERT_OK(simil_index_search(cpu, nq, q_, k, p, rd, rl));
            check_against_cpu(what, nq, k, d, l, rd, rl, allowed[f == 1]);
        }
        /* one handle whose filter is set again in place (A, then B, then A:
         * each a new stamp, sent again) and searched twice each time (the
         * second known by its stamp), for a bitset the pinned copy holds and
         * one past kFilterCopyMax (64 MB, which only its stamp keeps) */
        const int64_t sizes[] = {3 * N + 1, ((int64_t)1 << 29) + 64};
        for (int z = 0; z < 2; z++) {
            const int64_t nbits = sizes[z];
            uint8_t *packed[2];
            for (int f = 0; f < 2; f++) {
                packed[f] = calloc((size_t)(nbits + 7) / 8, 1);
                assert_non_null(packed[f]);
                for (int64_t id = 0; id < 3 * N + 1; id++)
                    if (allowed[f][id]) packed[f][id / 8] |= (uint8_t)(1u << (id % 8));
            }
            simil_search_params *p = sml_test_params(settings[t]);
            const int seq[] = {0, 1, 0};
            for (int i = 0; i < 3; i++) {
                SML_ASSERT_OK(simil_search_params_allow_bitset(p, nbits, packed[seq[i]]));
                for (int again = 0; again < 2; again++) {
                    char what[96];
                    snprintf(what, sizeof what, "%s, %lld bits set in place, %c, search %d",
                             descs[t], (long long)nbits, "AB"[seq[i]], again);
                    SML_ASSERT_OK(simil_index_search(gpu, nq, q_, k, p, d, l));
                    SML_ASSERT_OK(simil_index_search(cpu, nq, q_, k, p, rd, rl));
                    check_against_cpu(what, nq, k, d, l, rd, rl, allowed[seq[i]]);
                }
            }
            simil_search_params_destroy(p);
            free(packed[0]);
            free(packed[1]);
        }
        for (int f = 0; f < 3; f++) {
            simil_search_params_destroy(bits[f]);
            simil_search_params_destroy(list[f]);
        }
        free(allowed[0]);
        free(allowed[1]);
        free(d);
        free(rd);
        free(l);
        free(rl);
        simil_index_destroy(cpu);
        simil_index_destroy(gpu);
    }
}

/* Ids no row has change nothing; an empty list gives only empty slots. */
static void test_edges(void **state)
{
    (void)state;
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, DIM, "IVF16,Flat", SIMIL_METRIC_L2, "gpu"));
    SML_ASSERT_OK(simil_index_train(index, N, x_));
    SML_ASSERT_OK(simil_index_add(index, N, x_, ids_));
    simil_search_params *p = sml_test_params("nprobe=16");
    float d[10];
    int64_t l[10];
    SML_ASSERT_OK(simil_search_params_allow_ids(p, 0, NULL));
    SML_ASSERT_OK(simil_index_search(index, 1, q_, 10, p, d, l));
    for (int j = 0; j < 10; j++) assert_int_equal(l[j], -1);
    const int64_t only[] = {0, 4, 5};  /* id 4 = row 1; 0 and 5 are no row's */
    SML_ASSERT_OK(simil_search_params_allow_ids(p, 3, only));
    SML_ASSERT_OK(simil_index_search(index, 1, q_, 10, p, d, l));
    assert_int_equal(l[0], 4);
    for (int j = 1; j < 10; j++) assert_int_equal(l[j], -1);
    simil_search_params_destroy(p);
    simil_index_destroy(index);
}

int main(void)
{
    sml_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_type),
        cmocka_unit_test(test_flat_paths),
        cmocka_unit_test(test_filter_sent_again),
        cmocka_unit_test(test_edges),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
