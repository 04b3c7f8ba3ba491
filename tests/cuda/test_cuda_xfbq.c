/* test_cuda_xfbq.c: XFBQ and IVFn,XFBQ on the GPU against the CPU.  The
 * index is built on one backend, saved, and loaded on the other, so both hold
 * the same alpha and codes: they take the same candidates (D is exact) and
 * their results differ only by the float rounding of the re-ranking keys
 * (checked with sml_test_check_same, relative tolerance 1e-4).  Covers dims
 * 1, 65, 96 and 785 (16- and 32-bit distances), k from 1 past 2048 (radix
 * selection) and past n, every metric, extra distances (of the range and of
 * each query's spread), grouped queries of flat XFBQ (batches not a multiple
 * of 4), several blocks per query, probes of empty lists, remove, reconstruct, alpha set on the GPU, and precision on
 * Fashion-MNIST; with RR (the random rotation, which the GPU applies to its
 * queries itself, in the host's order) the same results too, and reconstruct
 * the vectors added, and the rotation kernel gives sml_xfbq_rotate's bits
 * (test_rotation_bits); more queries than a batch, sent a batch at a time
 * (test_streamed_batches).  The GPU codes the queries itself: its codes must be the
 * host encoder's, bit for bit (test_query_codes_match_host).  Each place of
 * flat XFBQ's re-ranking floats gives the same results: XFBQ (the default,
 * _fp16: pinned host memory and an fp16 copy on the GPU), XFBQ_fp32 (on the
 * GPU) and XFBQ_host (pinned host memory alone, no floats on the GPU)
 * (test_flat_same_as_cpu, test_host_floats).  Flat XFBQ's distances on
 * integer tensor cores give the XOR/popcount path's candidates, so its keys
 * bit for bit, over dims 1 to 128, bits 1x1 to 7x7, every metric and place
 * of the floats, k past radix selection and past n, a few queries (whose
 * steps use XOR/popcount), a first pass that reads every fourth chunk, a
 * buffer that holds every row and one that would pass its budget
 * (test_tensor_same_as_popcount). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cuda_runtime.h>

#include "algo/xfbq.h"
#include "cuda/cuda_backend.h"
#include "util/test_util.h"

static const double rel_tol = 1e-4;

/* An index trained and filled on build_on, and its copy loaded on the other. */
static void twin(const char *desc, int64_t dim, simil_metric metric, int64_t n, const float *x,
                 const char *build_on, simil_index **cpu, simil_index **gpu)
{
    const int on_gpu = strcmp(build_on, "gpu") == 0;
    simil_index *built;
    SML_ASSERT_OK(simil_index_create(&built, dim, desc, metric, build_on));
    SML_ASSERT_OK(simil_index_train(built, n, x));
    SML_ASSERT_OK(simil_index_add(built, n, x, NULL));
    const char *path = sml_test_path("xfbq-twin.simil");
    SML_ASSERT_OK(simil_index_save(built, path));
    simil_index *loaded;
    SML_ASSERT_OK(simil_index_load(&loaded, path, on_gpu ? "cpu" : "gpu"));
    *cpu = on_gpu ? loaded : built;
    *gpu = on_gpu ? built : loaded;
}

/* x, q as the index sees them (normalized for cosine), for the oracle. */
static float *prepared(const float *v, int64_t n, int64_t dim, simil_metric metric)
{
    float *p = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    memcpy(p, v, sizeof(float) * (size_t)(n * dim));
    if (metric == SIMIL_METRIC_COSINE) sml_test_normalize(p, n, dim);
    return p;
}

/* extra_of: "range" or "spread" (search_params.h). */
static void compare_of(const char *what, const simil_index *cpu, const simil_index *gpu,
                       const float *x, int64_t n, const float *q, int64_t nq, int64_t dim,
                       int64_t k, int64_t nprobe, float extra, const char *extra_of,
                       simil_metric metric)
{
    char context[200], settings[32];
    snprintf(context, sizeof context, "%s %s k=%lld nprobe=%lld extra=%g of %s", what,
             simil_metric_name(metric), (long long)k, (long long)nprobe, (double)extra,
             extra_of);
    snprintf(settings, sizeof settings, "extra_of=%s", extra_of);
    /* nprobe 0 and extra < 0: the defaults */
    simil_search_params *p = sml_test_params(settings);
    if (nprobe > 0) SML_ASSERT_OK(simil_search_params_set_int(p, "nprobe", nprobe));
    if (extra >= 0) SML_ASSERT_OK(simil_search_params_set_float(p, "extra_distance", extra));
    const size_t out = (size_t)(nq * k);
    float *dc = sml_test_malloc(4 * out), *dg = sml_test_malloc(4 * out);
    int64_t *lc = sml_test_malloc(8 * out), *lg = sml_test_malloc(8 * out);
    SML_ASSERT_OK(simil_index_search(cpu, nq, q, k, p, dc, lc));
    SML_ASSERT_OK(simil_index_search(gpu, nq, q, k, p, dg, lg));
    simil_search_params_destroy(p);
    float *xp = prepared(x, n, dim, metric), *qp = prepared(q, nq, dim, metric);
    sml_test_check_same(context, xp, n, qp, nq, dim, k,
                        metric == SIMIL_METRIC_L2 ? SIMIL_METRIC_L2 : SIMIL_METRIC_IP, dg, lg, dc,
                        lc, rel_tol);
    free(xp);
    free(qp);
    free(dc);
    free(dg);
    free(lc);
    free(lg);
}

static void compare(const char *what, const simil_index *cpu, const simil_index *gpu,
                    const float *x, int64_t n, const float *q, int64_t nq, int64_t dim, int64_t k,
                    int64_t nprobe, float extra, simil_metric metric)
{
    compare_of(what, cpu, gpu, x, n, q, nq, dim, k, nprobe, extra, "range", metric);
}

static void test_flat_same_as_cpu(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 65, 96, 785};
    const int64_t n = 6000, nq = 203; /* 203 queries: groups of 4 and a partial one */
    for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
        const int64_t dim = dims[t];
        float *x = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
        float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
        SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 60 + t, x));
        SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 70 + t, q));
        /* the default (floats on the host, an fp16 copy on the GPU) and the
         * floats on the GPU */
        const char *places[] = {"XFBQ", "XFBQ_fp32"};
        for (int p = 0; p < 2; p++) {
            simil_index *cpu, *gpu;
            twin(places[p], dim, SIMIL_METRIC_COSINE, n, x, t % 2 ? "gpu" : "cpu", &cpu, &gpu);
            char what[64];
            snprintf(what, sizeof what, "%s dim %lld", places[p], (long long)dim);
            const int64_t ks[] = {1, 10, 100};
            const float extras[] = {0.0f, 0.005f, -1.0f};
            for (int i = 0; i < 3; i++)
                for (int e = 0; e < 3; e++)
                    compare(what, cpu, gpu, x, n, q, nq, dim, ks[i], 0, extras[e],
                            SIMIL_METRIC_COSINE);
            /* the window as a fraction of each query's spread (the median bin) */
            compare_of(what, cpu, gpu, x, n, q, nq, dim, 10, 0, 0.05f, "spread",
                       SIMIL_METRIC_COSINE);
            compare_of(what, cpu, gpu, x, n, q, nq, dim, 100, 0, 0.2f, "spread",
                       SIMIL_METRIC_COSINE);
            if (dim == 96) {
                compare(what, cpu, gpu, x, n, q, 17, dim, 3000, 0, 0.01f, SIMIL_METRIC_COSINE);
                compare(what, cpu, gpu, x, n, q, 9, dim, n + 10, 0, 0.0f, SIMIL_METRIC_COSINE);
            }
            simil_index_destroy(cpu);
            simil_index_destroy(gpu);
        }
        free(x);
        free(q);
    }
}

static void test_metrics_and_bits(void **state)
{
    (void)state;
    const int64_t dim = 48, n = 5000, nq = 64;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 81, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 82, q));
    const simil_metric metrics[] = {SIMIL_METRIC_IP, SIMIL_METRIC_L2};
    for (int m = 0; m < 2; m++) {
        simil_index *cpu, *gpu;
        twin("XFBQ", dim, metrics[m], n, x, "gpu", &cpu, &gpu);
        compare("XFBQ", cpu, gpu, x, n, q, nq, dim, 20, 0, -1.0f, metrics[m]);
        simil_index_destroy(cpu);
        simil_index_destroy(gpu);
    }
    const char *descs[] = {"XFBQ8x8", "XFBQ1x1", "XFBQ2x5"};
    for (int d = 0; d < 3; d++) {
        simil_index *cpu, *gpu;
        twin(descs[d], dim, SIMIL_METRIC_COSINE, n, x, "cpu", &cpu, &gpu);
        compare(descs[d], cpu, gpu, x, n, q, nq, dim, 10, 0, 0.01f, SIMIL_METRIC_COSINE);
        simil_index_destroy(cpu);
        simil_index_destroy(gpu);
    }
    free(x);
    free(q);
}

static void test_many_blocks_per_query(void **state)
{
    (void)state;
    /* 70,000 rows: five blocks of 16,384 positions per query */
    const int64_t dim = 32, n = 70000, nq = 30;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 91, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 92, q));
    simil_index *cpu, *gpu;
    twin("XFBQ", dim, SIMIL_METRIC_COSINE, n, x, "cpu", &cpu, &gpu);
    compare("XFBQ 70000 rows", cpu, gpu, x, n, q, nq, dim, 10, 0, 0.002f, SIMIL_METRIC_COSINE);
    compare("XFBQ 70000 rows", cpu, gpu, x, n, q, nq, dim, 50, 0, -1.0f, SIMIL_METRIC_COSINE);
    simil_index_destroy(cpu);
    simil_index_destroy(gpu);
    free(x);
    free(q);
}

/* One search of gpu with flat XFBQ's distances on tensor cores (tensor 1) or
 * with XOR and popcount (0) (sml_cuda_xfbq_tensor). */
static void search_with(int tensor, const simil_index *gpu, int64_t nq, const float *q, int64_t k,
                        float extra, float *d, int64_t *l)
{
    simil_search_params *p = sml_test_params("");
    if (extra >= 0) SML_ASSERT_OK(simil_search_params_set_float(p, "extra_distance", extra));
    sml_cuda_xfbq_tensor(tensor);
    simil_status s = simil_index_search(gpu, nq, q, k, p, d, l);
    sml_cuda_xfbq_tensor(-1);
    SML_ASSERT_OK(s);
    simil_search_params_destroy(p);
}

/* Tensor cores and XOR/popcount take the same candidates, so the same keys,
 * bit for bit; ids may differ only between equal keys. */
static void same_candidates(const char *what, const simil_index *gpu, int64_t nq, const float *q,
                            int64_t k, float extra)
{
    const size_t out = (size_t)(nq * k);
    float *dt = sml_test_malloc(4 * out), *dp = sml_test_malloc(4 * out);
    int64_t *lt = sml_test_malloc(8 * out), *lp = sml_test_malloc(8 * out);
    search_with(1, gpu, nq, q, k, extra, dt, lt);
    search_with(0, gpu, nq, q, k, extra, dp, lp);
    for (size_t i = 0; i < out; i++) {
        if (memcmp(&dt[i], &dp[i], 4) != 0 ||
            (lt[i] != lp[i] && !((i % k > 0 && dt[i] == dt[i - 1]) ||
                                 (i % k + 1 < (size_t)k && dt[i] == dt[i + 1]))))
            fail_msg("%s k=%lld extra=%g: query %lld rank %lld: tensor cores %lld %.9g, "
                     "popcount %lld %.9g",
                     what, (long long)k, (double)extra, (long long)(i / k), (long long)(i % k),
                     (long long)lt[i], (double)dt[i], (long long)lp[i], (double)dp[i]);
    }
    free(dt);
    free(dp);
    free(lt);
    free(lp);
}

static void test_tensor_same_as_popcount(void **state)
{
    (void)state;
    const int quick = sml_test_quick();
    const int64_t n = quick ? 9000 : 70000, nq = 203;
    const struct {
        const char *desc;
        int64_t dim;
        simil_metric metric;
    } cases[] = {
        {"XFBQ", 96, SIMIL_METRIC_COSINE},     {"XFBQ", 1, SIMIL_METRIC_COSINE},
        {"XFBQ", 33, SIMIL_METRIC_IP},         {"XFBQ_fp32", 65, SIMIL_METRIC_L2},
        {"XFBQ", 128, SIMIL_METRIC_COSINE},    {"XFBQ1x1", 64, SIMIL_METRIC_COSINE},
        {"XFBQ2x5", 40, SIMIL_METRIC_COSINE},  {"XFBQ7x7", 96, SIMIL_METRIC_COSINE},
        {"XFBQ_host", 96, SIMIL_METRIC_COSINE},
        /* past 128 dimensions: 64-row tiles (xfbq_mma_wide_kernel) */
        {"XFBQ", 129, SIMIL_METRIC_IP},        {"XFBQ", 200, SIMIL_METRIC_COSINE},
        {"XFBQ7x7", 784, SIMIL_METRIC_COSINE}, {"XFBQ2x5", 1024, SIMIL_METRIC_L2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t dim = cases[c].dim;
        float *x = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
        float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
        SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 300 + c, x));
        SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 400 + c, q));
        simil_index *cpu, *gpu;
        twin(cases[c].desc, dim, cases[c].metric, n, x, "cpu", &cpu, &gpu);
        char what[64];
        snprintf(what, sizeof what, "%s dim %lld", cases[c].desc, (long long)dim);
        const int64_t ks[] = {1, 10, 100};
        const float extras[] = {0.0f, 0.005f, -1.0f};
        for (int i = 0; i < 3; i++)
            for (int e = 0; e < 3; e++) {
                same_candidates(what, gpu, nq, q, ks[i], extras[e]);
                /* the default: tensor cores where the bound is tight enough */
                compare(what, cpu, gpu, x, n, q, nq, dim, ks[i], 0, extras[e], cases[c].metric);
            }
        /* a few queries: 2, XOR/popcount inside the tensor-core path's
         * steps; 3, 8 and 30, tiles of one and two slabs of 16 queries */
        same_candidates(what, gpu, 2, q, 1, 0.0f);
        same_candidates(what, gpu, 3, q, 10, 0.005f);
        same_candidates(what, gpu, 8, q, 1, 0.0f);
        same_candidates(what, gpu, 30, q, 10, 0.005f);
        if (c == 0) {
            /* past radix selection's k; past n; one query */
            same_candidates(what, gpu, 17, q, 3000, 0.01f);
            same_candidates(what, gpu, 5, q, n + 10, 0.0f);
            same_candidates(what, gpu, 1, q, 10, 0.01f);
        }
        simil_index_destroy(cpu);
        simil_index_destroy(gpu);
        free(x);
        free(q);
    }
    /* enough chunks that the first pass reads only every fourth (k 1 and 4:
     * 300,000 rows are 1,172 chunks of 256, of which 293 bound each query) */
    {
        const int64_t dim = 32, rows = quick ? 140000 : 300000, nqs = 100;
        float *x = sml_test_malloc(sizeof(float) * (size_t)(rows * dim));
        float *q = sml_test_malloc(sizeof(float) * (size_t)(nqs * dim));
        SML_ASSERT_OK(simil_generate("mix", 0, rows, dim, 503, x));
        SML_ASSERT_OK(simil_generate("mix", 0, nqs, dim, 504, q));
        simil_index *cpu, *gpu;
        twin("XFBQ", dim, SIMIL_METRIC_COSINE, rows, x, "gpu", &cpu, &gpu);
        const int64_t ks[] = {1, 4};
        for (int i = 0; i < 2; i++) {
            same_candidates("XFBQ sampled chunks", gpu, nqs, q, ks[i], 0.0f);
            same_candidates("XFBQ sampled chunks", gpu, nqs, q, ks[i], 0.005f);
            same_candidates("XFBQ sampled chunks, 3 queries", gpu, 3, q, ks[i], 0.005f);
            compare("XFBQ sampled chunks", cpu, gpu, x, rows, q, nqs, dim, ks[i], 0, 0.005f,
                    SIMIL_METRIC_COSINE);
        }
        simil_index_destroy(cpu);
        simil_index_destroy(gpu);
        free(x);
        free(q);
    }
    /* past 128 dimensions, many query tiles on few chunks: the chunks'
     * tiles are split over the grid's rows (79 chunks of 256 rows, 10 tiles;
     * at k = 1 step 1 reads every fourth chunk) */
    {
        const int64_t dim = 200, rows = 20000, nqs = 600;
        float *x = sml_test_malloc(sizeof(float) * (size_t)(rows * dim));
        float *q = sml_test_malloc(sizeof(float) * (size_t)(nqs * dim));
        SML_ASSERT_OK(simil_generate("mix", 0, rows, dim, 505, x));
        SML_ASSERT_OK(simil_generate("mix", 0, nqs, dim, 506, q));
        simil_index *cpu, *gpu;
        twin("XFBQ", dim, SIMIL_METRIC_IP, rows, x, "gpu", &cpu, &gpu);
        same_candidates("XFBQ wide, 600 queries", gpu, nqs, q, 10, 0.0f);
        same_candidates("XFBQ wide, 600 queries", gpu, nqs, q, 10, 0.005f);
        same_candidates("XFBQ wide, 300 queries", gpu, 300, q, 1, 0.005f);
        compare("XFBQ wide, 600 queries", cpu, gpu, x, rows, q, nqs, dim, 10, 0, 0.005f,
                SIMIL_METRIC_IP);
        simil_index_destroy(cpu);
        simil_index_destroy(gpu);
        free(x);
        free(q);
    }
    /* more queries than one tensor-core batch (2,048), and every row a
     * candidate: its buffer would pass 1 GiB, so the batch goes back to
     * XOR/popcount */
    const int64_t dim = 32, many = 2100;
    float *x = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    float *q = sml_test_malloc(sizeof(float) * (size_t)(many * dim));
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 501, x));
    SML_ASSERT_OK(simil_generate("mix", 0, many, dim, 502, q));
    simil_index *cpu, *gpu;
    twin("XFBQ", dim, SIMIL_METRIC_COSINE, n, x, "gpu", &cpu, &gpu);
    same_candidates("XFBQ 2100 queries", gpu, many, q, 10, 0.01f);
    same_candidates("XFBQ 2100 queries, every row", gpu, many, q, 10, 1.0f);
    simil_index_destroy(cpu);
    simil_index_destroy(gpu);
    free(x);
    free(q);
}

static void test_ivf_same_as_cpu(void **state)
{
    (void)state;
    const int64_t dim = 40, n = 20000, nq = 150;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 11, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 12, q));
    simil_index *cpu, *gpu;
    twin("IVF64,XFBQ", dim, SIMIL_METRIC_COSINE, n, x, "cpu", &cpu, &gpu);
    const int64_t probes[] = {1, 4, 64};
    for (int i = 0; i < 3; i++) {
        compare("IVF64,XFBQ", cpu, gpu, x, n, q, nq, dim, 10, probes[i], -1.0f,
                SIMIL_METRIC_COSINE);
        compare("IVF64,XFBQ", cpu, gpu, x, n, q, nq, dim, 10, probes[i], 0.002f,
                SIMIL_METRIC_COSINE);
        compare_of("IVF64,XFBQ", cpu, gpu, x, n, q, nq, dim, 10, probes[i], 0.05f, "spread",
                   SIMIL_METRIC_COSINE);
    }
    compare("IVF64,XFBQ k>2048", cpu, gpu, x, n, q, 20, dim, 2500, 8, 0.01f, SIMIL_METRIC_COSINE);
    /* remove every even id on both, then a list-emptying remove, then again */
    int64_t *even = sml_test_malloc(sizeof(int64_t) * n / 2);
    for (int64_t i = 0; i < n / 2; i++) even[i] = 2 * i;
    int64_t rc, rg;
    SML_ASSERT_OK(simil_index_remove(cpu, n / 2, even, &rc));
    SML_ASSERT_OK(simil_index_remove(gpu, n / 2, even, &rg));
    assert_int_equal(rc, n / 2);
    assert_int_equal(rg, n / 2);
    compare("IVF64,XFBQ after remove", cpu, gpu, x, n, q, nq, dim, 10, 8, -1.0f,
            SIMIL_METRIC_COSINE);
    float v[40], w[40];
    SML_ASSERT_OK(simil_index_reconstruct(gpu, 7, v));
    SML_ASSERT_OK(simil_index_reconstruct(cpu, 7, w));
    assert_memory_equal(v, w, sizeof v);
    /* alpha set by hand on both: the GPU recodes its arena */
    SML_ASSERT_OK(simil_index_set_xfbq_alpha(cpu, 3.0f));
    SML_ASSERT_OK(simil_index_set_xfbq_alpha(gpu, 3.0f));
    compare("IVF64,XFBQ alpha 3", cpu, gpu, x, n, q, nq, dim, 10, 8, 0.01f, SIMIL_METRIC_COSINE);
    simil_index_destroy(cpu);
    simil_index_destroy(gpu);
    /* built on the GPU (k-means there), moved to the CPU */
    twin("IVF32,XFBQ", dim, SIMIL_METRIC_IP, n, x, "gpu", &cpu, &gpu);
    compare("IVF32,XFBQ built on the GPU", cpu, gpu, x, n, q, nq, dim, 15, 6, -1.0f,
            SIMIL_METRIC_IP);
    simil_index_destroy(cpu);
    simil_index_destroy(gpu);
    free(even);
    free(x);
    free(q);
}

static void test_flat_edits_on_gpu(void **state)
{
    (void)state;
    const int64_t dim = 24, n = 3000, nq = 40;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 5, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 6, q));
    simil_index *gpu, *cpu;
    SML_ASSERT_OK(simil_index_create(&gpu, dim, "XFBQ", SIMIL_METRIC_COSINE, "gpu"));
    SML_ASSERT_OK(simil_index_add(gpu, n / 2, x, NULL)); /* alpha from this batch */
    SML_ASSERT_OK(simil_index_add(gpu, n - n / 2, x + (n / 2) * dim, NULL));
    int64_t gone[500];
    for (int i = 0; i < 500; i++) gone[i] = 3 * i;
    SML_ASSERT_OK(simil_index_remove(gpu, 500, gone, NULL));
    SML_ASSERT_OK(simil_index_set_xfbq_alpha(gpu, 2.0f));
    const char *path = sml_test_path("xfbq-gpu.simil");
    SML_ASSERT_OK(simil_index_save(gpu, path));
    SML_ASSERT_OK(simil_index_load(&cpu, path, "cpu"));
    assert_int_equal(simil_index_size(cpu), n - 500);
    compare("XFBQ edited on the GPU", cpu, gpu, x, n, q, nq, dim, 10, 0, -1.0f,
            SIMIL_METRIC_COSINE);
    float v[24], w[24];
    SML_ASSERT_OK(simil_index_reconstruct(gpu, 1, v));
    SML_ASSERT_OK(simil_index_reconstruct(cpu, 1, w));
    assert_memory_equal(v, w, sizeof v);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_reconstruct(gpu, 3, v));
    /* k past n, and an empty index */
    float d[3100];
    int64_t l[3100];
    SML_ASSERT_OK(simil_index_search(gpu, 1, q, 3100, NULL, d, l));
    for (int j = 0; j < 3100; j++) assert_true(j < n - 500 ? l[j] >= 0 : l[j] == -1);
    SML_ASSERT_OK(simil_index_reset(gpu));
    SML_ASSERT_OK(simil_index_search(gpu, 1, q, 5, NULL, d, l));
    assert_int_equal(l[0], -1);
    simil_index_destroy(gpu);
    simil_index_destroy(cpu);
    free(x);
    free(q);
}

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
    SML_ASSERT_OK(simil_matrix_read_float(qp, 0, sml_test_quick() ? 500 : 2000, &q));
    const int64_t k = 10, nq = q.rows, dim = b.cols;
    simil_index *cpu, *gpu, *flat;
    twin("XFBQ", dim, SIMIL_METRIC_COSINE, b.rows, b.data, "gpu", &cpu, &gpu);
    SML_ASSERT_OK(simil_index_create(&flat, dim, "Flat", SIMIL_METRIC_COSINE, "gpu"));
    SML_ASSERT_OK(simil_index_add(flat, b.rows, b.data, NULL));
    float *d = sml_test_malloc(4 * nq * k);
    int64_t *l = sml_test_malloc(8 * nq * k), *t = sml_test_malloc(8 * nq * k);
    SML_ASSERT_OK(simil_index_search(flat, nq, q.data, k, NULL, d, t));
    SML_ASSERT_OK(simil_index_search(gpu, nq, q.data, k, NULL, d, l));
    int64_t hits = 0;
    for (int64_t i = 0; i < nq; i++)
        for (int64_t j = 0; j < k; j++)
            for (int64_t u = 0; u < k; u++) hits += l[i * k + j] == t[i * k + u];
    const double p = (double)hits / (double)(nq * k);
    printf("GPU Fashion-MNIST cosine XFBQ4x3, default extra distance: precision@10 %.4f\n", p);
    assert_true(p >= 0.99);
    compare("Fashion-MNIST XFBQ", cpu, gpu, b.data, b.rows, q.data, 200, dim, 10, 0, 0.02f,
            SIMIL_METRIC_COSINE);
    simil_index_destroy(cpu);
    simil_index_destroy(gpu);
    simil_index_destroy(flat);
    simil_matrix_free(&b);
    simil_matrix_free(&q);
    free(d);
    free(l);
    free(t);
}

/* The CUDA encoder against the host's on values that probe every branch of
 * the greedy code: exact zeros, exact level boundaries (ties, both parities
 * of dimension), values past the clip, negative zero, tiny and huge rows,
 * every bit count, with and without per-row normalization. */
static void test_query_codes_match_host(void **state)
{
    (void)state;
    sml_backend *b;
    SML_ASSERT_OK(sml_cuda_backend_open(0, &b));
    const int64_t dims[] = {1, 63, 64, 65, 96, 785};
    const int64_t n = 37;
    uint64_t seed = 5;
    for (int di = 0; di < 6; di++) {
        const int64_t dim = dims[di];
        float *x = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
        for (int64_t i = 0; i < n * dim; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            const int kind = (int)((seed >> 33) % 6);
            const float u = (float)((seed >> 40) & 0xffff) / 65536.0f - 0.5f;
            x[i] = kind == 0   ? 0.0f
                   : kind == 1 ? -0.0f
                   : kind == 2 ? (float)((int)(u * 16)) / 8.0f  /* multiples of 1/8 */
                   : kind == 3 ? u * 40.0f                      /* past the clip */
                               : u;
        }
        for (int64_t j = 0; j < dim; j++) x[3 * dim + j] = 0.0f;       /* a zero row */
        for (int64_t j = 0; j < dim; j++) x[4 * dim + j] *= 1e-30f;    /* a tiny one */
        for (int64_t j = 0; j < dim; j++) x[5 * dim + j] *= 1e30f;     /* a huge one */
        float *x_mem;
        SML_ASSERT_OK(b->ops->mem_alloc(b, sizeof(float) * (size_t)(n * dim), (void **)&x_mem));
        SML_ASSERT_OK(b->ops->mem_upload(b, x_mem, x, sizeof(float) * (size_t)(n * dim)));
        for (int bits = 1; bits <= 8; bits++)
            for (int normalize = 0; normalize <= 1; normalize++) {
                sml_xfbq q;
                SML_ASSERT_OK(sml_xfbq_init(&q, dim, bits, 3));
                q.alpha = normalize ? 2.5f : 1.75f;
                const size_t words = (size_t)(bits * q.words);
                uint64_t *host = sml_test_malloc(8 * words * (size_t)n);
                uint64_t *back = sml_test_malloc(8 * words * (size_t)n);
                sml_xfbq_encode(&q, bits, n, x, normalize, host, 8 * words);
                uint64_t *codes_mem;
                SML_ASSERT_OK(b->ops->mem_alloc(b, 8 * words * (size_t)n, (void **)&codes_mem));
                const sml_xfbq_encode_args enc = {
                    .x = x_mem,
                    .n = n,
                    .dim = dim,
                    .bits = bits,
                    .words = q.words,
                    .alpha = q.alpha,
                    .normalize = normalize,
                    .codes = codes_mem,
                };
                SML_ASSERT_OK(b->ops->xfbq_encode(b, &enc));
                SML_ASSERT_OK(b->ops->mem_download(b, back, codes_mem, 8 * words * (size_t)n));
                for (size_t w = 0; w < words * (size_t)n; w++)
                    if (back[w] != host[w])
                        fail_msg("dim %lld, %d bits, normalize %d: row %zu word %zu is %016llx "
                                 "on the GPU, %016llx on the host",
                                 (long long)dim, bits, normalize, w / words, w % words,
                                 (unsigned long long)back[w], (unsigned long long)host[w]);
                b->ops->mem_free(b, codes_mem);
                free(host);
                free(back);
            }
        b->ops->mem_free(b, x_mem);
        free(x);
    }
    sml_backend_close(b);
}

/* RR: built on one backend, loaded on the other; with extra 0 the results
 * are the same only where both take the same candidates, so codes and
 * rotation must match exactly.  The GPU rotates the queries itself
 * (sml_xfbq_rotated_component's order, as the CPU).  200 dimensions: a
 * second block of 128 components of the rotation kernel, partly past the
 * row. */
static void test_rotation_same_as_cpu(void **state)
{
    (void)state;
    const int64_t n = 6000, nq = 101;
    const struct {
        const char *desc;
        int64_t dim;
        simil_metric metric;
    } cases[] = {{"RR,XFBQ", 96, SIMIL_METRIC_COSINE},
                 {"RR,IVF16,XFBQ", 96, SIMIL_METRIC_IP},
                 {"RR,XFBQ_fp32", 200, SIMIL_METRIC_L2}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t dim = cases[t].dim;
        float *x = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
        float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
        SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 91 + t, x));
        SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 92 + t, q));
        simil_index *cpu, *gpu;
        twin(cases[t].desc, dim, cases[t].metric, n, x, t % 2 ? "cpu" : "gpu", &cpu, &gpu);
        const float extras[] = {0.0f, 0.002f, -1.0f};
        for (int e = 0; e < 3; e++)
            compare(cases[t].desc, cpu, gpu, x, n, q, nq, dim, 10, 4, extras[e],
                    cases[t].metric);
        if (strstr(cases[t].desc, "IVF") == NULL)
            for (int e = 0; e < 2; e++) same_candidates(cases[t].desc, gpu, nq, q, 10, extras[e]);
        float a[200], b[200];
        SML_ASSERT_OK(simil_index_reconstruct(gpu, 17, a));
        SML_ASSERT_OK(simil_index_reconstruct(cpu, 17, b));
        assert_memory_equal(a, b, sizeof(float) * (size_t)dim);
        if (cases[t].metric == SIMIL_METRIC_IP)
            assert_memory_equal(a, x + 17 * dim, sizeof(float) * (size_t)dim);
        simil_index_destroy(cpu);
        simil_index_destroy(gpu);
        free(x);
        free(q);
    }
}

/* The GPU's rotation kernel against sml_xfbq_rotate, bit for bit: dims that
 * end a piece of 16 components part way and a block of 128 components part
 * way, rows that end a block of 32 part way, a zero row and one of mixed
 * magnitudes. */
static void test_rotation_bits(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 17, 96, 203, 784};
    const int64_t n = 75;
    for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
        const int64_t dim = dims[t];
        const size_t xs = (size_t)(n * dim), rs = (size_t)(dim * dim);
        float *x = sml_test_malloc(sizeof(float) * xs), *r = sml_test_malloc(sizeof(float) * rs);
        float *want = sml_test_malloc(sizeof(float) * xs), *got = sml_test_malloc(sizeof(float) * xs);
        SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 131 + t, x));
        SML_ASSERT_OK(simil_generate("uniform", 0, dim, dim, 141 + t, r));
        for (size_t i = 0; i < rs; i++) r[i] -= 0.5f; /* both signs, as a rotation's */
        for (int64_t j = 0; j < dim; j++) {
            x[2 * dim + j] = 0.0f;                         /* a zero row */
            x[5 * dim + j] *= j % 3 == 0 ? 1e6f : 1e-6f;   /* mixed magnitudes */
        }
        sml_xfbq_rotate(r, dim, n, x, want);
        float *dx, *dr, *dy;
        assert_int_equal(cudaMalloc((void **)&dx, sizeof(float) * xs), cudaSuccess);
        assert_int_equal(cudaMalloc((void **)&dr, sizeof(float) * rs), cudaSuccess);
        assert_int_equal(cudaMalloc((void **)&dy, sizeof(float) * xs), cudaSuccess);
        assert_int_equal(cudaMemcpy(dx, x, sizeof(float) * xs, cudaMemcpyHostToDevice), cudaSuccess);
        assert_int_equal(cudaMemcpy(dr, r, sizeof(float) * rs, cudaMemcpyHostToDevice), cudaSuccess);
        SML_ASSERT_OK(sml_cuda_xfbq_rotate(dx, dr, dim, n, dy));
        assert_int_equal(cudaMemcpy(got, dy, sizeof(float) * xs, cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t i = 0; i < xs; i++)
            if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
                fail_msg("dim %lld: row %zu component %zu: GPU %a, host %a", (long long)dim,
                         i / (size_t)dim, i % (size_t)dim, (double)got[i], (double)want[i]);
        cudaFree(dx);
        cudaFree(dr);
        cudaFree(dy);
        free(x);
        free(r);
        free(want);
        free(got);
    }
}

/* More queries than one batch of the tensor-core path takes (2,048), from host
 * memory: each batch's queries go up while the one before runs (QueryStream),
 * and the last batch is a partial one.  With RR at 203 dimensions the
 * rotation's last piece of 16 components is a partial one, and so is its
 * last block of 128 components. */
static void test_streamed_batches(void **state)
{
    (void)state;
    const int64_t n = 3000, nq = 4500;
    const struct {
        const char *desc;
        int64_t dim;
        simil_metric metric;
    } cases[] = {{"XFBQ_fp32", 40, SIMIL_METRIC_L2}, {"RR,XFBQ", 203, SIMIL_METRIC_COSINE}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t dim = cases[t].dim;
        float *x = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
        float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
        SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 121 + t, x));
        SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 122 + t, q));
        simil_index *cpu, *gpu;
        twin(cases[t].desc, dim, cases[t].metric, n, x, "cpu", &cpu, &gpu);
        compare(cases[t].desc, cpu, gpu, x, n, q, nq, dim, 10, 0, 0.002f, cases[t].metric);
        simil_index_destroy(cpu);
        simil_index_destroy(gpu);
        free(x);
        free(q);
    }
}

/* GPU memory in use, after the device is idle. */
static size_t gpu_used(void)
{
    size_t free_bytes = 0, total = 0;
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_int_equal(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
    return total - free_bytes;
}

/* The same search of two GPU indexes: the same bits. */
static void same_bits(const char *what, const simil_index *a, const simil_index *b,
                      const float *q, int64_t nq, int64_t k, float extra)
{
    simil_search_params *p = sml_test_params("");
    SML_ASSERT_OK(simil_search_params_set_float(p, "extra_distance", extra));
    const size_t out = (size_t)(nq * k);
    float *da = sml_test_malloc(4 * out), *db = sml_test_malloc(4 * out);
    int64_t *la = sml_test_malloc(8 * out), *lb = sml_test_malloc(8 * out);
    SML_ASSERT_OK(simil_index_search(a, nq, q, k, p, da, la));
    SML_ASSERT_OK(simil_index_search(b, nq, q, k, p, db, lb));
    for (size_t i = 0; i < out; i++)
        if (la[i] != lb[i] || memcmp(&da[i], &db[i], 4) != 0)
            fail_msg("%s k=%lld extra=%g: result %zu is (%lld, %.9g) and (%lld, %.9g)", what,
                     (long long)k, (double)extra, i, (long long)la[i], (double)da[i],
                     (long long)lb[i], (double)db[i]);
    simil_search_params_destroy(p);
    free(da);
    free(db);
    free(la);
    free(lb);
}

/* XFBQ_host: the floats in pinned host memory that the re-ranking kernel
 * reads; XFBQ, the default, or XFBQ_fp16: those, and an fp16 copy on the GPU
 * that picks the candidates to re-rank from them.  The same results as the
 * CPU (and so as XFBQ_fp32; for the fp16 copy the same bits as XFBQ_fp32 on
 * the GPU, whose keys come from the same kernel), edits included, files
 * either way, and the GPU holds the codes and ids alone (_host), with the
 * fp16 copy (the default) or with the floats (_fp32). */
static void test_host_floats(void **state)
{
    (void)state;
    const int64_t dim = 96, n = 6000, nq = 101;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 93, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 94, q));
    /* IP on unnormalized rows: norms that vary, which the fp16 bound takes */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < dim; j++) x[i * dim + j] *= 0.25f + (float)(i % 7);
    const char *descs[] = {"XFBQ_host", "RR,XFBQ_host", "XFBQ", "RR,XFBQ_fp16", "XFBQ_fp16"};
    const simil_metric metrics[] = {SIMIL_METRIC_COSINE, SIMIL_METRIC_L2, SIMIL_METRIC_COSINE,
                                    SIMIL_METRIC_IP, SIMIL_METRIC_L2};
    for (int t = 0; t < 5; t++) {
        simil_index *cpu, *gpu;
        twin(descs[t], dim, metrics[t], n, x, t % 2 ? "cpu" : "gpu", &cpu, &gpu);
        const float extras[] = {0.0f, 0.01f, -1.0f};
        for (int e = 0; e < 3; e++)
            compare(descs[t], cpu, gpu, x, n, q, nq, dim, 10, 0, extras[e], metrics[t]);
        compare(descs[t], cpu, gpu, x, n, q, 7, dim, 3000, 0, 0.01f, metrics[t]);
        compare(descs[t], cpu, gpu, x, n, q, nq, dim, 1, 0, 0.01f, metrics[t]);
        if (t >= 2) {
            /* the same index with its floats on the GPU: the same alpha (from the
             * same rows), codes and candidates, and keys from the same kernel */
            simil_index *fp32;
            SML_ASSERT_OK(simil_index_create(&fp32, dim, t == 3 ? "RR,XFBQ_fp32" : "XFBQ_fp32",
                                             metrics[t], "gpu"));
            SML_ASSERT_OK(simil_index_train(fp32, n, x));
            SML_ASSERT_OK(simil_index_add(fp32, n, x, NULL));
            const int64_t ks[] = {1, 10, 100, 3000};
            for (int i = 0; i < 4; i++) {
                same_bits(descs[t], fp32, gpu, q, nq, ks[i], 0.01f);
                same_bits(descs[t], fp32, gpu, q, nq, ks[i], 0.0f);
            }
            simil_index_destroy(fp32);
        }
        /* edits on both: a second add grows the host column, remove gathers it,
         * alpha recodes from it */
        SML_ASSERT_OK(simil_index_add(gpu, 500, x, NULL));
        SML_ASSERT_OK(simil_index_add(cpu, 500, x, NULL));
        int64_t gone[300];
        for (int i = 0; i < 300; i++) gone[i] = 5 * i + 2;
        SML_ASSERT_OK(simil_index_remove(gpu, 300, gone, NULL));
        SML_ASSERT_OK(simil_index_remove(cpu, 300, gone, NULL));
        SML_ASSERT_OK(simil_index_set_xfbq_alpha(gpu, 2.5f));
        SML_ASSERT_OK(simil_index_set_xfbq_alpha(cpu, 2.5f));
        /* the oracle's rows by id: ids 6000.. are x's first 500 rows again */
        float *x2 = sml_test_malloc(sizeof(float) * (n + 500) * dim);
        memcpy(x2, x, sizeof(float) * n * dim);
        memcpy(x2 + n * dim, x, sizeof(float) * 500 * dim);
        compare(descs[t], cpu, gpu, x2, n + 500, q, nq, dim, 10, 0, 0.01f, metrics[t]);
        float a[96], b[96];
        SML_ASSERT_OK(simil_index_reconstruct(gpu, 6017, a));
        SML_ASSERT_OK(simil_index_reconstruct(cpu, 6017, b));
        assert_memory_equal(a, b, sizeof a);
        /* saved from the GPU, loaded on the CPU */
        const char *path = sml_test_path("xfbq-host.simil");
        SML_ASSERT_OK(simil_index_save(gpu, path));
        simil_index *back;
        SML_ASSERT_OK(simil_index_load(&back, path, "cpu"));
        compare(descs[t], back, gpu, x2, n + 500, q, nq, dim, 10, 0, 0.01f, metrics[t]);
        free(x2);
        simil_index_destroy(back);
        simil_index_destroy(cpu);
        simil_index_destroy(gpu);
    }
    /* GPU bytes: 300,000 rows of 96 floats are 115 MB on the GPU with _fp32,
     * and none with _host (48 bytes of code and 8 of id a row stay); the
     * default (_fp16) adds 2 bytes a component and a scale to those */
    const int64_t big = 300000;
    float *y = sml_test_malloc(sizeof(float) * big * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, big, dim, 95, y));
    const char *kinds[] = {"XFBQ_fp32", "XFBQ_host", "XFBQ"};
    double per_row[3];
    for (int t = 0; t < 3; t++) {
        simil_index *g;
        const size_t before = gpu_used();
        SML_ASSERT_OK(simil_index_create(&g, dim, kinds[t], SIMIL_METRIC_COSINE, "gpu"));
        SML_ASSERT_OK(simil_index_add(g, big, y, NULL));
        per_row[t] = (double)(gpu_used() - before) / (double)big;
        simil_index_destroy(g);
    }
    printf("GPU bytes per vector at 96-d: XFBQ4x3_fp32 %.1f, XFBQ4x3_host %.1f, XFBQ4x3 %.1f\n",
           per_row[0], per_row[1], per_row[2]);
    assert_true(per_row[0] >= 384.0 && per_row[1] <= 64.0);
    assert_true(per_row[2] >= 56.0 + 192.0 && per_row[2] < per_row[0]);
    free(y);
    free(x);
    free(q);
}

int main(void)
{
    sml_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_query_codes_match_host),
        cmocka_unit_test(test_flat_same_as_cpu),
        cmocka_unit_test(test_metrics_and_bits),
        cmocka_unit_test(test_many_blocks_per_query),
        cmocka_unit_test(test_tensor_same_as_popcount),
        cmocka_unit_test(test_ivf_same_as_cpu),
        cmocka_unit_test(test_flat_edits_on_gpu),
        cmocka_unit_test(test_fashion_mnist_precision),
        cmocka_unit_test(test_rotation_same_as_cpu),
        cmocka_unit_test(test_rotation_bits),
        cmocka_unit_test(test_streamed_batches),
        cmocka_unit_test(test_host_floats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
