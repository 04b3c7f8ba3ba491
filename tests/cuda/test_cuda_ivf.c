/* test_cuda_ivf.c: IVF-Flat and k-means on the GPU against the CPU: the same
 * quantizer (trained on one, loaded on the other) gives the same results, at
 * any nprobe, k past 2048, nprobe past 2048; remove and re-add; files move
 * between backends; recall on Fashion-MNIST; k-means objectives agree.  The
 * coarse selection of small batches against a sort on the host: ties, NaN,
 * -0 and +0, rows past those it keeps in registers.  The batch path's thin
 * tiles staged through shared memory against read lane by lane. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cuda/cuda_backend.h"
#include "util/test_util.h"

static const double rel_tol = 1e-4;

static void search(const simil_index *index, int64_t nq, const float *q, int64_t k,
                   int64_t nprobe, float *d, int64_t *l)
{
    simil_search_params *p = sml_test_params("");
    SML_ASSERT_OK(simil_search_params_set_int(p, "nprobe", nprobe));
    SML_ASSERT_OK(simil_index_search(index, nq, q, k, p, d, l));
    simil_search_params_destroy(p);
}

/* An index trained and filled on the CPU, and its copy loaded on the GPU. */
static void twin(const char *desc, int64_t dim, simil_metric metric, int64_t n, const float *x,
                 simil_index **cpu, simil_index **gpu)
{
    SML_ASSERT_OK(simil_index_create(cpu, dim, desc, metric, "cpu"));
    SML_ASSERT_OK(simil_index_train(*cpu, n, x));
    SML_ASSERT_OK(simil_index_add(*cpu, n, x, NULL));
    const char *path = sml_test_path("twin.simil");
    SML_ASSERT_OK(simil_index_save(*cpu, path));
    SML_ASSERT_OK(simil_index_load(gpu, path, "gpu"));
}

static void compare(const char *what, const simil_index *cpu, const simil_index *gpu,
                    const float *x, int64_t n, const float *q, int64_t nq, int64_t dim, int64_t k,
                    int64_t nprobe, simil_metric metric)
{
    char context[160];
    snprintf(context, sizeof context, "%s k=%lld nprobe=%lld", what, (long long)k,
             (long long)nprobe);
    size_t out = (size_t)(nq * k);
    float *dc = sml_test_malloc(4 * out), *dg = sml_test_malloc(4 * out);
    int64_t *lc = sml_test_malloc(8 * out), *lg = sml_test_malloc(8 * out);
    search(cpu, nq, q, k, nprobe, dc, lc);
    search(gpu, nq, q, k, nprobe, dg, lg);
    sml_test_check_same(context, x, n, q, nq, dim, k, metric, dg, lg, dc, lc, rel_tol);
    free(dc);
    free(dg);
    free(lc);
    free(lg);
}

static void test_same_as_cpu(void **state)
{
    (void)state;
    const int64_t n = 20000, dim = 40, nq = 300;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 11, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 12, q));
    simil_index *cpu, *gpu;
    twin("IVF64,Flat", dim, SIMIL_METRIC_L2, n, x, &cpu, &gpu);
    const int64_t probes[] = {1, 3, 16, 64};
    const int64_t ks[] = {1, 10, 100, 1000};
    for (size_t i = 0; i < 4; i++)
        for (size_t j = 0; j < 4; j++)
            compare("IVF64 l2", cpu, gpu, x, n, q, nq, dim, ks[j], probes[i], SIMIL_METRIC_L2);
    compare("IVF64 l2 k>2048", cpu, gpu, x, n, q, 40, dim, 3000, 8, SIMIL_METRIC_L2);
    compare("IVF64 l2 k past candidates", cpu, gpu, x, n, q, 40, dim, 5000, 1, SIMIL_METRIC_L2);
    simil_index_destroy(cpu);
    simil_index_destroy(gpu);
    twin("IVF32,Flat", dim, SIMIL_METRIC_IP, n, x, &cpu, &gpu);
    compare("IVF32 ip", cpu, gpu, x, n, q, nq, dim, 20, 4, SIMIL_METRIC_IP);
    simil_index_destroy(cpu);
    simil_index_destroy(gpu);
    free(x);
    free(q);
}

static void test_many_lists_and_probes(void **state)
{
    (void)state;
    /* nprobe past 2048 needs the radix path in the coarse search too */
    const int64_t n = 30000, dim = 8, nq = 50, nlist = 3000;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    SML_ASSERT_OK(simil_generate("uniform", 0, n, dim, 21, x));
    simil_index *cpu, *gpu;
    char desc[32];
    snprintf(desc, sizeof desc, "IVF%lld,Flat", (long long)nlist);
    twin(desc, dim, SIMIL_METRIC_L2, n, x, &cpu, &gpu);
    compare("IVF3000", cpu, gpu, x, n, x, nq, dim, 10, 2500, SIMIL_METRIC_L2);
    /* nprobe = nlist: exact search, checked against the float64 reference */
    float d[50 * 10];
    int64_t l[50 * 10];
    search(gpu, nq, x, 10, nlist, d, l);
    sml_test_check_knn("IVF3000 nprobe=nlist on the GPU", x, n, x, nq, dim, 10, SIMIL_METRIC_L2,
                       d, l, rel_tol);
    simil_index_destroy(cpu);
    simil_index_destroy(gpu);
    free(x);
}

static void test_remove_readd_files(void **state)
{
    (void)state;
    const int64_t n = 5000, dim = 16;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 31, x));
    simil_index *gpu;
    SML_ASSERT_OK(simil_index_create(&gpu, dim, "IVF40,Flat", SIMIL_METRIC_L2, "gpu"));
    SML_ASSERT_OK(simil_index_train(gpu, n, x)); /* k-means on the GPU */
    SML_ASSERT_OK(simil_index_add(gpu, n / 2, x, NULL));
    SML_ASSERT_OK(simil_index_add(gpu, n - n / 2, x + (n / 2) * dim, NULL)); /* lists grow */
    int64_t *even = sml_test_malloc(sizeof(int64_t) * n / 2);
    for (int64_t i = 0; i < n / 2; i++) even[i] = 2 * i;
    int64_t removed;
    SML_ASSERT_OK(simil_index_remove(gpu, n / 2, even, &removed));
    assert_int_equal(removed, n / 2);
    float d[20];
    int64_t l[20];
    for (int64_t i = 0; i < n; i += 101) {
        search(gpu, 1, x + i * dim, 20, 40, d, l);
        for (int j = 0; j < 20; j++) assert_true(l[j] % 2 == 1);
    }
    int64_t id = 0;
    SML_ASSERT_OK(simil_index_add(gpu, 1, x, &id));
    search(gpu, 1, x, 1, 40, d, l);
    assert_int_equal(l[0], 0);
    const char *path = sml_test_path("gpu-ivf.simil");
    SML_ASSERT_OK(simil_index_save(gpu, path));
    simil_index *cpu;
    SML_ASSERT_OK(simil_index_load(&cpu, path, "cpu"));
    compare("after remove, saved on GPU, loaded on CPU", cpu, gpu, x, n, x, 100, dim, 10, 5,
            SIMIL_METRIC_L2);
    float v[16];
    SML_ASSERT_OK(simil_index_reconstruct(gpu, 1, v));
    assert_memory_equal(v, x + dim, sizeof v);
    simil_index_destroy(gpu);
    simil_index_destroy(cpu);
    free(even);
    free(x);
}

static void test_fashion_mnist_recall(void **state)
{
    (void)state;
    const char *base_path = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
    const char *query_path = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
    struct stat st;
    if (stat(base_path, &st) != 0) skip();
    simil_matrix base, queries;
    SML_ASSERT_OK(simil_matrix_read_float(base_path, 0, -1, &base));
    /* quick (under compute-sanitizer): the first 1,000 queries */
    SML_ASSERT_OK(simil_matrix_read_float(query_path, 0, sml_test_quick() ? 1000 : -1, &queries));
    const int64_t k = 10, nq = queries.rows, dim = base.cols;
    simil_index *ivf, *flat;
    SML_ASSERT_OK(simil_index_create(&ivf, dim, "IVF1024,Flat", SIMIL_METRIC_L2, "gpu"));
    SML_ASSERT_OK(simil_index_train(ivf, base.rows, base.data));
    SML_ASSERT_OK(simil_index_add(ivf, base.rows, base.data, NULL));
    SML_ASSERT_OK(simil_index_create(&flat, dim, "Flat", SIMIL_METRIC_L2, "gpu"));
    SML_ASSERT_OK(simil_index_add(flat, base.rows, base.data, NULL));
    float *d = sml_test_malloc(4 * nq * k), *dt = sml_test_malloc(4 * nq * k);
    int64_t *l = sml_test_malloc(8 * nq * k), *lt = sml_test_malloc(8 * nq * k);
    SML_ASSERT_OK(simil_index_search(flat, nq, queries.data, k, NULL, dt, lt));
    search(ivf, nq, queries.data, k, 16, d, l);
    int64_t hits = 0;
    for (int64_t i = 0; i < nq; i++)
        for (int64_t j = 0; j < k; j++)
            for (int64_t t = 0; t < k; t++) hits += l[i * k + j] == lt[i * k + t];
    double recall = (double)hits / (double)(nq * k);
    printf("GPU Fashion-MNIST IVF1024,Flat nprobe=16: recall10@10 %.4f\n", recall);
    assert_true(recall >= 0.98);
    simil_index_destroy(ivf);
    simil_index_destroy(flat);
    simil_matrix_free(&base);
    simil_matrix_free(&queries);
    free(d);
    free(dt);
    free(l);
    free(lt);
}

static void test_kmeans_objective_agrees(void **state)
{
    (void)state;
    /* 20 well-separated clusters: both backends follow the same path */
    enum { C = 20, PER = 500, N = C * PER, D = 12, IT = 10 };
    float *x = sml_test_malloc(sizeof(float) * N * D);
    float centres[C * D];
    sml_test_fill_uniform(centres, C * D, 41, -50, 50);
    sml_test_fill_uniform(x, N * D, 42, -1, 1);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) x[i * D + j] += centres[(i % C) * D + j];
    simil_kmeans_params p;
    simil_kmeans_params_init(&p);
    p.k = C;
    p.iterations = IT;
    double oc[IT], og[IT];
    float cc[C * D], cg[C * D];
    p.device = "cpu";
    SML_ASSERT_OK(simil_kmeans(&p, N, D, x, cc, NULL, oc));
    p.device = "gpu";
    SML_ASSERT_OK(simil_kmeans(&p, N, D, x, cg, NULL, og));
    /* stated tolerance: 1e-3 relative per iteration (the backends round
     * distances differently, so a few boundary points may change cluster) */
    for (int it = 0; it < IT; it++)
        if (fabs(oc[it] - og[it]) > 1e-3 * oc[it])
            fail_msg("iteration %d: objective %.9g on the CPU, %.9g on the GPU", it, oc[it], og[it]);
    /* and the GPU is deterministic */
    float again[C * D];
    SML_ASSERT_OK(simil_kmeans(&p, N, D, x, again, NULL, NULL));
    assert_memory_equal(cg, again, sizeof cg);
    free(x);
}

/* GPU against CPU for approximate distances: equal within rel at each rank,
 * labels equal except where the CPU's neighbouring distances tie. */
static void compare_approx(const char *what, const simil_index *cpu, const simil_index *gpu,
                           const simil_search_params *pc, const simil_search_params *pg,
                           const float *q, int64_t nq, int64_t k, double rel)
{
    size_t out = (size_t)(nq * k);
    float *dc = sml_test_malloc(4 * out), *dg = sml_test_malloc(4 * out);
    int64_t *lc = sml_test_malloc(8 * out), *lg = sml_test_malloc(8 * out);
    SML_ASSERT_OK(simil_index_search(cpu, nq, q, k, pc, dc, lc));
    SML_ASSERT_OK(simil_index_search(gpu, nq, q, k, pg, dg, lg));
    for (int64_t i = 0; i < nq; i++) {
        const float *r = dc + i * k;
        double scale = fmax(fabs(r[0]), fabs(r[k - 1]));
        for (int64_t j = 0; j < k; j++) {
            size_t o = (size_t)(i * k + j);
            if (fabs(dg[o] - dc[o]) > rel * scale)
                fail_msg("%s query %lld rank %lld: GPU %.7g, CPU %.7g", what, (long long)i,
                         (long long)j, dg[o], dc[o]);
            int tie = (j > 0 && fabs(r[j] - r[j - 1]) <= rel * scale) ||
                      (j + 1 < k && fabs(r[j] - r[j + 1]) <= rel * scale) || j + 1 == k;
            if (!tie && lg[o] != lc[o])
                fail_msg("%s query %lld rank %lld: GPU id %lld, CPU id %lld", what, (long long)i,
                         (long long)j, (long long)lg[o], (long long)lc[o]);
        }
    }
    free(dc);
    free(dg);
    free(lc);
    free(lg);
}

/* An L2 index trained on the CPU and loaded on the GPU, compared at one
 * nprobe with the GPU's tables in lut precision ("fp32" or "fp16"). */
static void compare_twin(const char *desc, int64_t n, int64_t dim, const float *x,
                         const float *q, int64_t nq, int64_t k, int64_t nprobe,
                         const char *lut, double rel)
{
    simil_index *cpu, *gpu;
    twin(desc, dim, SIMIL_METRIC_L2, n, x, &cpu, &gpu);
    simil_search_params *pc = sml_test_params(""), *pg = sml_test_params("");
    SML_ASSERT_OK(simil_search_params_set_int(pc, "nprobe", nprobe));
    SML_ASSERT_OK(simil_search_params_set_int(pg, "nprobe", nprobe));
    SML_ASSERT_OK(simil_search_params_set(pg, "lut", lut));
    char what[96];
    snprintf(what, sizeof what, "%s %s", desc, lut);
    compare_approx(what, cpu, gpu, pc, pg, q, nq, k, rel);
    simil_search_params_destroy(pc);
    simil_search_params_destroy(pg);
    simil_index_destroy(cpu);
    simil_index_destroy(gpu);
}

/* k = 1, 20 and 256 take the fused per-query scan, 300 the pair scan and its
 * multi-pass selection, 2500 radix selection. */
static void test_ivf_pq_same_as_cpu(void **state)
{
    (void)state;
    const int64_t n = 20000, dim = 32, nq = 200, k = 20;
    const int64_t ks[] = {1, 20, 256, 300, 2500};
    float *x = sml_test_malloc(4 * n * dim), *q = sml_test_malloc(4 * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 51, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 52, q));
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP};
    for (int m = 0; m < 2; m++) {
        simil_index *cpu, *gpu;
        twin("IVF32,PQ8", dim, metrics[m], n, x, &cpu, &gpu);
        simil_search_params *pc = sml_test_params("nprobe=8"), *pg = sml_test_params("nprobe=8");
        for (int pre = 0; pre <= 1; pre++)
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                SML_ASSERT_OK(simil_search_params_set_int(pc, "precomputed_tables", pre));
                SML_ASSERT_OK(simil_search_params_set_int(pg, "precomputed_tables", pre));
                SML_ASSERT_OK(simil_search_params_set(pg, "lut", "fp32"));
                char what[96];
                snprintf(what, sizeof what, "IVF32,PQ8 metric %d precomputed %d k=%lld fp32",
                         (int)metrics[m], pre, (long long)ks[ki]);
                compare_approx(what, cpu, gpu, pc, pg, q, nq, ks[ki], 1e-4);
                /* fp16 tables: entries off by 2^-11 of the table's range at most */
                SML_ASSERT_OK(simil_search_params_set(pg, "lut", "fp16"));
                what[strlen(what) - 4] = 0;
                strcat(what, "fp16");
                compare_approx(what, cpu, gpu, pc, pg, q, nq, ks[ki], 2e-2);
            }
        simil_search_params_destroy(pc);
        simil_search_params_destroy(pg);
        simil_index_destroy(cpu);
        simil_index_destroy(gpu);
    }
    /* codes of fewer than 8 bits: tables of 2^5 entries per sub-quantizer */
    compare_twin("IVF32,PQ8x5", n, dim, x, q, nq, k, 8, "fp32", 1e-4);
    /* large raw values: fp16 tables must not overflow */
    for (int64_t i = 0; i < n * dim; i++) x[i] *= 3000.0f;
    for (int64_t i = 0; i < nq * dim; i++) q[i] *= 3000.0f;
    compare_twin("IVF16,PQ16", n, dim, x, q, nq, k, 4, "fp16", 2e-2);
    free(x);
    free(q);
}

/* The fused scan's two table layouts: by codeword for m a power of two from
 * 4 to 64 with fp32 tables and k <= 64 (each lane visits its row's
 * sub-quantizers in its own order), by sub-quantizer otherwise (m = 12, and
 * k = 100 here), for both metrics, 8- and 6-bit codes. */
static void test_ivf_pq_fused_layouts(void **state)
{
    (void)state;
    const int64_t n = 20000, dim = 192, nq = 100;
    const char *descs[] = {"IVF16,PQ4",  "IVF16,PQ8",  "IVF16,PQ16", "IVF16,PQ32",
                           "IVF16,PQ64", "IVF16,PQ12", "IVF16,PQ16x6"};
    const int64_t ks[] = {10, 50, 100};
    float *x = sml_test_malloc(4 * n * dim), *q = sml_test_malloc(4 * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 61, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 62, q));
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP};
    for (size_t d = 0; d < sizeof descs / sizeof descs[0]; d++)
        for (int m = 0; m < 2; m++) {
            simil_index *cpu, *gpu;
            twin(descs[d], dim, metrics[m], n, x, &cpu, &gpu);
            simil_search_params *pc = sml_test_params("nprobe=4");
            simil_search_params *pg = sml_test_params("nprobe=4,lut=fp32");
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                char what[96];
                snprintf(what, sizeof what, "%s metric %d k=%lld", descs[d], (int)metrics[m],
                         (long long)ks[ki]);
                compare_approx(what, cpu, gpu, pc, pg, q, nq, ks[ki], 1e-4);
            }
            simil_search_params_destroy(pc);
            simil_search_params_destroy(pg);
            simil_index_destroy(cpu);
            simil_index_destroy(gpu);
        }
    free(x);
    free(q);
}

/* The GPU's add (coarse assignment on the exact fp16 path, then the encoder)
 * against the CPU's, from one trained index, for sub-vectors of every width
 * class the encoder has: 3, 8, 12, 24 and 48 floats (kept in registers of 4,
 * 8, 16, 32, or read in place), and 5-bit codes.  Each vector's
 * reconstruction must match the CPU's; a near tie between two codewords or
 * two lists may pick the other, so up to 0.5% may differ, as long as the
 * GPU's reconstruction error is no larger than the CPU's (a wrong code would
 * make it larger). */
static void test_ivf_pq_gpu_encoder_matches_cpu(void **state)
{
    (void)state;
    const int64_t n = 6000, dim = 96;
    const char *descs[] = {"IVF16,PQ32", "IVF16,PQ12", "IVF16,PQ8", "IVF16,PQ4", "IVF16,PQ2",
                           "IVF16,PQ12x5"};
    float *x = sml_test_malloc(4 * n * dim), *rc = sml_test_malloc(4 * dim),
          *rg = sml_test_malloc(4 * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 61, x));
    for (size_t d = 0; d < sizeof descs / sizeof descs[0]; d++) {
        simil_index *trained, *cpu, *gpu;
        SML_ASSERT_OK(simil_index_create(&trained, dim, descs[d], SIMIL_METRIC_L2, "cpu"));
        SML_ASSERT_OK(simil_index_train(trained, n, x));
        const char *path = sml_test_path("encoder.simil");
        SML_ASSERT_OK(simil_index_save(trained, path));
        SML_ASSERT_OK(simil_index_load(&cpu, path, "cpu"));
        SML_ASSERT_OK(simil_index_load(&gpu, path, "gpu"));
        SML_ASSERT_OK(simil_index_add(cpu, n, x, NULL));
        SML_ASSERT_OK(simil_index_add(gpu, n, x, NULL));
        int64_t differ = 0;
        for (int64_t i = 0; i < n; i++) {
            SML_ASSERT_OK(simil_index_reconstruct(cpu, i, rc));
            SML_ASSERT_OK(simil_index_reconstruct(gpu, i, rg));
            double ec = 0, eg = 0, gap = 0;
            for (int64_t t = 0; t < dim; t++) {
                const double v = x[i * dim + t];
                ec += (v - rc[t]) * (v - rc[t]);
                eg += (v - rg[t]) * (v - rg[t]);
                gap += fabs((double)rc[t] - rg[t]);
            }
            if (gap == 0) continue;
            differ++;
            if (eg > ec * (1 + 1e-4) + 1e-6)
                fail_msg("%s vector %lld: GPU reconstruction error %.7g, CPU %.7g", descs[d],
                         (long long)i, eg, ec);
        }
        printf("%s: %lld of %lld GPU-encoded vectors differ from the CPU's (ties)\n", descs[d],
               (long long)differ, (long long)n);
        assert_true(differ * 200 <= n);
        simil_index_destroy(trained);
        simil_index_destroy(cpu);
        simil_index_destroy(gpu);
    }
    free(x);
    free(rc);
    free(rg);
}

static void test_ivf_pq_fashion_56_bytes(void **state)
{
    (void)state;
    const char *bp = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
    const char *qp = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
    struct stat st;
    if (stat(bp, &st) != 0) skip();
    simil_matrix b, q;
    SML_ASSERT_OK(simil_matrix_read_float(bp, 0, -1, &b));
    SML_ASSERT_OK(simil_matrix_read_float(qp, 0, sml_test_quick() ? 500 : 2000, &q));
    const int64_t k = 10, nq = q.rows;
    simil_index *ivf, *flat;
    SML_ASSERT_OK(simil_index_create(&ivf, b.cols, "IVF256,PQ56", SIMIL_METRIC_L2, "gpu"));
    SML_ASSERT_OK(simil_index_train(ivf, b.rows, b.data));
    SML_ASSERT_OK(simil_index_add(ivf, b.rows, b.data, NULL));
    SML_ASSERT_OK(simil_index_create(&flat, b.cols, "Flat", SIMIL_METRIC_L2, "gpu"));
    SML_ASSERT_OK(simil_index_add(flat, b.rows, b.data, NULL));
    float *d = sml_test_malloc(4 * nq * k), *dt = sml_test_malloc(4 * nq * k);
    int64_t *l = sml_test_malloc(8 * nq * k), *lt = sml_test_malloc(8 * nq * k);
    SML_ASSERT_OK(simil_index_search(flat, nq, q.data, k, NULL, dt, lt));
    const char *luts[] = {"nprobe=16,lut=fp16", "nprobe=16,lut=fp32"};
    for (int u = 0; u < 2; u++) {
        simil_search_params *p = sml_test_params(luts[u]);
        SML_ASSERT_OK(simil_index_search(ivf, nq, q.data, k, p, d, l));
        simil_search_params_destroy(p);
        int64_t hits = 0;
        for (int64_t i = 0; i < nq; i++)
            for (int64_t j = 0; j < k; j++)
                for (int64_t t = 0; t < k; t++) hits += l[i * k + j] == lt[i * k + t];
        double r = (double)hits / (double)(nq * k);
        printf("GPU Fashion-MNIST IVF256,PQ56 nprobe=16 %s tables: recall10@10 %.4f\n",
               u == 0 ? "fp16" : "fp32", r);
        assert_true(r >= 0.70);
    }
    simil_index_destroy(ivf);
    simil_index_destroy(flat);
    simil_matrix_free(&b);
    simil_matrix_free(&q);
    free(d);
    free(dt);
    free(l);
    free(lt);
}

/* Two searches' results of up to n = nq x k entries each, a and b. */
typedef struct two_results {
    float *da, *db;
    int64_t *la, *lb;
} two_results;

static two_results two_results_alloc(int64_t n)
{
    return (two_results){sml_test_malloc(4 * (size_t)n), sml_test_malloc(4 * (size_t)n),
                         sml_test_malloc(8 * (size_t)n), sml_test_malloc(8 * (size_t)n)};
}

static void two_results_free(two_results *r)
{
    free(r->da);
    free(r->db);
    free(r->la);
    free(r->lb);
}

/* a and b of r (named so in a failure) the same bits for nq x k entries. */
static void same_bits(const char *what, const char *a, const char *b, int64_t nq, int64_t k,
                      const two_results *r)
{
    for (int64_t e = 0; e < nq * k; e++)
        if (r->la[e] != r->lb[e] || memcmp(&r->da[e], &r->db[e], 4) != 0)
            fail_msg("%s nq=%lld k=%lld: query %lld rank %lld: %s id %lld dist %.9g, %s id "
                     "%lld dist %.9g",
                     what, (long long)nq, (long long)k, (long long)(e / k), (long long)(e % k),
                     a, (long long)r->la[e], r->da[e], b, (long long)r->lb[e], r->db[e]);
}

/* A GPU search of nq queries on the small-batch path (probes on the device)
 * and on the batch path, with its coarse search as the kernel of keys for
 * many queries (coarse_many) and as the general exact search: the same bits. */
static void small_same_as_batch(const char *what, const simil_index *gpu,
                                const simil_search_params *p, int64_t nq, const float *q,
                                int64_t k)
{
    two_results r = two_results_alloc(nq * k);
    sml_cuda_ivf_small_max(-1);
    SML_ASSERT_OK(simil_index_search(gpu, nq, q, k, p, r.da, r.la));
    sml_cuda_ivf_small_max(0);
    SML_ASSERT_OK(simil_index_search(gpu, nq, q, k, p, r.db, r.lb));
    same_bits(what, "small path", "batch path", nq, k, &r);
    sml_cuda_ivf_coarse_many_max(0);
    SML_ASSERT_OK(simil_index_search(gpu, nq, q, k, p, r.db, r.lb));
    sml_cuda_ivf_coarse_many_max(-1);
    sml_cuda_ivf_small_max(-1);
    same_bits(what, "small path", "batch path, exact-search coarse", nq, k, &r);
    two_results_free(&r);
}

/* A small batch's fused IVF-PQ scan reads each query's table from the
 * coarse search (which fills it beside the keys), where the batch path's
 * blocks build their own: the same bits for every table layout (by codeword
 * for m = 4 to 64 with fp32 tables and k <= 64, repeated columns where m <
 * 32; by sub-quantizer in fp32 and fp16), both metrics; and one query
 * against the CPU. */
static void test_ivf_pq_small_tables(void **state)
{
    (void)state;
    const int64_t n = 20000, dim = 192, nq = 7;
    const char *descs[] = {"IVF16,PQ4", "IVF16,PQ32", "IVF16,PQ64", "IVF16,PQ12",
                           "IVF16,PQ16x6"};
    const int64_t ks[] = {10, 100};
    float *x = sml_test_malloc(4 * n * dim), *q = sml_test_malloc(4 * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 63, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 64, q));
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP};
    const char *luts[] = {"nprobe=5,lut=fp32", "nprobe=5,lut=fp16"};
    for (size_t d = 0; d < sizeof descs / sizeof descs[0]; d++)
        for (int m = 0; m < 2; m++) {
            simil_index *cpu, *gpu;
            twin(descs[d], dim, metrics[m], n, x, &cpu, &gpu);
            simil_search_params *pc = sml_test_params("nprobe=5");
            for (int t = 0; t < 2; t++)
                for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                    simil_search_params *pg = sml_test_params(luts[t]);
                    char what[96];
                    snprintf(what, sizeof what, "%s metric %d %s k=%lld", descs[d],
                             (int)metrics[m], luts[t], (long long)ks[ki]);
                    small_same_as_batch(what, gpu, pg, 1, q, ks[ki]);
                    small_same_as_batch(what, gpu, pg, nq, q, ks[ki]);
                    if (t == 0) compare_approx(what, cpu, gpu, pc, pg, q, 1, ks[ki], 1e-4);
                    simil_search_params_destroy(pg);
                }
            simil_search_params_destroy(pc);
            simil_index_destroy(cpu);
            simil_index_destroy(gpu);
        }
    free(x);
    free(q);
}

/* The batch path's thin tiles (at most 8 pairs of a list) staged through
 * shared memory against read lane by lane (cuda_ivf.cuh,
 * thin_staged_kernel): the same bits, over dims with a partial last stage
 * (4, 40, 100) and whole ones (96), lists of several 512-row tiles with a
 * short last one and lists shorter than a warp, L2 and IP; also against the
 * CPU. */
static void test_thin_staged(void **state)
{
    (void)state;
    const int64_t dims[] = {4, 40, 96, 100}, nq = 80, k = 10;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (int m = 0; m < 2; m++) {
            const int64_t dim = dims[i], n = dim == 96 ? 200000 : 20000;
            const simil_metric metric = m ? SIMIL_METRIC_IP : SIMIL_METRIC_L2;
            float *x = sml_test_malloc(4 * n * dim), *q = sml_test_malloc(4 * nq * dim);
            SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 81 + i, x));
            SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 91 + i, q));
            simil_index *cpu, *gpu;
            /* 128 lists of 1,562 rows on average at 200,000 rows, 156 at 20,000 */
            twin("IVF128,Flat", dim, metric, n, x, &cpu, &gpu);
            two_results r = two_results_alloc(nq * k);
            sml_cuda_ivf_small_max(0);
            sml_cuda_ivf_thin_staged(1);
            search(gpu, nq, q, k, 4, r.da, r.la);
            sml_cuda_ivf_thin_staged(0);
            search(gpu, nq, q, k, 4, r.db, r.lb);
            sml_cuda_ivf_thin_staged(1);
            sml_cuda_ivf_small_max(-1);
            char what[64];
            snprintf(what, sizeof what, "thin staged dim=%lld %s", (long long)dim,
                     simil_metric_name(metric));
            same_bits(what, "staged", "plain", nq, k, &r);
            sml_cuda_ivf_small_max(0);
            compare(what, cpu, gpu, x, n, q, nq, dim, k, 4, metric);
            sml_cuda_ivf_small_max(-1);
            simil_index_destroy(cpu);
            simil_index_destroy(gpu);
            two_results_free(&r);
            free(x);
            free(q);
        }
}

/* Batches of up to 64 queries find their probes on the device and split
 * each query's lists over several blocks (cuda_ivf.cuh, "small batches"):
 * IVF-Flat against the CPU and, bit for bit, against the batch path, with
 * and without a filter; IVF-PQ's fused scan split the same way against its
 * batch path. */
static void test_small_batches(void **state)
{
    (void)state;
    const int64_t n = 20000, dim = 48, nq = 64;
    float *x = sml_test_malloc(4 * n * dim), *q = sml_test_malloc(4 * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 71, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 72, q));
    const int64_t nqs[] = {1, 5, 64}, probes[] = {1, 7, 64}, ks[] = {1, 10, 100};
    unsigned char *allowed = sml_test_random_allowed(n, 10, 73);
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP};
    for (int m = 0; m < 2; m++) {
        simil_index *cpu, *gpu;
        twin("IVF64,Flat", dim, metrics[m], n, x, &cpu, &gpu);
        for (size_t a = 0; a < 3; a++)
            for (size_t b = 0; b < 3; b++)
                for (size_t c = 0; c < 3; c++) {
                    char what[96];
                    snprintf(what, sizeof what, "IVF64,Flat metric %d nq=%lld", (int)metrics[m],
                             (long long)nqs[a]);
                    compare(what, cpu, gpu, x, n, q, nqs[a], dim, ks[c], probes[b], metrics[m]);
                    simil_search_params *p = sml_test_params("");
                    SML_ASSERT_OK(simil_search_params_set_int(p, "nprobe", probes[b]));
                    small_same_as_batch(what, gpu, p, nqs[a], q, ks[c]);
                    simil_search_params_destroy(p);
                }
        /* the small path tests the filter on the labels of the rows it
         * reads, the batch path makes the rows' bitset: as a bitset and as
         * a list (bisection), the same results */
        simil_search_params *bits, *list;
        sml_test_allow_params(allowed, n, "nprobe=7", &bits, &list);
        small_same_as_batch("IVF64,Flat filtered (bitset)", gpu, bits, 5, q, 10);
        small_same_as_batch("IVF64,Flat filtered (list)", gpu, list, 5, q, 10);
        small_same_as_batch("IVF64,Flat filtered (list)", gpu, list, 1, q, 100);
        simil_search_params_destroy(bits);
        simil_search_params_destroy(list);
        simil_index_destroy(cpu);
        simil_index_destroy(gpu);
        twin("IVF32,PQ8", dim, metrics[m], n, x, &cpu, &gpu);
        sml_test_allow_params(allowed, n, "nprobe=9,precomputed_tables=1", &bits, &list);
        small_same_as_batch("IVF32,PQ8 filtered (bitset)", gpu, bits, 5, q, 10);
        small_same_as_batch("IVF32,PQ8 filtered (list)", gpu, list, 1, q, 10);
        small_same_as_batch("IVF32,PQ8 filtered (list)", gpu, list, 64, q, 100);
        simil_search_params_destroy(bits);
        simil_search_params_destroy(list);
        const char *luts[] = {"fp32", "fp16"};
        for (int t = 0; t < 2; t++)
            for (size_t a = 0; a < 3; a++)
                for (size_t c = 0; c < 3; c++) {
                    simil_search_params *p = sml_test_params("nprobe=9,precomputed_tables=1");
                    SML_ASSERT_OK(simil_search_params_set(p, "lut", luts[t]));
                    char what[96];
                    snprintf(what, sizeof what, "IVF32,PQ8 metric %d lut %s", (int)metrics[m],
                             luts[t]);
                    small_same_as_batch(what, gpu, p, nqs[a], q, ks[c]);
                    simil_search_params_destroy(p);
                }
        simil_index_destroy(cpu);
        simil_index_destroy(gpu);
    }
    free(allowed);
    free(x);
    free(q);
}

/* A small batch of at least four queries an SM takes IVF-PQ's fused scan
 * unsplit, which finishes with operations issued directly: with graphs on,
 * what the batch recorded before (the upload, the coarse search) must be
 * issued first.  On most GPUs only a raised ivf_small_max gets there (on one
 * of 16 SMs or fewer, any batch of 64): the same bits with graphs as
 * without, for IVF-PQ and IVF-Flat. */
static void test_replay_unsplit(void **state)
{
    (void)state;
    const int64_t n = 20000, dim = 48, nq = 1024, k = 10;
    float *x = sml_test_malloc(4 * n * dim), *q = sml_test_malloc(4 * 2 * nq * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 105, x));
    SML_ASSERT_OK(simil_generate("mix", 0, 2 * nq, dim, 106, q));
    two_results r = two_results_alloc(nq * k);
    const char *specs[] = {"IVF32,PQ8", "IVF64,Flat"};
    const char *params[] = {"nprobe=9,precomputed_tables=1", "nprobe=7"};
    sml_cuda_ivf_small_max(nq);
    for (int s = 0; s < 2; s++) {
        simil_index *cpu, *gpu;
        twin(specs[s], dim, SIMIL_METRIC_L2, n, x, &cpu, &gpu);
        simil_index_destroy(cpu);
        simil_search_params *p = sml_test_params(params[s]);
        /* twice: the second replays the graph the first made.  Between the
         * reference and the replay, other queries fill the lane's buffers,
         * so that work recorded and never issued shows as their results */
        for (int round = 0; round < 2; round++) {
            sml_cuda_replay(0);
            SML_ASSERT_OK(simil_index_search(gpu, nq, q, k, p, r.da, r.la));
            SML_ASSERT_OK(simil_index_search(gpu, nq, q + nq * dim, k, p, r.db, r.lb));
            sml_cuda_replay(1);
            SML_ASSERT_OK(simil_index_search(gpu, nq, q, k, p, r.db, r.lb));
            char what[64];
            snprintf(what, sizeof what, "%s unsplit, round %d", specs[s], round);
            same_bits(what, "issued", "replayed", nq, k, &r);
        }
        simil_search_params_destroy(p);
        simil_index_destroy(gpu);
    }
    sml_cuda_ivf_small_max(-1);
    sml_cuda_replay(1); /* the default */
    two_results_free(&r);
    free(x);
    free(q);
}

/* Batches past the small path around the coarse kernels' bounds (256
 * queries where the probes go to the host, 512 for IVF-PQ's fused scan,
 * whose probes stay on the device): the same bits as with the general exact
 * search over the centroids, for IVF-PQ fused and IVF-Flat, L2 and IP. */
static void test_coarse_many_bounds(void **state)
{
    (void)state;
    const int64_t n = 20000, dim = 48, most = 600, k = 10;
    const int64_t nqs[] = {256, 300, 512, 513, most};
    float *x = sml_test_malloc(4 * n * dim), *q = sml_test_malloc(4 * most * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 111, x));
    SML_ASSERT_OK(simil_generate("mix", 0, most, dim, 112, q));
    two_results r = two_results_alloc(most * k);
    const char *specs[] = {"IVF32,PQ8", "IVF64,Flat"};
    const char *params[] = {"nprobe=9,precomputed_tables=1", "nprobe=7"};
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP};
    for (int s = 0; s < 2; s++)
        for (int m = 0; m < 2; m++) {
            simil_index *cpu, *gpu;
            twin(specs[s], dim, metrics[m], n, x, &cpu, &gpu);
            simil_index_destroy(cpu);
            simil_search_params *p = sml_test_params(params[s]);
            for (size_t i = 0; i < sizeof nqs / sizeof nqs[0]; i++) {
                SML_ASSERT_OK(simil_index_search(gpu, nqs[i], q, k, p, r.da, r.la));
                sml_cuda_ivf_coarse_many_max(0);
                SML_ASSERT_OK(simil_index_search(gpu, nqs[i], q, k, p, r.db, r.lb));
                sml_cuda_ivf_coarse_many_max(-1);
                char what[64];
                snprintf(what, sizeof what, "%s metric %d", specs[s], (int)metrics[m]);
                same_bits(what, "defaults", "exact-search coarse", nqs[i], k, &r);
            }
            simil_search_params_destroy(p);
            simil_index_destroy(gpu);
        }
    two_results_free(&r);
    free(x);
    free(q);
}

/* Small batches replayed as CUDA graphs (cuda_replay.cuh): every search
 * gets the same bits as with its operations issued one by one, when a
 * graph is reused for new queries of the same shape, made anew for another
 * batch size, k or nprobe, and after an add has grown the lists; and graphs
 * are reused (a record that never matched would make one every call). */
static void test_replay(void **state)
{
    (void)state;
    const int64_t n = 20000, dim = 48, sets = 3, most = 5;
    float *x = sml_test_malloc(4 * 2 * n * dim), *q = sml_test_malloc(4 * sets * most * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, 2 * n, dim, 101, x));
    SML_ASSERT_OK(simil_generate("mix", 0, sets * most, dim, 102, q));
    const char *specs[] = {"IVF64,Flat", "IVF32,PQ8"};
    const char *params[] = {"nprobe=7", "nprobe=9,precomputed_tables=1"};
    const int64_t nqs[] = {1, most}, ks[] = {10, 64};
    two_results r = two_results_alloc(most * 64);
    for (int s = 0; s < 2; s++) {
        simil_index *cpu, *gpu;
        twin(specs[s], dim, SIMIL_METRIC_L2, n, x, &cpu, &gpu);
        simil_index_destroy(cpu);
        simil_search_params *p = sml_test_params(params[s]);
        long long hits0, builds0, direct0, dropped0, hits, builds, direct, dropped;
        sml_cuda_replay_counts(&hits0, &builds0, &direct0, &dropped0);
        for (int grown = 0; grown < 2; grown++) {
            if (grown) SML_ASSERT_OK(simil_index_add(gpu, n, x + n * dim, NULL));
            for (int round = 0; round < 2; round++)
                for (size_t b = 0; b < 2; b++)
                    for (size_t c = 0; c < 2; c++)
                        for (int64_t set = 0; set < sets; set++) {
                            const int64_t nq = nqs[b], k = ks[c];
                            const float *qs = q + set * most * dim;
                            sml_cuda_replay(0);
                            SML_ASSERT_OK(simil_index_search(gpu, nq, qs, k, p, r.da, r.la));
                            sml_cuda_replay(1);
                            SML_ASSERT_OK(simil_index_search(gpu, nq, qs, k, p, r.db, r.lb));
                            char what[96];
                            snprintf(what, sizeof what, "%s grown %d round %d set %lld",
                                     specs[s], grown, round, (long long)set);
                            same_bits(what, "issued", "replayed", nq, k, &r);
                        }
        }
        sml_cuda_replay_counts(&hits, &builds, &direct, &dropped);
        printf("%s: %lld graphs reused, %lld made, %lld batches issued one by one, %lld "
               "dropped\n",
               specs[s], hits - hits0, builds - builds0, direct - direct0, dropped - dropped0);
        /* 48 searches of 4 shapes, 3 query sets in a row each: a graph is
         * made at most once per shape, round and size of the index (the
         * lane's workspace may grow between shapes), and the next two sets
         * reuse it */
        assert_int_equal(direct - direct0, 0);
        assert_int_equal(hits - hits0 + builds - builds0, 48);
        assert_true(builds - builds0 >= 4 && builds - builds0 <= 16);
        assert_true(hits - hits0 >= 32);
        simil_search_params_destroy(p);
        simil_index_destroy(gpu);
    }
    sml_cuda_replay(1); /* the default */
    two_results_free(&r);
    free(x);
    free(q);
}

/* A lane whose buffers grow drops its graphs: a graph whose copy named a
 * freed block would otherwise be replayed where a new block came back at
 * the same address (cuGraphLaunch crashed so on an H200, in
 * test_search_batch with graphs on).  First in main, so that its large
 * batch grows buffers that no earlier test grew. */
static void test_replay_after_growth(void **state)
{
    (void)state;
    const int64_t n = 20000, dim = 48, most = 64, kbig = 128;
    float *x = sml_test_malloc(4 * n * dim), *q = sml_test_malloc(4 * most * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 103, x));
    SML_ASSERT_OK(simil_generate("mix", 0, most, dim, 104, q));
    simil_index *cpu, *gpu;
    twin("IVF256,Flat", dim, SIMIL_METRIC_L2, n, x, &cpu, &gpu);
    simil_index_destroy(cpu);
    simil_search_params *few = sml_test_params("nprobe=4"), *all = sml_test_params("nprobe=256");
    two_results r = two_results_alloc(most * kbig);
    long long hits[4], made[4], direct[4], dropped[4];
    sml_cuda_replay(1);
    sml_cuda_replay_counts(&hits[0], &made[0], &direct[0], &dropped[0]);
    SML_ASSERT_OK(simil_index_search(gpu, 1, q, 10, few, r.db, r.lb));
    SML_ASSERT_OK(simil_index_search(gpu, 1, q, 10, few, r.db, r.lb));
    sml_cuda_replay_counts(&hits[1], &made[1], &direct[1], &dropped[1]);
    assert_int_equal(made[1] - made[0], 1); /* made, */
    assert_int_equal(hits[1] - hits[0], 1); /* then reused */
    /* every buffer of the small path grows */
    SML_ASSERT_OK(simil_index_search(gpu, most, q, kbig, all, r.db, r.lb));
    sml_cuda_replay_counts(&hits[2], &made[2], &direct[2], &dropped[2]);
    printf("after growth: %lld graphs dropped\n", dropped[2] - dropped[1]);
    assert_true(dropped[2] - dropped[1] >= 1);
    SML_ASSERT_OK(simil_index_search(gpu, 1, q, 10, few, r.db, r.lb));
    sml_cuda_replay_counts(&hits[3], &made[3], &direct[3], &dropped[3]);
    assert_int_equal(hits[3], hits[2]); /* the graph from before is gone */
    assert_int_equal(made[3] - made[2], 1);
    sml_cuda_replay(0);
    SML_ASSERT_OK(simil_index_search(gpu, 1, q, 10, few, r.da, r.la));
    sml_cuda_replay(1); /* the default */
    same_bits("after growth", "issued", "replayed", 1, 10, &r);
    simil_search_params_destroy(few);
    simil_search_params_destroy(all);
    simil_index_destroy(gpu);
    two_results_free(&r);
    free(x);
    free(q);
}

/* ---- the coarse selection of small batches ---- */

/* kind 0: distinct keys; 1: keys of 7 values (many ties at the np-th);
 * 2: -0, +0 and NaN among a few values. */
static void check_coarse_select(int64_t nq, int64_t n, int64_t np, int kind, int l2)
{
    float *keys = sml_test_malloc(sizeof(float) * (size_t)(nq * n));
    sml_test_fill_uniform(keys, nq * n, (uint64_t)(n * 31 + np * 7 + kind), -4, 4);
    for (int64_t i = 0; i < nq * n; i++) {
        if (kind == 1) keys[i] = floorf(keys[i]) * 0.5f;
        if (kind == 2) {
            const int v = (int)floorf(keys[i] + 4) % 4;
            keys[i] = v == 0 ? -0.0f : v == 1 ? 0.0f : v == 2 ? NAN : keys[i];
        }
    }
    float *d_keys, *d_dist;
    int64_t *d_probes;
    assert_int_equal(cudaMalloc((void **)&d_keys, sizeof(float) * (size_t)(nq * n)), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&d_dist, sizeof(float) * (size_t)(nq * np)), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&d_probes, sizeof(int64_t) * (size_t)(nq * np)),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(d_keys, keys, sizeof(float) * (size_t)(nq * n),
                                cudaMemcpyHostToDevice),
                     cudaSuccess);
    SML_ASSERT_OK(sml_cuda_coarse_select(nq, n, np, l2, d_keys, d_probes, d_dist));
    float *dist = sml_test_malloc(sizeof(float) * (size_t)(nq * np));
    int64_t *probes = sml_test_malloc(sizeof(int64_t) * (size_t)(nq * np));
    assert_int_equal(cudaMemcpy(dist, d_dist, sizeof(float) * (size_t)(nq * np),
                                cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(probes, d_probes, sizeof(int64_t) * (size_t)(nq * np),
                                cudaMemcpyDeviceToHost),
                     cudaSuccess);
    sml_test_key_pos *row = sml_test_malloc(sizeof *row * (size_t)n);
    for (int64_t q = 0; q < nq; q++) {
        for (int64_t c = 0; c < n; c++) {
            const float k = keys[q * n + c];
            row[c] = (sml_test_key_pos){isnan(k) ? INFINITY : k, c};
        }
        sml_test_sort_key_pos(row, n);
        for (int64_t j = 0; j < np; j++) {
            const float want = l2 ? row[j].key : -row[j].key;
            const float got = dist[q * np + j];
            if (probes[q * np + j] != row[j].pos || memcmp(&got, &want, sizeof got) != 0)
                fail_msg("coarse select nq=%lld n=%lld np=%lld kind %d l2 %d: query %lld "
                         "place %lld: column %lld key %a, the sort: %lld %a",
                         (long long)nq, (long long)n, (long long)np, kind, l2, (long long)q,
                         (long long)j, (long long)probes[q * np + j], got, (long long)row[j].pos,
                         want);
        }
    }
    cudaFree(d_keys);
    cudaFree(d_dist);
    cudaFree(d_probes);
    free(keys);
    free(dist);
    free(probes);
    free(row);
}

static void test_coarse_select(void **state)
{
    (void)state;
    /* rows kept in registers (up to 4,096 keys) and read again per pass */
    const int64_t ns[] = {1, 64, 1000, 4096, 4097, 9000};
    const int64_t nps[] = {1, 16, 100, 256};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof nps / sizeof *nps; b++)
            for (int kind = 0; kind < 3; kind++) {
                if (nps[b] > ns[a]) continue;
                check_coarse_select(3, ns[a], nps[b], kind, (int)((a + b + kind) % 2));
            }
    /* bad arguments */
    assert_int_equal(sml_cuda_coarse_select(1, 10, 11, 1, NULL, NULL, NULL),
                     SIMIL_ERR_INVALID_ARGUMENT);
    assert_int_equal(sml_cuda_coarse_select(1, 1000, 257, 1, NULL, NULL, NULL),
                     SIMIL_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    sml_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_after_growth),
        cmocka_unit_test(test_same_as_cpu),
        cmocka_unit_test(test_many_lists_and_probes),
        cmocka_unit_test(test_remove_readd_files),
        cmocka_unit_test(test_fashion_mnist_recall),
        cmocka_unit_test(test_kmeans_objective_agrees),
        cmocka_unit_test(test_ivf_pq_same_as_cpu),
        cmocka_unit_test(test_ivf_pq_fused_layouts),
        cmocka_unit_test(test_ivf_pq_gpu_encoder_matches_cpu),
        cmocka_unit_test(test_ivf_pq_fashion_56_bytes),
        cmocka_unit_test(test_thin_staged),
        cmocka_unit_test(test_ivf_pq_small_tables),
        cmocka_unit_test(test_small_batches),
        cmocka_unit_test(test_replay),
        cmocka_unit_test(test_replay_unsplit),
        cmocka_unit_test(test_coarse_many_bounds),
        cmocka_unit_test(test_coarse_select),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
