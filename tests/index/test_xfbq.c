/* test_xfbq.c: XFBQ and IVFn,XFBQ on the CPU.
 *
 *   - codes: every component's planes are the greedy signs (a float64
 *     oracle), padding bits are 0, and the XOR/popcount D gives the integer
 *     inner product of the dequantized values exactly, on both popcount loops;
 *   - alpha: 1 / the 0.98 quantile, chosen by the first add or by train, set by
 *     hand (kept, saved, recoding the stored rows), refused for other types;
 *   - precision@10 >= 0.99 on Fashion-MNIST (cosine) at the default extra
 *     distance;
 *   - results are exact over their candidates: k >= n gives exact search; the
 *     returned similarities are the true ones of the returned ids;
 *   - edge cases: dims 1, 63, 65, 785, zero and equal vectors, k > n,
 *     duplicate ids, NaN, remove then search, save/load, metrics IP and L2,
 *     IVF,XFBQ at nprobe = nlist equal to flat XFBQ;
 *   - RR (the random rotation): factory syntax and refusals, an orthogonal
 *     rotation kept by save/load (and read, not made again, by a load), the
 *     rotation of queries bit for bit the one FMA chain per component that
 *     the GPU runs too,
 *     reconstruct giving the vectors added, and
 *     a higher precision than without it on data with a few dominant
 *     dimensions (which breaks the paper's Assumption 3.1);
 *   - every host allocation made to fail in turn: out of memory, and the
 *     index as it was. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "algo/xfbq.h"
#include "core/alloc.h"
#include "core/xfbq_code.h"
#include "cpu/cpu_xfbq.h"
#include "index/index_internal.h"
#include "util/test_util.h"

static const double rel_tol = 1e-4;

/* nprobe 0 and extra < 0: the defaults. */
static void search_p(const simil_index *index, int64_t nq, const float *q, int64_t k,
                     int64_t nprobe, float extra, float *d, int64_t *l)
{
    simil_search_params *p = sml_test_params("");
    if (nprobe > 0) SML_ASSERT_OK(simil_search_params_set_int(p, "nprobe", nprobe));
    if (extra >= 0) SML_ASSERT_OK(simil_search_params_set_float(p, "extra_distance", extra));
    SML_ASSERT_OK(simil_index_search(index, nq, q, k, p, d, l));
    simil_search_params_destroy(p);
}

static simil_index *flat_xfbq(const char *desc, int64_t dim, simil_metric metric, int64_t n,
                              const float *x)
{
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, dim, desc, metric, "cpu"));
    assert_true(simil_index_is_trained(index)); /* flat XFBQ takes vectors at once */
    SML_ASSERT_OK(simil_index_add(index, n, x, NULL));
    return index;
}

/* Precision@k of labels against exact cosine search. */
static double precision_vs_exact(const float *x, int64_t n, const float *q, int64_t nq,
                                 int64_t dim, int64_t k, const int64_t *l)
{
    simil_index *flat;
    SML_ASSERT_OK(simil_index_create(&flat, dim, "Flat", SIMIL_METRIC_COSINE, "cpu"));
    SML_ASSERT_OK(simil_index_add(flat, n, x, NULL));
    float *d = sml_test_malloc(sizeof(float) * (size_t)(nq * k));
    int64_t *t = sml_test_malloc(sizeof(int64_t) * (size_t)(nq * k));
    SML_ASSERT_OK(simil_index_search(flat, nq, q, k, NULL, d, t));
    int64_t hits = 0;
    for (int64_t i = 0; i < nq; i++)
        for (int64_t j = 0; j < k; j++)
            for (int64_t u = 0; u < k; u++) hits += l[i * k + j] == t[i * k + u];
    simil_index_destroy(flat);
    free(d);
    free(t);
    return (double)hits / (double)(nq * k);
}

/* ---- codes ---- */

/* The greedy signs of v as a level m (bit bits-i of m set where s_i = +1);
 * sign(0) is +1 in even dimensions, -1 in odd ones. */
static int greedy_level(double v, int bits, int odd)
{
    double r = v;
    int m = 0;
    for (int i = 1; i <= bits; i++) {
        const int plus = r > 0 || (r == 0 && !odd);
        r -= (plus ? 1 : -1) * ldexp(1.0, -i);
        m = (m << 1) | plus;
    }
    return m;
}

static void fill_components(float *x, int64_t count, uint64_t seed)
{
    static const float special[] = {0.0f,    -0.0f,    1.0f,     -1.0f,   0.5f,   -0.5f,
                                    0.25f,   -0.25f,   0.375f,   -0.375f, 0.125f, -0.125f,
                                    1e-30f,  -1e-30f,  0.99805f, -0.9999f, 2.0f,  -7.0f,
                                    0.0625f, -0.0625f, 0.03125f, 1.0f - 1.0f / 512};
    sml_test_fill_uniform(x, count, seed, -1.3f, 1.3f);
    const int64_t ns = (int64_t)(sizeof special / sizeof special[0]);
    for (int64_t i = 0; i < count; i += 3) x[i] = special[(i / 3) % ns];
}

/* Planes against the oracle, padding bits zero; returns the levels. */
static void check_code(const char *what, const sml_xfbq *q, int bits, const float *x,
                       const uint64_t *code, int *levels)
{
    for (int64_t d = 0; d < q->dim; d++) {
        const float v = x[d] * q->alpha;
        const int m = greedy_level((double)v, bits, (int)(d & 1));
        levels[d] = m;
        for (int i = 0; i < bits; i++) {
            const int bit = (int)((code[i * q->words + d / 64] >> (d % 64)) & 1);
            const int want = !((m >> (bits - 1 - i)) & 1);
            if (bit != want)
                fail_msg("%s: dim %lld value %.9g plane %d: bit %d, greedy sign wants %d", what,
                         (long long)d, (double)v, i, bit, want);
        }
    }
    for (int i = 0; i < bits; i++)
        for (int64_t d = q->dim; d < q->words * 64; d++)
            if ((code[i * q->words + d / 64] >> (d % 64)) & 1)
                fail_msg("%s: padding bit %lld of plane %d is set", what, (long long)d, i);
}

static void check_identity(int64_t dim, int qbits, int bbits, uint64_t seed)
{
    const int64_t n = 37;
    sml_xfbq q;
    SML_ASSERT_OK(sml_xfbq_init(&q, dim, qbits, bbits));
    q.alpha = 1.0f;
    float *xq = sml_test_malloc(sizeof(float) * (size_t)dim);
    float *xb = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    fill_components(xq, dim, seed);
    fill_components(xb, n * dim, seed + 1);
    uint64_t *qc = sml_test_malloc(sizeof(uint64_t) * (size_t)(qbits * q.words));
    uint8_t *rows = sml_test_malloc(q.row_size * (size_t)n);
    sml_xfbq_encode(&q, qbits, 1, xq, 0, qc, (size_t)(qbits * q.words) * 8);
    sml_xfbq_make_rows(&q, n, xb, 0, rows);
    int *mq = sml_test_malloc(sizeof(int) * (size_t)dim);
    int *mb = sml_test_malloc(sizeof(int) * (size_t)dim);
    uint32_t *dist = sml_test_malloc(sizeof(uint32_t) * (size_t)n);
    char what[96];
    snprintf(what, sizeof what, "XFBQ%dx%d dim %lld seed %llu", qbits, bbits, (long long)dim,
             (unsigned long long)seed);
    check_code(what, &q, qbits, xq, qc, mq);
    /* the batched loop: the query 6 times in one block (four at a time, then
     * two alone), each copy checked */
    enum { COPIES = 6 };
    const int batched = sml_cpu_xfbq_has_vnni() && sml_cpu_xfbq_batch_fits(qbits, bbits, q.words);
    uint32_t *dist2 = sml_test_malloc(sizeof(uint32_t) * (size_t)(COPIES * n));
    if (batched) {
        const size_t code = sizeof(uint64_t) * (size_t)(qbits * q.words);
        uint64_t *copies = sml_test_malloc(COPIES * code);
        for (int c = 0; c < COPIES; c++) memcpy((char *)copies + c * code, qc, code);
        void *scratch = sml_test_malloc(sml_cpu_xfbq_batch_scratch(COPIES, q.words));
        sml_cpu_xfbq_distances_batch(copies, COPIES, qbits, rows, q.row_size, bbits, q.words, n,
                                     dist2, n, scratch);
        free(scratch);
        free(copies);
    }
    for (int impl = 1; impl <= 2 + COPIES; impl++) {
        if (impl == 2 && !sml_cpu_xfbq_has_avx512()) continue;
        if (impl >= 3 && !batched) continue;
        if (impl <= 2)
            sml_cpu_xfbq_distances((sml_xfbq_impl)impl, qc, qbits, rows, q.row_size, bbits,
                                   q.words, n, dist);
        else
            memcpy(dist, dist2 + (impl - 3) * n, sizeof(uint32_t) * (size_t)n);
        for (int64_t r = 0; r < n; r++) {
            const uint8_t *row = rows + (size_t)r * q.row_size;
            check_code(what, &q, bbits, xb + r * dim, (const uint64_t *)row, mb);
            /* the floats follow the code unchanged */
            assert_memory_equal(row + q.code_bytes, xb + r * dim, sizeof(float) * (size_t)dim);
            int64_t ip = 0; /* 2^{Q+B} <x^, y^> */
            for (int64_t d = 0; d < dim; d++)
                ip += (int64_t)(2 * mq[d] + 1 - (1 << qbits)) * (2 * mb[d] + 1 - (1 << bbits));
            const int64_t want = (int64_t)sml_xfbq_dmax(&q) - 2 * (int64_t)dist[r];
            if (ip != want)
                fail_msg("%s row %lld (%s loop): 2^(Q+B) <x^, y^> = %lld, from D=%u: %lld", what,
                         (long long)r,
                         impl == 1 ? "scalar" : impl == 2 ? "AVX-512" : "batched VNNI",
                         (long long)ip, dist[r], (long long)want);
        }
    }
    free(xq);
    free(xb);
    free(qc);
    free(rows);
    free(mq);
    free(mb);
    free(dist);
    free(dist2);
}

static void test_code_identity(void **state)
{
    (void)state;
    printf("AVX-512 VPOPCNTDQ loop: %s\n", sml_cpu_xfbq_has_avx512() ? "tested" : "absent");
    printf("batched AVX-512 VNNI loop: %s\n", sml_cpu_xfbq_has_vnni() ? "tested" : "absent");
    const int64_t dims[] = {1, 3, 63, 64, 65, 100, 128, 785};
    const int bits[][2] = {{4, 3}, {1, 1}, {8, 8}, {2, 5}, {3, 4}, {8, 1}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (size_t j = 0; j < sizeof bits / sizeof bits[0]; j++)
            check_identity(dims[i], bits[j][0], bits[j][1], 100 * i + j);
}

static void test_selection_parameters(void **state)
{
    (void)state;
    sml_xfbq q;
    SML_ASSERT_OK(sml_xfbq_init(&q, 96, 4, 3));
    assert_int_equal(sml_xfbq_dmax(&q), 96 * 15 * 7);
    assert_int_equal(q.words, 2);
    assert_int_equal(q.code_bytes, 48);
    assert_int_equal(q.row_size, 48 + 384);
    q.alpha = 4.0f;
    sml_xfbq_select sel;
    sml_xfbq_selection(&q, 0.05f, 0, &sel);
    /* 10080 >> 2 = 2520 < 4096; extra = 0.05 * 10080 = 504: 126 bins of 4 */
    assert_int_equal(sel.shift, 2);
    assert_int_equal(sel.nbins, 2521);
    assert_int_equal(sel.extra_bins, 126);
    sml_xfbq_selection(&q, 1.0f, 0, &sel);
    assert_int_equal(sel.extra_bins, 2520);
    sml_xfbq_selection(&q, 0.0011f, 0, &sel); /* 11.1 -> 3 bins */
    assert_int_equal(sel.extra_bins, 3);
    sml_xfbq_selection(&q, 0.0f, 0, &sel);
    assert_int_equal(sel.extra_bins, 0);
    assert_int_equal(sel.spread_q16, 0);
    /* a fraction of the spread: no fixed bins, the fraction in 2^-16 */
    sml_xfbq_selection(&q, 0.05f, 1, &sel);
    assert_int_equal(sel.shift, 2);
    assert_int_equal(sel.extra_bins, 0);
    assert_int_equal(sel.spread_q16, 3277); /* ceil(0.05 * 65536) */
    sml_xfbq_selection(&q, 1.0f, 1, &sel);
    assert_int_equal(sel.spread_q16, 65536);
    sml_xfbq_selection(&q, 0.0f, 1, &sel);
    assert_int_equal(sel.spread_q16, 0);
    /* the window: ceil(spread_q16 (median - lowest) / 2^16) more bins */
    assert_int_equal(sml_xfbq_window_bins(0, 3277, 100, 100), 0);
    assert_int_equal(sml_xfbq_window_bins(0, 3277, 100, 120), 2);     /* 1.00006 */
    assert_int_equal(sml_xfbq_window_bins(0, 3277, 100, 2100), 101);  /* 100.006 */
    assert_int_equal(sml_xfbq_window_bins(0, 3277, 0, 4095), 205);    /* 204.76 */
    assert_int_equal(sml_xfbq_window_bins(0, 65536, 7, 4095), 4088);
    assert_int_equal(sml_xfbq_window_bins(5, 0, 7, 4095), 5);
    /* distances past 2^31 are refused */
    assert_int_equal(sml_xfbq_init(&q, 40000, 8, 8), SIMIL_ERR_UNSUPPORTED);
}

/* ---- alpha ---- */

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void test_alpha(void **state)
{
    (void)state;
    const int64_t n = 2000, dim = 32;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 4, x));
    /* the reference: the 0.98 quantile of the normalized components */
    float *v = sml_test_malloc(sizeof(float) * n * dim);
    memcpy(v, x, sizeof(float) * n * dim);
    sml_test_normalize(v, n, dim);
    for (int64_t i = 0; i < n * dim; i++) v[i] = fabsf(v[i]);
    qsort(v, (size_t)(n * dim), sizeof *v, cmp_float);
    const float want = 1.0f / v[(int64_t)ceil(0.98 * n * dim) - 1];
    simil_index *index = flat_xfbq("XFBQ", dim, SIMIL_METRIC_COSINE, n, x);
    printf("alpha chosen by the first add: %g (1 / quantile %g)\n", sml_xfbq_index_alpha(index),
           want);
    assert_float_equal(sml_xfbq_index_alpha(index), want, 1e-6 * want);
    /* a later add keeps it */
    SML_ASSERT_OK(simil_index_add(index, 10, x, NULL));
    assert_float_equal(sml_xfbq_index_alpha(index), want, 1e-6 * want);
    /* by hand: kept by train, results equal a fresh index with that alpha */
    SML_ASSERT_OK(simil_index_set_xfbq_alpha(index, 2.5f));
    SML_ASSERT_OK(simil_index_train(index, 100, x + 50 * dim));
    assert_float_equal(sml_xfbq_index_alpha(index), 2.5f, 0);
    simil_index *fresh;
    SML_ASSERT_OK(simil_index_create(&fresh, dim, "XFBQ", SIMIL_METRIC_COSINE, "cpu"));
    SML_ASSERT_OK(simil_index_set_xfbq_alpha(fresh, 2.5f));
    SML_ASSERT_OK(simil_index_add(fresh, n, x, NULL));
    SML_ASSERT_OK(simil_index_add(fresh, 10, x, NULL));
    float d1[20 * 10], d2[20 * 10];
    int64_t l1[20 * 10], l2[20 * 10];
    search_p(index, 20, x, 10, 0, -1, d1, l1);
    search_p(fresh, 20, x, 10, 0, -1, d2, l2);
    assert_memory_equal(l1, l2, sizeof l1);
    assert_memory_equal(d1, d2, sizeof d1);
    /* train without a hand-set alpha picks it from its vectors, recoding */
    simil_index *trained;
    SML_ASSERT_OK(simil_index_create(&trained, dim, "XFBQ", SIMIL_METRIC_COSINE, "cpu"));
    SML_ASSERT_OK(simil_index_set_xfbq_alpha(trained, 1.0f));
    assert_float_equal(sml_xfbq_index_alpha(trained), 1.0f, 0);
    simil_index_destroy(trained);
    SML_ASSERT_OK(simil_index_create(&trained, dim, "XFBQ", SIMIL_METRIC_COSINE, "cpu"));
    SML_ASSERT_OK(simil_index_add(trained, 300, x + 1000 * dim, NULL)); /* alpha from these */
    SML_ASSERT_OK(simil_index_train(trained, n, x));
    assert_float_equal(sml_xfbq_index_alpha(trained), want, 1e-6 * want);
    simil_index_destroy(trained);
    /* refused values and types */
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_set_xfbq_alpha(index, 0.0f));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_set_xfbq_alpha(index, -1.0f));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_set_xfbq_alpha(index, NAN));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_set_xfbq_alpha(index, INFINITY));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_set_xfbq_alpha(NULL, 1.0f));
    simil_index *flat;
    SML_ASSERT_OK(simil_index_create(&flat, dim, "Flat", SIMIL_METRIC_COSINE, "cpu"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_set_xfbq_alpha(flat, 1.0f));
    assert_non_null(strstr(simil_last_error(), "not an XFBQ index"));
    simil_index_destroy(flat);
    /* all-zero data: alpha 1 */
    float zeros[4 * 8] = {0};
    float alpha;
    SML_ASSERT_OK(sml_xfbq_choose_alpha(4, 8, zeros, 1, &alpha));
    assert_float_equal(alpha, 1.0f, 0);
    simil_index_destroy(index);
    simil_index_destroy(fresh);
    free(x);
    free(v);
}

/* ---- search ---- */

static void test_fashion_mnist_precision(void **state)
{
    (void)state;
    const char *bp = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
    const char *qp = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
    struct stat st;
    if (stat(bp, &st) != 0) {
        printf("Fashion-MNIST is not installed (dataset-fashion-mnist): skipped\n");
        skip();
    }
    simil_matrix b, q;
    SML_ASSERT_OK(simil_matrix_read_float(bp, 0, -1, &b));
    SML_ASSERT_OK(simil_matrix_read_float(qp, 0, 500, &q));
    const int64_t k = 10, nq = q.rows, dim = b.cols;
    simil_index *index = flat_xfbq("XFBQ", dim, SIMIL_METRIC_COSINE, b.rows, b.data);
    float *d = sml_test_malloc(sizeof(float) * (size_t)(nq * k));
    int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)(nq * k));
    const float extras[] = {0.0f, 0.01f, 0.02f, -1.0f};
    double p = 0;
    for (int e = 0; e < 4; e++) {
        search_p(index, nq, q.data, k, 0, extras[e], d, l);
        p = precision_vs_exact(b.data, b.rows, q.data, nq, dim, k, l);
        printf("Fashion-MNIST cosine XFBQ4x3 (alpha %.3g), extra distance %.2f%s: precision@10 "
               "%.4f over %lld queries\n",
               sml_xfbq_index_alpha(index), extras[e] < 0 ? 0.05 : extras[e],
               extras[e] < 0 ? " (default)" : "", p, (long long)nq);
    }
    assert_true(p >= 0.99); /* measured 1.0 (0.993 at 0.02) */
    simil_index_destroy(index);
    simil_matrix_free(&b);
    simil_matrix_free(&q);
    free(d);
    free(l);
}

/* Every returned similarity is the true one of its label, rows sorted. */
static void check_true_keys(const char *what, const float *x, const float *q, int64_t nq,
                            int64_t dim, int64_t k, simil_metric metric, const float *d,
                            const int64_t *l)
{
    for (int64_t i = 0; i < nq; i++)
        for (int64_t j = 0; j < k; j++) {
            const int64_t id = l[i * k + j];
            if (id < 0) continue;
            const double want = sml_test_distance(q + i * dim, x + id * dim, dim, metric);
            if (fabs(want - d[i * k + j]) > 1e-4 * (1 + fabs(want)))
                fail_msg("%s query %lld rank %lld id %lld: %.7g, true %.7g", what, (long long)i,
                         (long long)j, (long long)id, d[i * k + j], want);
            if (j > 0 && l[i * k + j - 1] >= 0) {
                const float a = d[i * k + j - 1], c = d[i * k + j];
                const int ok = metric == SIMIL_METRIC_L2 ? a <= c : a >= c;
                if (!ok || (a == c && l[i * k + j - 1] > id))
                    fail_msg("%s query %lld: ranks %lld, %lld out of order", what, (long long)i,
                             (long long)j - 1, (long long)j);
            }
        }
}

static void test_dims_and_exactness(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 63, 64, 65, 785};
    const int64_t n = 600, nq = 25;
    for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
        const int64_t dim = dims[t];
        float *x = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
        float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
        SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 40 + t, x));
        SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 50 + t, q));
        simil_index *index = flat_xfbq("XFBQ", dim, SIMIL_METRIC_COSINE, n, x);
        float *d = sml_test_malloc(sizeof(float) * (size_t)(nq * (n + 5)));
        int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)(nq * (n + 5)));
        sml_test_normalize(x, n, dim);
        sml_test_normalize(q, nq, dim);
        char what[64];
        /* k >= n: every row is a candidate, so the search is exact */
        snprintf(what, sizeof what, "XFBQ dim %lld k > n", (long long)dim);
        search_p(index, nq, q, n + 5, 0, -1, d, l);
        sml_test_check_knn(what, x, n, q, nq, dim, n + 5, SIMIL_METRIC_IP, d, l, rel_tol);
        /* k = 10: true similarities, in order, and most of the true top 10 */
        snprintf(what, sizeof what, "XFBQ dim %lld k=10", (long long)dim);
        search_p(index, nq, q, 10, 0, -1, d, l);
        check_true_keys(what, x, q, nq, dim, 10, SIMIL_METRIC_IP, d, l);
        const double p = precision_vs_exact(x, n, q, nq, dim, 10, l);
        printf("mix %lld x %lld cosine XFBQ4x3: precision@10 %.3f\n", (long long)n,
               (long long)dim, p);
        assert_true(p >= (dim == 1 ? 0.5 : 0.9));
        simil_index_destroy(index);
        free(x);
        free(q);
        free(d);
        free(l);
    }
}

/* extra_of=spread: per query, the window is ceil(e (median bin - lowest bin))
 * bins past the bin of the k-th smallest D, D from the host encoder and the
 * scalar popcount loop (both checked against float64 above).  The results
 * are then exactly the best k of those candidates: each returned id is one,
 * as many as there are up to k, and no candidate left out beats the last. */
static void test_extra_of_spread(void **state)
{
    (void)state;
    const int64_t n = 3000, dim = 72, nq = 12, k = 10;
    float *x = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 71, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 72, q));
    sml_test_normalize(x, n, dim);
    sml_test_normalize(q, nq, dim);
    simil_index *index = flat_xfbq("XFBQ", dim, SIMIL_METRIC_COSINE, n, x);
    sml_xfbq c;
    SML_ASSERT_OK(sml_xfbq_init(&c, dim, 4, 3));
    c.alpha = sml_xfbq_index_alpha(index);
    uint64_t *base = calloc((size_t)n, c.code_bytes);
    uint64_t *qc = sml_test_malloc(sizeof(uint64_t) * (size_t)(4 * c.words));
    uint32_t *dist = sml_test_malloc(sizeof(uint32_t) * (size_t)n);
    assert_non_null(base);
    sml_xfbq_encode(&c, 3, n, x, 0, base, c.code_bytes);
    float *d = sml_test_malloc(sizeof(float) * (size_t)(nq * k));
    int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)(nq * k));
    const float extras[] = {0.0f, 0.02f, 0.1f, 0.5f};
    int64_t widest = 0;
    for (int e = 0; e < 4; e++) {
        simil_search_params *p = sml_test_params("extra_of=spread");
        SML_ASSERT_OK(simil_search_params_set_float(p, "extra_distance", extras[e]));
        SML_ASSERT_OK(simil_index_search(index, nq, q, k, p, d, l));
        simil_search_params_destroy(p);
        sml_xfbq_select sel;
        sml_xfbq_selection(&c, extras[e], 1, &sel);
        for (int64_t i = 0; i < nq; i++) {
            sml_xfbq_encode(&c, 4, 1, q + i * dim, 0, qc, sizeof(uint64_t) * 4 * c.words);
            sml_cpu_xfbq_distances(SML_XFBQ_IMPL_SCALAR, qc, 4, (const uint8_t *)base,
                                   c.code_bytes, 3, c.words, n, dist);
            int64_t hist[SML_XFBQ_MAX_BINS] = {0};
            for (int64_t r = 0; r < n; r++) hist[dist[r] >> sel.shift]++;
            int64_t kth = -1, lowest = -1, median = -1, seen = 0;
            for (int64_t bin = 0; bin < sel.nbins; bin++) {
                seen += hist[bin];
                if (lowest < 0 && seen >= 1) lowest = bin;
                if (kth < 0 && seen >= k) kth = bin;
                if (median < 0 && seen >= (n + 1) / 2) median = bin;
            }
            const int64_t window =
                (int64_t)ceil((double)sel.spread_q16 * (double)(median - lowest) / 65536.0);
            int64_t top = kth + window < sel.nbins - 1 ? kth + window : sel.nbins - 1;
            const uint32_t limit = (uint32_t)(((top + 1) << sel.shift) - 1);
            int64_t ncand = 0;
            for (int64_t r = 0; r < n; r++) ncand += dist[r] <= limit;
            widest = ncand > widest ? ncand : widest;
            const float *di = d + i * k;
            const int64_t *li = l + i * k;
            for (int64_t j = 0; j < k; j++) {
                if (j >= ncand) {
                    assert_int_equal(li[j], -1);
                    continue;
                }
                assert_true(li[j] >= 0 && li[j] < n);
                if (dist[li[j]] > limit)
                    fail_msg("extra %g query %lld: id %lld (D %u) is past the limit %u",
                             extras[e], (long long)i, (long long)li[j], dist[li[j]], limit);
            }
            const int64_t got = ncand < k ? ncand : k;
            for (int64_t r = 0; r < n; r++) {
                if (dist[r] > limit || got < k) continue;
                int in = 0;
                for (int64_t j = 0; j < k; j++) in |= li[j] == r;
                const double key = sml_test_distance(q + i * dim, x + r * dim, dim,
                                                     SIMIL_METRIC_IP);
                if (!in && key > di[k - 1] + 1e-5)
                    fail_msg("extra %g query %lld: candidate %lld (%.6f) beats rank %lld (%.6f)",
                             extras[e], (long long)i, (long long)r, key, (long long)k - 1,
                             di[k - 1]);
            }
        }
        check_true_keys("XFBQ extra_of=spread", x, q, nq, dim, k, SIMIL_METRIC_IP, d, l);
    }
    assert_true(widest > k); /* the windows did widen */
    /* IVF at nprobe = nlist scans every row: the same spread, the same results */
    simil_index *ivf;
    SML_ASSERT_OK(simil_index_create(&ivf, dim, "IVF8,XFBQ", SIMIL_METRIC_COSINE, "cpu"));
    SML_ASSERT_OK(simil_index_set_xfbq_alpha(ivf, c.alpha));
    SML_ASSERT_OK(simil_index_train(ivf, n, x));
    SML_ASSERT_OK(simil_index_add(ivf, n, x, NULL));
    float *d2 = sml_test_malloc(sizeof(float) * (size_t)(nq * k));
    int64_t *l2 = sml_test_malloc(sizeof(int64_t) * (size_t)(nq * k));
    simil_search_params *p = sml_test_params("extra_of=spread,extra_distance=0.1,nprobe=8");
    SML_ASSERT_OK(simil_index_search(index, nq, q, k, p, d, l));
    SML_ASSERT_OK(simil_index_search(ivf, nq, q, k, p, d2, l2));
    simil_search_params_destroy(p);
    assert_memory_equal(l, l2, sizeof(int64_t) * (size_t)(nq * k));
    assert_memory_equal(d, d2, sizeof(float) * (size_t)(nq * k));
    simil_index_destroy(ivf);
    simil_index_destroy(index);
    free(x);
    free(q);
    free(base);
    free(qc);
    free(dist);
    free(d);
    free(l);
    free(d2);
    free(l2);
}

static void test_zero_equal_and_small(void **state)
{
    (void)state;
    const int64_t dim = 20, n = 50;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 9, x));
    memset(x + 5 * dim, 0, sizeof(float) * dim); /* zero vectors stay zero */
    memset(x + 17 * dim, 0, sizeof(float) * dim);
    simil_index *index = flat_xfbq("XFBQ", dim, SIMIL_METRIC_COSINE, n, x);
    float zero[20] = {0}, d[60];
    int64_t l[60];
    /* a zero query: cosine 0 with everything */
    search_p(index, 1, zero, 10, 0, -1, d, l);
    for (int j = 0; j < 10; j++) {
        assert_true(l[j] >= 0);
        assert_float_equal(d[j], 0.0f, 0);
        if (j > 0) assert_true(l[j - 1] < l[j]); /* ties by id */
    }
    /* the zero rows come back with similarity 0 when k covers them */
    search_p(index, 1, x, n, 0, -1, d, l);
    for (int64_t j = 0; j < n; j++)
        if (l[j] == 5 || l[j] == 17) assert_float_equal(d[j], 0.0f, 0);
    /* k > n: padding */
    search_p(index, 1, x, 60, 0, -1, d, l);
    for (int64_t j = n; j < 60; j++) {
        assert_int_equal(l[j], -1);
        assert_true(isinf(d[j]) && d[j] < 0);
    }
    simil_index_destroy(index);
    /* all-equal vectors: one histogram bin; the first ids win the ties */
    for (int64_t i = 1; i < n; i++) memcpy(x + i * dim, x, sizeof(float) * dim);
    index = flat_xfbq("XFBQ", dim, SIMIL_METRIC_COSINE, n, x);
    search_p(index, 1, x, 10, 0, 0.0f, d, l);
    for (int j = 0; j < 10; j++) {
        assert_int_equal(l[j], j);
        assert_float_equal(d[j], d[0], 0);
    }
    assert_float_equal(d[0], 1.0f, 1e-5);
    simil_index_destroy(index);
    /* one vector, and an empty index */
    SML_ASSERT_OK(simil_index_create(&index, dim, "XFBQ", SIMIL_METRIC_COSINE, "cpu"));
    search_p(index, 1, x, 3, 0, -1, d, l);
    assert_int_equal(l[0], -1);
    SML_ASSERT_OK(simil_index_add(index, 1, x, NULL));
    search_p(index, 1, x, 3, 0, -1, d, l);
    assert_int_equal(l[0], 0);
    assert_int_equal(l[1], -1);
    simil_index_destroy(index);
    free(x);
}

static void test_ids_nan_remove(void **state)
{
    (void)state;
    const int64_t dim = 24, n = 400, nq = 30, k = 8;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 13, x));
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * n);
    for (int64_t i = 0; i < n; i++) ids[i] = 1000 + (i % (n / 2)); /* each id twice */
    memcpy(x + (n / 2) * dim, x, sizeof(float) * (size_t)(n / 2 * dim)); /* with its vector */
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, dim, "XFBQ", SIMIL_METRIC_COSINE, "cpu"));
    /* NaN is refused before anything is stored (not even alpha) */
    float *bad = sml_test_malloc(sizeof(float) * 4 * dim);
    memcpy(bad, x, sizeof(float) * 4 * dim);
    bad[2 * dim + 3] = NAN;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(index, 4, bad, NULL));
    assert_int_equal(simil_index_size(index), 0);
    assert_float_equal(sml_xfbq_index_alpha(index), 0.0f, 0);
    SML_ASSERT_OK(simil_index_add(index, n, x, ids));
    /* duplicate ids: both copies come back, remove drops both */
    float d[30 * 8];
    int64_t l[30 * 8];
    search_p(index, 1, x, 2, 0, -1, d, l);
    assert_int_equal(l[0], 1000);
    assert_int_equal(l[1], 1000); /* rows 0 and 200: the same id and vector */
    assert_float_equal(d[0], d[1], 0);
    float rec[24];
    SML_ASSERT_OK(simil_index_reconstruct(index, 1003, rec));
    float want[24];
    memcpy(want, x + 3 * dim, sizeof want);
    sml_test_normalize(want, 1, dim);
    for (int j = 0; j < 24; j++) assert_float_equal(rec[j], want[j], 1e-6); /* normalized */
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_reconstruct(index, 5, rec));
    int64_t gone[100];
    for (int64_t i = 0; i < 100; i++) gone[i] = 1000 + 2 * i;
    int64_t removed;
    SML_ASSERT_OK(simil_index_remove(index, 100, gone, &removed));
    assert_int_equal(removed, 200);
    assert_int_equal(simil_index_size(index), 200);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 14, q));
    search_p(index, nq, q, k, 0, -1, d, l);
    for (int64_t i = 0; i < nq * k; i++) assert_true(l[i] >= 1001 && l[i] % 2 == 1);
    /* the same as an index built from the remaining vectors, at the same alpha */
    simil_index *rest;
    SML_ASSERT_OK(simil_index_create(&rest, dim, "XFBQ", SIMIL_METRIC_COSINE, "cpu"));
    SML_ASSERT_OK(simil_index_set_xfbq_alpha(rest, sml_xfbq_index_alpha(index)));
    for (int64_t i = 0; i < n; i++)
        if (ids[i] % 2 == 1) SML_ASSERT_OK(simil_index_add(rest, 1, x + i * dim, ids + i));
    float d2[30 * 8];
    int64_t l2[30 * 8];
    search_p(rest, nq, q, k, 0, -1, d2, l2);
    assert_memory_equal(l, l2, sizeof l);
    assert_memory_equal(d, d2, sizeof d);
    /* reset keeps alpha; remove of absent ids is no error */
    SML_ASSERT_OK(simil_index_remove(index, 100, gone, &removed));
    assert_int_equal(removed, 0);
    const float alpha = sml_xfbq_index_alpha(index);
    SML_ASSERT_OK(simil_index_reset(index));
    assert_int_equal(simil_index_size(index), 0);
    assert_float_equal(sml_xfbq_index_alpha(index), alpha, 0);
    SML_ASSERT_OK(simil_index_add(index, 10, x, NULL));
    simil_index_destroy(index);
    simil_index_destroy(rest);
    free(x);
    free(q);
    free(ids);
    free(bad);
}

static void test_metrics(void **state)
{
    (void)state;
    const int64_t dim = 32, n = 3000, nq = 40, k = 10;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 21, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 22, q));
    float dc[400], di[400], dl[400];
    int64_t lc[400], li[400], ll[400];
    /* IP: candidates by direction, re-ranked by the raw inner product */
    simil_index *ip = flat_xfbq("XFBQ", dim, SIMIL_METRIC_IP, n, x);
    search_p(ip, nq, q, k, 0, -1, di, li);
    check_true_keys("XFBQ ip", x, q, nq, dim, k, SIMIL_METRIC_IP, di, li);
    float rec[32];
    SML_ASSERT_OK(simil_index_reconstruct(ip, 7, rec));
    assert_memory_equal(rec, x + 7 * dim, sizeof rec); /* raw floats */
    simil_index_destroy(ip);
    /* on unit vectors, cosine, IP and L2 give the same ids; L2 = 2 - 2 cos */
    sml_test_normalize(x, n, dim);
    sml_test_normalize(q, nq, dim);
    simil_index *cos = flat_xfbq("XFBQ", dim, SIMIL_METRIC_COSINE, n, x);
    ip = flat_xfbq("XFBQ", dim, SIMIL_METRIC_IP, n, x);
    simil_index *l2 = flat_xfbq("XFBQ", dim, SIMIL_METRIC_L2, n, x);
    search_p(cos, nq, q, k, 0, -1, dc, lc);
    search_p(ip, nq, q, k, 0, -1, di, li);
    search_p(l2, nq, q, k, 0, -1, dl, ll);
    check_true_keys("XFBQ l2", x, q, nq, dim, k, SIMIL_METRIC_L2, dl, ll);
    int64_t same_ip = 0, same_l2 = 0;
    for (int i = 0; i < nq * k; i++) {
        same_ip += lc[i] == li[i];
        same_l2 += lc[i] == ll[i];
        assert_float_equal(dl[i], 2.0f - 2.0f * dc[i], 1e-4);
    }
    /* only float rounding can separate them, at near ties */
    assert_true(same_ip >= nq * k - 4 && same_l2 >= nq * k - 4);
    simil_index_destroy(cos);
    simil_index_destroy(ip);
    simil_index_destroy(l2);
    free(x);
    free(q);
}

static void test_ivf_full_probe_equals_flat(void **state)
{
    (void)state;
    const int64_t dim = 40, n = 4000, nq = 50, k = 12, nlist = 16;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 31, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 32, q));
    const simil_metric metrics[] = {SIMIL_METRIC_COSINE, SIMIL_METRIC_IP};
    for (int m = 0; m < 2; m++) {
        simil_index *flat = flat_xfbq("XFBQ", dim, metrics[m], n, x), *ivf;
        SML_ASSERT_OK(simil_index_create(&ivf, dim, "IVF16,XFBQ", metrics[m], "cpu"));
        assert_false(simil_index_is_trained(ivf));
        SML_ASSERT_STATUS(SIMIL_ERR_NOT_TRAINED, simil_index_add(ivf, n, x, NULL));
        SML_ASSERT_OK(simil_index_train(ivf, n, x)); /* same vectors: same alpha */
        SML_ASSERT_OK(simil_index_add(ivf, n, x, NULL));
        assert_float_equal(sml_xfbq_index_alpha(ivf), sml_xfbq_index_alpha(flat), 0);
        assert_string_equal(simil_index_description(ivf), "IVF16,XFBQ4x3");
        float df[50 * 12], dv[50 * 12];
        int64_t lf[50 * 12], lv[50 * 12];
        const float extras[] = {0.0f, 0.01f, -1.0f};
        float *xn = sml_test_malloc(sizeof(float) * n * dim);
        float *qn = sml_test_malloc(sizeof(float) * nq * dim);
        memcpy(xn, x, sizeof(float) * n * dim);
        memcpy(qn, q, sizeof(float) * nq * dim);
        if (metrics[m] == SIMIL_METRIC_COSINE) {
            sml_test_normalize(xn, n, dim);
            sml_test_normalize(qn, nq, dim);
        }
        /* the same candidates (D is exact): the same results, up to the float
         * rounding of the re-ranking (SIMD sums start at other alignments) */
        for (int e = 0; e < 3; e++) {
            search_p(flat, nq, q, k, 0, extras[e], df, lf);
            search_p(ivf, nq, q, k, nlist, extras[e], dv, lv);
            sml_test_check_same("IVF16,XFBQ nprobe=nlist against XFBQ", xn, n, qn, nq, dim, k,
                                SIMIL_METRIC_IP, dv, lv, df, lf, rel_tol);
        }
        /* fewer probes: still true keys of the returned ids */
        search_p(ivf, nq, q, k, 4, -1, dv, lv);
        check_true_keys("IVF16,XFBQ nprobe=4", xn, qn, nq, dim, k, SIMIL_METRIC_IP, dv, lv);
        float rec[40];
        SML_ASSERT_OK(simil_index_reconstruct(ivf, 123, rec));
        for (int j = 0; j < 40; j++) assert_float_equal(rec[j], xn[123 * dim + j], 1e-6);
        /* remove, then search: the removed ids are gone */
        int64_t gone[2000];
        for (int64_t i = 0; i < 2000; i++) gone[i] = 2 * i;
        int64_t removed;
        SML_ASSERT_OK(simil_index_remove(ivf, 2000, gone, &removed));
        assert_int_equal(removed, 2000);
        search_p(ivf, nq, q, k, nlist, -1, dv, lv);
        for (int64_t i = 0; i < nq * k; i++) assert_true(lv[i] % 2 == 1);
        SML_ASSERT_OK(simil_index_remove(flat, 2000, gone, &removed));
        search_p(flat, nq, q, k, 0, -1, df, lf);
        sml_test_check_same("IVF16,XFBQ after remove", xn, n, qn, nq, dim, k, SIMIL_METRIC_IP, dv,
                            lv, df, lf, rel_tol);
        simil_index_destroy(flat);
        simil_index_destroy(ivf);
        free(xn);
        free(qn);
    }
    free(x);
    free(q);
}

static void test_save_load(void **state)
{
    (void)state;
    const int64_t dim = 65, n = 1500, nq = 20, k = 7;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 41, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 42, q));
    const char *descs[] = {"XFBQ", "IVF8,XFBQ3x2", "XFBQ8x8", "RR,XFBQ", "RR,IVF8,XFBQ3x2",
                           "RR,XFBQ2x2_host", "XFBQ_fp32"};
    for (int t = 0; t < 7; t++) {
        simil_index *a;
        SML_ASSERT_OK(simil_index_create(&a, dim, descs[t], SIMIL_METRIC_COSINE, "cpu"));
        if (t == 2) SML_ASSERT_OK(simil_index_set_xfbq_alpha(a, 3.0f));
        SML_ASSERT_OK(simil_index_train(a, n, x));
        SML_ASSERT_OK(simil_index_add(a, n, x, NULL));
        int64_t gone[3] = {4, 5, 900};
        SML_ASSERT_OK(simil_index_remove(a, 3, gone, NULL));
        const char *path = sml_test_path("xfbq.simil");
        SML_ASSERT_OK(simil_index_save(a, path));
        simil_index *b;
        SML_ASSERT_OK(simil_index_load(&b, path, "cpu"));
        assert_int_equal(simil_index_size(b), n - 3);
        assert_string_equal(simil_index_description(b), simil_index_description(a));
        assert_int_equal(b->spec.xfbq_floats, a->spec.xfbq_floats);
        assert_float_equal(sml_xfbq_index_alpha(b), sml_xfbq_index_alpha(a), 0);
        float da[20 * 7], db[20 * 7];
        int64_t la[20 * 7], lb[20 * 7];
        search_p(a, nq, q, k, 8, -1, da, la);
        search_p(b, nq, q, k, 8, -1, db, lb);
        assert_memory_equal(la, lb, sizeof la);
        assert_memory_equal(da, db, sizeof da);
        if (t == 2) {
            /* a hand-set alpha stays hand-set: train keeps it */
            SML_ASSERT_OK(simil_index_train(b, n, x));
            assert_float_equal(sml_xfbq_index_alpha(b), 3.0f, 0);
        }
        /* truncated: refused cleanly */
        FILE *f = fopen(path, "rb");
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *bytes = sml_test_malloc((size_t)size);
        assert_int_equal(fread(bytes, 1, (size_t)size, f), (size_t)size);
        fclose(f);
        const char *cut = sml_test_path("xfbq-cut.simil");
        f = fopen(cut, "wb");
        fwrite(bytes, 1, (size_t)size - 100, f);
        fclose(f);
        simil_index *c = NULL;
        SML_ASSERT_STATUS(SIMIL_ERR_CORRUPT, simil_index_load(&c, cut, "cpu"));
        assert_null(c);
        free(bytes);
        simil_index_destroy(a);
        simil_index_destroy(b);
    }
    /* an untrained IVF,XFBQ with a hand-set alpha, and an empty flat one */
    simil_index *u, *v;
    SML_ASSERT_OK(simil_index_create(&u, dim, "IVF4,XFBQ", SIMIL_METRIC_COSINE, "cpu"));
    SML_ASSERT_OK(simil_index_set_xfbq_alpha(u, 5.0f));
    SML_ASSERT_OK(simil_index_save(u, sml_test_path("u.simil")));
    SML_ASSERT_OK(simil_index_load(&v, sml_test_path("u.simil"), "cpu"));
    assert_false(simil_index_is_trained(v));
    assert_float_equal(sml_xfbq_index_alpha(v), 5.0f, 0);
    SML_ASSERT_OK(simil_index_train(v, n, x));
    assert_float_equal(sml_xfbq_index_alpha(v), 5.0f, 0);
    simil_index_destroy(u);
    simil_index_destroy(v);
    SML_ASSERT_OK(simil_index_create(&u, dim, "XFBQ", SIMIL_METRIC_IP, "cpu"));
    SML_ASSERT_OK(simil_index_save(u, sml_test_path("e.simil")));
    SML_ASSERT_OK(simil_index_load(&v, sml_test_path("e.simil"), "cpu"));
    assert_int_equal(simil_index_size(v), 0);
    assert_float_equal(sml_xfbq_index_alpha(v), 0.0f, 0);
    simil_index_destroy(u);
    simil_index_destroy(v);
    free(x);
    free(q);
}

/* ---- the random rotation (RR) ---- */

/* Each description is refused at dimension 65, with a message (printed). */
static void assert_refused(const char *const *bad, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        simil_index *index = NULL;
        SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                          simil_index_create(&index, 65, bad[i], SIMIL_METRIC_COSINE, "cpu"));
        assert_null(index);
        printf("%s: %s\n", bad[i], simil_last_error());
    }
}

/* desc makes a 65-d index that describes itself as want. */
static void assert_described(const char *desc, simil_metric metric, const char *want)
{
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, 65, desc, metric, "cpu"));
    assert_string_equal(simil_index_description(index), want);
    simil_index_destroy(index);
}

/* The file at path with its description `from` written as `to`, of the same
 * length, as an older simil may have written it. */
static void redescribe_file(const char *path, const char *from, const char *to)
{
    /* HEAD's payload follows the magic, the version and its section header;
     * its description follows two u32, three i64 and the u32 length
     * (index_file.c) */
    enum { HEAD_PAYLOAD = 16 + 24, DESC_AT = HEAD_PAYLOAD + 36 };
    const size_t len = strlen(from);
    assert_int_equal(strlen(to), len);
    long size;
    unsigned char *buf = sml_test_read_file(path, &size);
    uint64_t length;
    memcpy(&length, buf + 16 + 8, 8);
    assert_true(HEAD_PAYLOAD + (long)length + 4 <= size && DESC_AT + len <= length + HEAD_PAYLOAD);
    assert_memory_equal(buf + DESC_AT, from, len);
    memcpy(buf + DESC_AT, to, len);
    const uint32_t crc = sml_crc32(0, buf + HEAD_PAYLOAD, (size_t)length);
    memcpy(buf + HEAD_PAYLOAD + length, &crc, 4);
    sml_test_write_file(path, buf, size);
    free(buf);
}

/* XFBQ[QxB], _fp32, _host and _fp16: where the re-ranking floats live, which
 * on the CPU changes nothing: the same results in every place (the GPU side
 * is tests/cuda/test_cuda_xfbq.c).  Plain XFBQ is _fp16, which is not written
 * back, and a file whose description says _fp16 loads as plain XFBQ. */
static void test_host_floats(void **state)
{
    (void)state;
    assert_described("XFBQ", SIMIL_METRIC_COSINE, "XFBQ4x3");
    assert_described("XFBQ_fp16", SIMIL_METRIC_COSINE, "XFBQ4x3");
    assert_described("XFBQ_fp32", SIMIL_METRIC_COSINE, "XFBQ4x3_fp32");
    assert_described("XFBQ_host", SIMIL_METRIC_COSINE, "XFBQ4x3_host");
    assert_described("RR,XFBQ2x5_fp16", SIMIL_METRIC_L2, "RR,XFBQ2x5");
    assert_described("RR,XFBQ2x5_fp32", SIMIL_METRIC_L2, "RR,XFBQ2x5_fp32");
    const char *bad[] = {"IVF8,XFBQ_host", "XFBQ4x3_hos", "XFBQ_host_host", "Flat_host",
                         "XFBQ4_host", "XFBQhost", "SQ8_host", "IVF8,XFBQ_fp16",
                         "XFBQ_fp16_host", "XFBQ_host_fp16", "Flat_fp16", "IVF8,XFBQ_fp32",
                         "XFBQ_fp32_fp32", "XFBQ_fp16_fp32", "XFBQfp32", "SQ8_fp32"};
    assert_refused(bad, sizeof bad / sizeof bad[0]);
    const int64_t dim = 40, n = 2000, nq = 30, k = 10;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 43, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 44, q));
    /* each place against the first, fp32 floats in backend memory */
    const char *places[] = {"XFBQ_fp32", "XFBQ", "XFBQ_host", "XFBQ_fp16"};
    simil_index *index[4];
    for (int p = 0; p < 4; p++) {
        SML_ASSERT_OK(simil_index_create(&index[p], dim, places[p], SIMIL_METRIC_L2, "cpu"));
        for (int i = 0; i < 2; i++) /* two adds: the second grows the store */
            SML_ASSERT_OK(simil_index_add(index[p], n / 2, x + i * (n / 2) * dim, NULL));
        int64_t gone[2] = {7, 1500};
        SML_ASSERT_OK(simil_index_remove(index[p], 2, gone, NULL));
    }
    assert_int_equal(index[0]->spec.xfbq_floats, SML_XFBQ_FLOATS_BACKEND);
    assert_int_equal(index[1]->spec.xfbq_floats, SML_XFBQ_FLOATS_FP16);
    float da[30 * 10], db[30 * 10], v[40], w[40];
    int64_t la[30 * 10], lb[30 * 10];
    search_p(index[0], nq, q, k, 0, 0.01f, da, la);
    for (int p = 1; p < 4; p++) {
        search_p(index[p], nq, q, k, 0, 0.01f, db, lb);
        assert_memory_equal(la, lb, sizeof la);
        assert_memory_equal(da, db, sizeof da);
        SML_ASSERT_OK(simil_index_reconstruct(index[p], 1999, v));
        assert_memory_equal(v, x + 1999 * dim, sizeof v);
    }
    for (int p = 0; p < 4; p++) /* recodes from the floats */
        SML_ASSERT_OK(simil_index_set_xfbq_alpha(index[p], 2.0f));
    search_p(index[0], nq, q, k, 0, 0.01f, da, la);
    SML_ASSERT_OK(simil_index_reconstruct(index[0], 3, w));
    for (int p = 1; p < 4; p++) {
        search_p(index[p], nq, q, k, 0, 0.01f, db, lb);
        assert_memory_equal(la, lb, sizeof la);
        SML_ASSERT_OK(simil_index_reconstruct(index[p], 3, v));
        assert_memory_equal(v, w, sizeof v);
    }
    /* a file that names _fp16 (or nothing, from before fp16 was the default)
     * loads as plain XFBQ */
    const char *path = sml_test_path("xfbq-fp16.simil");
    SML_ASSERT_OK(simil_index_save(index[0], path));
    redescribe_file(path, "XFBQ4x3_fp32", "XFBQ4x3_fp16");
    simil_index *loaded;
    SML_ASSERT_OK(simil_index_load(&loaded, path, "cpu"));
    assert_string_equal(simil_index_description(loaded), "XFBQ4x3");
    assert_int_equal(loaded->spec.xfbq_floats, SML_XFBQ_FLOATS_FP16);
    search_p(loaded, nq, q, k, 0, 0.01f, db, lb);
    assert_memory_equal(la, lb, sizeof la);
    simil_index_destroy(loaded);
    for (int p = 0; p < 4; p++) simil_index_destroy(index[p]);
    free(x);
    free(q);
}

static void test_rotation_spec(void **state)
{
    (void)state;
    assert_described("RR65,XFBQ", SIMIL_METRIC_COSINE, "RR,XFBQ4x3");
    assert_described("RR,IVF8,XFBQ3x2", SIMIL_METRIC_L2, "RR,IVF8,XFBQ3x2");
    const char *bad[] = {"RR,Flat", "RR,IVF8,Flat", "RR,IVF8,PQ5", "RR,SQ8", "RR64,XFBQ",
                         "IVF8,RR,XFBQ", "RR,OPQ5,IVF8,PQ5", "RRx,XFBQ"};
    assert_refused(bad, sizeof bad / sizeof bad[0]);
    /* a file cut short of its rotation is refused before the rotation is made */
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, 65, "RR,XFBQ", SIMIL_METRIC_COSINE, "cpu"));
    const char *path = sml_test_path("rr.simil"), *cut = sml_test_path("rr-cut.simil");
    SML_ASSERT_OK(simil_index_save(index, path));
    simil_index_destroy(index);
    FILE *f = fopen(path, "rb");
    char head[2000];
    assert_int_equal(fread(head, 1, sizeof head, f), sizeof head);
    fclose(f);
    f = fopen(cut, "wb");
    fwrite(head, 1, sizeof head, f);
    fclose(f);
    index = NULL;
    SML_ASSERT_STATUS(SIMIL_ERR_CORRUPT, simil_index_load(&index, cut, "cpu"));
    assert_null(index);
    assert_non_null(strstr(simil_last_error(), "rotation"));
}

/* sml_xfbq_rotate (blocks of rows, the components side by side, vectorized
 * where the CPU has FMA) gives each component bit for bit as
 * sml_xfbq_rotated_component, the chain the GPU runs: a different order of
 * the sums (a GEMM's) would differ in the last bits, and the codes with them
 * wherever a component sits on a level's edge. */
static void test_rotation_order(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 7, 96, 131};
    const int64_t ns[] = {1, 9, 21};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
            const int64_t dim = dims[d], n = ns[t];
            float *r = sml_test_malloc(sizeof(float) * (size_t)(dim * dim));
            float *x = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
            float *y = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
            SML_ASSERT_OK(simil_generate("mix", 0, dim, dim, 31 + d, r));
            SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 41 + t, x));
            sml_xfbq_rotate(r, dim, n, x, y);
            for (int64_t q = 0; q < n; q++)
                for (int64_t j = 0; j < dim; j++) {
                    const float want = sml_xfbq_rotated_component(x + q * dim, r, dim, j);
                    if (memcmp(&want, &y[q * dim + j], sizeof want) != 0)
                        fail_msg("dim %lld, %lld rows: row %lld component %lld: %.9g, "
                                 "not %.9g",
                                 (long long)dim, (long long)n, (long long)q, (long long)j,
                                 (double)y[q * dim + j], (double)want);
                }
            free(r);
            free(x);
            free(y);
        }
}

/* Gaussian vectors whose first `strong` dimensions have 10x the scale of
 * the rest: one alpha cannot suit both, so without a rotation the codes of
 * the weak dimensions are mostly the smallest level. */
static void dominant_dims(float *x, int64_t n, int64_t dim, int64_t strong, uint64_t seed)
{
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, seed, x));
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < strong; j++) x[i * dim + j] = 10.0f * x[i * dim + j];
}

static void test_rotation_precision(void **state)
{
    (void)state;
    const int64_t dim = 64, n = 8000, nq = 100, k = 10, strong = 4;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    dominant_dims(x, n, dim, strong, 11);
    dominant_dims(q, nq, dim, strong, 12);
    float *d = sml_test_malloc(sizeof(float) * nq * k);
    int64_t *l = sml_test_malloc(sizeof(int64_t) * nq * k);
    const float extras[] = {0.0f, 0.002f};
    for (int e = 0; e < 2; e++) {
        double p[2];
        for (int r = 0; r < 2; r++) {
            simil_index *index = flat_xfbq(r ? "RR,XFBQ" : "XFBQ", dim, SIMIL_METRIC_COSINE, n, x);
            search_p(index, nq, q, k, 0, extras[e], d, l);
            p[r] = precision_vs_exact(x, n, q, nq, dim, k, l);
            simil_index_destroy(index);
        }
        printf("%lld x %lld, %lld dominant dimensions (seed 11), extra %.3f: precision@10 "
               "%.4f without RR, %.4f with\n",
               (long long)n, (long long)dim, (long long)strong, extras[e], p[0], p[1]);
        assert_true(p[1] >= p[0] + 0.1);
    }
    free(x);
    free(q);
    free(d);
    free(l);
}

/* reconstruct gives the vectors added (metric IP keeps them raw), and a
 * rotated index's rows are the same after save/load and a change of alpha. */
static void test_rotation_reconstruct(void **state)
{
    (void)state;
    const int64_t dim = 33, n = 600, nq = 10, k = 5;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 5, x));
    const char *descs[] = {"RR,XFBQ", "RR,IVF4,XFBQ"};
    for (int t = 0; t < 2; t++) {
        simil_index *index;
        SML_ASSERT_OK(simil_index_create(&index, dim, descs[t], SIMIL_METRIC_IP, "cpu"));
        SML_ASSERT_OK(simil_index_train(index, n, x));
        SML_ASSERT_OK(simil_index_add(index, n, x, NULL));
        float d0[10 * 5], d1[10 * 5], row[33];
        int64_t l0[10 * 5], l1[10 * 5];
        search_p(index, nq, x, k, 4, 0.01f, d0, l0);
        /* recoding for a new alpha and back gives the same codes */
        const float alpha = sml_xfbq_index_alpha(index);
        SML_ASSERT_OK(simil_index_set_xfbq_alpha(index, alpha * 2));
        SML_ASSERT_OK(simil_index_set_xfbq_alpha(index, alpha));
        search_p(index, nq, x, k, 4, 0.01f, d1, l1);
        assert_memory_equal(l0, l1, sizeof l0);
        assert_memory_equal(d0, d1, sizeof d0);
        for (int64_t id = 0; id < n; id += 37) {
            SML_ASSERT_OK(simil_index_reconstruct(index, id, row));
            assert_memory_equal(row, x + id * dim, sizeof row);
        }
        simil_index_destroy(index);
    }
    free(x);
}

/* Every RR index of one dimension has the same rotation: made once while
 * another lives (the memo), again after the last is gone, and loaded. */
static void test_rotation_shared(void **state)
{
    (void)state;
    const int64_t dim = 40, n = 500;
    const size_t bytes = sizeof(float) * dim * dim;
    float *x = sml_test_malloc(sizeof(float) * n * dim), *first = sml_test_malloc(bytes);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 8, x));
    simil_index *a, *b, *c, *sharded, *other;
    SML_ASSERT_OK(simil_index_create(&a, dim, "RR,XFBQ", SIMIL_METRIC_COSINE, "cpu"));
    const float *ra = sml_xfbq_index_rotation(a);
    assert_non_null(ra);
    memcpy(first, ra, bytes);
    /* while a lives: another type, another dimension, then a's again */
    SML_ASSERT_OK(simil_index_create(&b, dim, "RR,IVF4,XFBQ3x2", SIMIL_METRIC_L2, "cpu"));
    assert_memory_equal(sml_xfbq_index_rotation(b), first, bytes);
    SML_ASSERT_OK(simil_index_create(&other, dim + 1, "RR,XFBQ", SIMIL_METRIC_L2, "cpu"));
    assert_non_null(sml_xfbq_index_rotation(other));
    /* the memo now holds dim + 1: made again, the same up to the SVD's rounding */
    SML_ASSERT_OK(simil_index_create(&c, dim, "RR,XFBQ", SIMIL_METRIC_IP, "cpu"));
    const float *rc = sml_xfbq_index_rotation(c);
    for (int64_t i = 0; i < dim * dim; i++) assert_float_equal(rc[i], first[i], 1e-6);
    /* a sharded RR index searches as the plain one, shard by shard */
    SML_ASSERT_OK(simil_index_create(&sharded, dim, "Shards3,RR,XFBQ", SIMIL_METRIC_COSINE,
                                     "cpu"));
    SML_ASSERT_OK(simil_index_add(a, n, x, NULL));
    SML_ASSERT_OK(simil_index_add(sharded, n, x, NULL));
    float d0[5 * 4], d1[5 * 4];
    int64_t l0[5 * 4], l1[5 * 4];
    search_p(a, 5, x, 4, 0, 1.0f, d0, l0);
    search_p(sharded, 5, x, 4, 0, 1.0f, d1, l1);
    assert_memory_equal(l0, l1, sizeof l0);
    const char *path = sml_test_path("rr-shared.simil");
    SML_ASSERT_OK(simil_index_save(a, path));
    simil_index_destroy(a);
    simil_index_destroy(b);
    simil_index_destroy(c);
    simil_index_destroy(sharded);
    simil_index_destroy(other);
    /* none lives (the memo went with the last): made again */
    SML_ASSERT_OK(simil_index_create(&a, dim, "RR,XFBQ", SIMIL_METRIC_COSINE, "cpu"));
    const float *again = sml_xfbq_index_rotation(a);
    for (int64_t i = 0; i < dim * dim; i++) assert_float_equal(again[i], first[i], 1e-6);
    simil_index_destroy(a);
    /* none lives again: loading takes the file's rotation without an SVD */
    const int64_t made = sml_xfbq_rotations_made();
    SML_ASSERT_OK(simil_index_load(&a, path, "cpu"));
    assert_int_equal(sml_xfbq_rotations_made(), made);
    assert_memory_equal(sml_xfbq_index_rotation(a), first, bytes);
    simil_index_destroy(a);
    free(first);
    free(x);
}

/* ---- out of memory ---- */

enum { OOM_N = 300, OOM_DIM = 20, OOM_Q = 7, OOM_K = 5 };

typedef struct oom_case {
    const char *desc;
    float *x;
    simil_index *index;      /* filled with the first half of x */
    float d[OOM_Q * OOM_K];  /* its results before the operation */
    int64_t l[OOM_Q * OOM_K];
    simil_search_params *nprobe4;  /* made before injection starts */
} oom_case;

static void oom_search(const simil_index *index, const float *x, float *d, int64_t *l)
{
    simil_search_params *p = sml_test_params("nprobe=4");
    SML_ASSERT_OK(simil_index_search(index, OOM_Q, x, OOM_K, p, d, l));
    simil_search_params_destroy(p);
}

/* The vectors an index holds before op: none before an IVF's train, which
 * is refused while it holds vectors (test_api's test_retrain_with_vectors). */
static int64_t oom_held(const oom_case *c, int op)
{
    return op == 4 && strstr(c->desc, "IVF") != NULL ? 0 : OOM_N / 2;
}

static void oom_prepare(oom_case *c, int op)
{
    SML_ASSERT_OK(simil_index_create(&c->index, OOM_DIM, c->desc, SIMIL_METRIC_COSINE, "cpu"));
    SML_ASSERT_OK(simil_index_train(c->index, OOM_N, c->x));
    SML_ASSERT_OK(simil_index_add(c->index, oom_held(c, op), c->x, NULL));
    oom_search(c->index, c->x, c->d, c->l);
}

static simil_status oom_op(oom_case *c, int op)
{
    float d[OOM_Q * OOM_K];
    int64_t l[OOM_Q * OOM_K], gone[40];
    for (int i = 0; i < 40; i++) gone[i] = 3 * i;
    switch (op) {
    case 0: return simil_index_add(c->index, OOM_N / 2, c->x + (OOM_N / 2) * OOM_DIM, NULL);
    case 1: return simil_index_search(c->index, OOM_Q, c->x, OOM_K, c->nprobe4, d, l);
    case 2: return simil_index_remove(c->index, 40, gone, NULL);
    case 3: return simil_index_set_xfbq_alpha(c->index, 1.5f);
    case 4: return simil_index_train(c->index, OOM_N - 1, c->x + OOM_DIM);
    default: {
        simil_index *loaded = NULL;
        simil_status s = simil_index_save(c->index, sml_test_path("oom.simil"));
        if (s == SIMIL_OK) s = simil_index_load(&loaded, sml_test_path("oom.simil"), "cpu");
        simil_index_destroy(loaded);
        return s;
    }
    }
}

static void test_out_of_memory(void **state)
{
    (void)state;
    static const char *ops[] = {"add", "search", "remove", "set_xfbq_alpha", "train", "save+load"};
    oom_case c = {.x = sml_test_malloc(sizeof(float) * OOM_N * OOM_DIM),
                  .nprobe4 = sml_test_params("nprobe=4")};
    SML_ASSERT_OK(simil_generate("mix", 0, OOM_N, OOM_DIM, 77, c.x));
    const char *descs[] = {"XFBQ", "IVF4,XFBQ", "RR,XFBQ", "RR,IVF4,XFBQ"};
    for (int t = 0; t < 4; t++)
        for (int op = 0; op < 6; op++) {
            c.desc = descs[t];
            int64_t points = 0;
            for (int64_t n = 1;; n++) {
                oom_prepare(&c, op);
                const float alpha = sml_xfbq_index_alpha(c.index);
                sml_alloc_fail_at(n, 1);
                const simil_status s = oom_op(&c, op);
                const int64_t made = sml_alloc_fail_at(0, 0);
                if (s == SIMIL_OK) {
                    if (made >= n) fail_msg("%s %s: allocation %lld failed, yet OK", descs[t], ops[op], (long long)n);
                    simil_index_destroy(c.index);
                    break;
                }
                if (s != SIMIL_ERR_OUT_OF_MEMORY)
                    fail_msg("%s %s: allocation %lld failed: %s (%s)", descs[t], ops[op],
                             (long long)n, simil_status_name(s), simil_last_error());
                /* the index as it was */
                float d[OOM_Q * OOM_K];
                int64_t l[OOM_Q * OOM_K];
                assert_int_equal(simil_index_size(c.index), oom_held(&c, op));
                if (op != 4) assert_float_equal(sml_xfbq_index_alpha(c.index), alpha, 0);
                if (op != 4) {
                    oom_search(c.index, c.x, d, l);
                    assert_memory_equal(l, c.l, sizeof l);
                    assert_memory_equal(d, c.d, sizeof d);
                }
                simil_index_destroy(c.index);
                points++;
            }
            printf("%s %s: %lld allocation points\n", descs[t], ops[op], (long long)points);
        }
    simil_search_params_destroy(c.nprobe4);
    free(c.x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_code_identity),
        cmocka_unit_test(test_selection_parameters),
        cmocka_unit_test(test_alpha),
        cmocka_unit_test(test_fashion_mnist_precision),
        cmocka_unit_test(test_dims_and_exactness),
        cmocka_unit_test(test_extra_of_spread),
        cmocka_unit_test(test_zero_equal_and_small),
        cmocka_unit_test(test_ids_nan_remove),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_ivf_full_probe_equals_flat),
        cmocka_unit_test(test_save_load),
        cmocka_unit_test(test_host_floats),
        cmocka_unit_test(test_rotation_spec),
        cmocka_unit_test(test_rotation_order),
        cmocka_unit_test(test_rotation_precision),
        cmocka_unit_test(test_rotation_reconstruct),
        cmocka_unit_test(test_rotation_shared),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
