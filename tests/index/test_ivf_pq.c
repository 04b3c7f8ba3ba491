/* test_ivf_pq.c: product quantization and IVF-PQ on the CPU: PQ beats
 * k-means at the same bits, returned distances are the asymmetric distances
 * to the reconstructed vectors (float64 reference), precomputed and residual
 * tables agree, recall floors on mix data and Fashion-MNIST, the same
 * training on 1 and 2 threads, ids, remove, and index files. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/test_util.h"

static void search(const simil_index *index, int64_t nq, const float *q, int64_t k,
                   int64_t nprobe, int precomputed, float *d, int64_t *l)
{
    simil_search_params *p = sml_test_params("");
    SML_ASSERT_OK(simil_search_params_set_int(p, "nprobe", nprobe));
    SML_ASSERT_OK(simil_search_params_set_int(p, "precomputed_tables", precomputed));
    SML_ASSERT_OK(simil_index_search(index, nq, q, k, p, d, l));
    simil_search_params_destroy(p);
}

static double recall_vs_exact(const float *x, int64_t n, const float *q, int64_t nq,
                              int64_t dim, const int64_t *l, int64_t k, int one_at_k)
{
    simil_index *flat = sml_test_flat_index("cpu", dim, SIMIL_METRIC_L2, n, x);
    float *d = sml_test_malloc(4 * nq * k);
    int64_t *t = sml_test_malloc(8 * nq * k);
    SML_ASSERT_OK(simil_index_search(flat, nq, q, k, NULL, d, t));
    const double recall = sml_test_recall(l, t, nq, k, one_at_k ? 1 : k);
    simil_index_destroy(flat);
    free(d);
    free(t);
    return recall;
}

static void test_pq_beats_kmeans(void **state)
{
    (void)state;
    /* PQ4x8 (4 sub-quantizers of 256) against k-means with 256 centroids on
     * whole vectors: the same 8 bits per sub-space, four times the code */
    const int64_t n = 6000, dim = 16;
    float *x = sml_test_malloc(4 * n * dim), *rec = sml_test_malloc(4 * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 3, x));
    simil_index *pq = sml_test_trained_index("cpu", "PQ4x8", dim, SIMIL_METRIC_L2, n, x, 0);
    double err_pq = 0;
    for (int64_t i = 0; i < n; i++) {
        SML_ASSERT_OK(simil_index_reconstruct(pq, i, rec));
        err_pq += sml_test_distance(x + i * dim, rec, dim, SIMIL_METRIC_L2);
    }
    simil_kmeans_params p;
    simil_kmeans_params_init(&p);
    p.k = 256;
    p.device = "cpu";
    p.iterations = 25;
    p.max_points_per_centroid = 0;
    double obj[25];
    float *c = sml_test_malloc(4 * 256 * dim);
    SML_ASSERT_OK(simil_kmeans(&p, n, dim, x, c, NULL, obj));
    printf("reconstruction error: PQ4x8 %.4g, k-means(256) %.4g\n", err_pq / n, obj[24] / n);
    assert_true(err_pq < obj[24]);
    simil_index_destroy(pq);
    free(x);
    free(rec);
    free(c);
}

/* Returned distances against float64 distances to the reconstructed vectors. */
static void check_asymmetric(const simil_index *index, const float *q, int64_t nq, int64_t dim,
                             int64_t k, const float *d, const int64_t *l, simil_metric metric)
{
    float *rec = sml_test_malloc(4 * dim);
    for (int64_t i = 0; i < nq; i++)
        for (int64_t j = 0; j < k; j++) {
            if (l[i * k + j] < 0) continue;
            SML_ASSERT_OK(simil_index_reconstruct(index, l[i * k + j], rec));
            double want = sml_test_distance(q + i * dim, rec, dim, metric);
            double got = d[i * k + j];
            double scale = sqrt(sml_test_distance(q + i * dim, q + i * dim, dim, SIMIL_METRIC_IP) *
                                sml_test_distance(rec, rec, dim, SIMIL_METRIC_IP));
            if (fabs(got - want) > 1e-4 * (fabs(want) + scale))
                fail_msg("query %lld rank %lld id %lld: distance %.7g, asymmetric %.7g",
                         (long long)i, (long long)j, (long long)l[i * k + j], got, want);
        }
    free(rec);
}

static void test_asymmetric_distances(void **state)
{
    (void)state;
    const int64_t n = 8000, nq = 30, dim = 24, k = 10;
    float *x = sml_test_malloc(4 * n * dim), *q = sml_test_malloc(4 * nq * dim);
    float d1[300], d2[300];
    int64_t l1[300], l2[300];
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 5, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 6, q));
    const char *descs[] = {"IVF16,PQ8", "IVF16,PQ6x6", "IVF16,PQ12x4", "PQ4"};
    for (int di = 0; di < 4; di++) {
        simil_index *index =
            sml_test_trained_index("cpu", descs[di], dim, SIMIL_METRIC_L2, n, x, 0);
        search(index, nq, q, k, 4, 1, d1, l1);
        search(index, nq, q, k, 4, 0, d2, l2);
        check_asymmetric(index, q, nq, dim, k, d1, l1, SIMIL_METRIC_L2);
        check_asymmetric(index, q, nq, dim, k, d2, l2, SIMIL_METRIC_L2);
        /* precomputed and residual tables: the same ranking */
        for (int i = 0; i < 300; i++)
            if (l1[i] != l2[i] && fabs(d1[i] - d2[i]) > 1e-3 * fabs(d1[i]))
                fail_msg("%s rank %d: precomputed %lld (%g), residual %lld (%g)", descs[di], i,
                         (long long)l1[i], d1[i], (long long)l2[i], d2[i]);
        simil_index_destroy(index);
    }
    simil_index *ip = sml_test_trained_index("cpu", "IVF16,PQ8", dim, SIMIL_METRIC_IP, n, x, 0);
    search(ip, nq, q, k, 4, 1, d1, l1);
    check_asymmetric(ip, q, nq, dim, k, d1, l1, SIMIL_METRIC_IP);
    simil_index_destroy(ip);
    free(x);
    free(q);
}

static void test_recall_mix(void **state)
{
    (void)state;
    const int64_t n = 20000, nq = 200, dim = 32, k = 10;
    float *x = sml_test_malloc(4 * n * dim), *q = sml_test_malloc(4 * nq * dim);
    float *d = sml_test_malloc(4 * nq * k);
    int64_t *l = sml_test_malloc(8 * nq * k);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 11, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 12, q));
    simil_index *index = sml_test_trained_index("cpu", "IVF64,PQ8", dim, SIMIL_METRIC_L2, n, x, 0);
    search(index, nq, q, k, 16, 1, d, l);
    double r1 = recall_vs_exact(x, n, q, nq, dim, l, k, 1);
    printf("mix 20k x 32 IVF64,PQ8 nprobe=16: 1-recall@10 %.3f\n", r1);
    assert_true(r1 >= 0.95); /* measured 0.99 */
    simil_index_destroy(index);
    free(x);
    free(q);
    free(d);
    free(l);
}

static void test_recall_fashion(void **state)
{
    (void)state;
    const char *bp = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
    const char *qp = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
    struct stat st;
    if (stat(bp, &st) != 0) skip();
    simil_matrix b, q;
    SML_ASSERT_OK(simil_matrix_read_float(bp, 0, -1, &b));
    SML_ASSERT_OK(simil_matrix_read_float(qp, 0, 500, &q));
    const int64_t k = 10;
    simil_index *index =
        sml_test_trained_index("cpu", "IVF256,PQ16", b.cols, SIMIL_METRIC_L2, b.rows, b.data, 0);
    float *d = sml_test_malloc(4 * q.rows * k);
    int64_t *l = sml_test_malloc(8 * q.rows * k);
    search(index, q.rows, q.data, k, 16, 1, d, l);
    double r = recall_vs_exact(b.data, b.rows, q.data, q.rows, b.cols, l, k, 0);
    printf("Fashion-MNIST IVF256,PQ16 nprobe=16: recall10@10 %.3f (Faiss GPU: 0.569)\n", r);
    assert_true(r >= 0.55); /* measured 0.58 on 500 queries */
    simil_index_destroy(index);
    simil_matrix_free(&b);
    simil_matrix_free(&q);
    free(d);
    free(l);
}

static void test_ids_remove_files(void **state)
{
    (void)state;
    const int64_t n = 3000, dim = 16, k = 5;
    float *x = sml_test_malloc(4 * n * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 21, x));
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, dim, "IVF8,PQ4", SIMIL_METRIC_L2, "cpu"));
    float d[50];
    int64_t l[50];
    SML_ASSERT_STATUS(SIMIL_ERR_NOT_TRAINED, simil_index_add(index, n, x, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_train(index, 100, x));
    assert_non_null(strstr(simil_last_error(), "256"));
    SML_ASSERT_OK(simil_index_train(index, n, x));
    int64_t *ids = sml_test_malloc(8 * n);
    for (int64_t i = 0; i < n; i++) ids[i] = 7 * i;
    SML_ASSERT_OK(simil_index_add(index, n, x, ids));
    int64_t gone[2] = {0, 7};
    int64_t removed;
    SML_ASSERT_OK(simil_index_remove(index, 2, gone, &removed));
    assert_int_equal(removed, 2);
    search(index, 10, x, k, 8, 1, d, l);
    for (int i = 0; i < 50; i++) assert_true(l[i] != 0 && l[i] != 7 && l[i] % 7 == 0);
    const char *path = sml_test_path("ivfpq.simil");
    SML_ASSERT_OK(simil_index_save(index, path));
    simil_index *loaded;
    SML_ASSERT_OK(simil_index_load(&loaded, path, "cpu"));
    float d2[50];
    int64_t l2[50];
    search(loaded, 10, x, k, 8, 1, d2, l2);
    assert_memory_equal(l, l2, sizeof l);
    assert_memory_equal(d, d2, sizeof d);
    /* files hold codes alone: the term 1 of L2 rows is rebuilt on load, so an
     * L2 file is as large as an inner-product one of the same shape */
    simil_index *ip;
    SML_ASSERT_OK(simil_index_create(&ip, dim, "IVF8,PQ4", SIMIL_METRIC_IP, "cpu"));
    SML_ASSERT_OK(simil_index_train(ip, n, x));
    SML_ASSERT_OK(simil_index_add(ip, n - 2, x, NULL));
    const char *ip_path = sml_test_path("ivfpq-ip.simil");
    SML_ASSERT_OK(simil_index_save(ip, ip_path));
    struct stat st_l2, st_ip;
    assert_int_equal(stat(path, &st_l2), 0);
    assert_int_equal(stat(ip_path, &st_ip), 0);
    assert_int_equal(st_l2.st_size, st_ip.st_size);
    simil_index_destroy(ip);
    simil_index_destroy(loaded);
    simil_index_destroy(index);
    free(ids);
    free(x);
}

/* A file whose codes of fewer than 8 bits point past their codebook (here a
 * code byte of 200 for 5-bit codes) is refused as damaged when term 1 is
 * rebuilt on load, before anything reads past the codebook. */
/* A code byte past a codebook of fewer than 8 bits (a damaged or crafted
 * file) is refused at load, for L2 (where term 1 is rebuilt from the codes)
 * and IP alike: a scan would read past its lookup table. */
static void test_code_past_codebook(void **state)
{
    (void)state;
    const int64_t n = 2000, dim = 16;
    float *x = sml_test_malloc(4 * n * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 23, x));
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP};
    for (int mi = 0; mi < 2; mi++) {
        simil_index *index =
            sml_test_trained_index("cpu", "IVF4,PQ4x5", dim, metrics[mi], n, x, 0);
        const char *path = sml_test_path("ivfpq-bad-code.simil");
        SML_ASSERT_OK(simil_index_save(index, path));
        simil_index_destroy(index);
        FILE *f = fopen(path, "r+b");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        const long size = ftell(f);
        unsigned char *bytes = sml_test_malloc((size_t)size);
        rewind(f);
        assert_int_equal(fread(bytes, 1, (size_t)size, f), (size_t)size);
        long lcod = -1;
        for (long i = 0; i + 4 <= size && lcod < 0; i++)
            if (memcmp(bytes + i, "LCOD", 4) == 0) lcod = i;
        assert_true(lcod >= 0);
        /* the section header is 24 bytes; its payload starts with the first code */
        fseek(f, lcod + 24, SEEK_SET);
        assert_int_equal(fputc(200, f), 200);
        fclose(f);
        simil_index *loaded = (simil_index *)0x1;
        SML_ASSERT_STATUS(SIMIL_ERR_CORRUPT, simil_index_load(&loaded, path, "cpu"));
        assert_non_null(strstr(simil_last_error(), "past its codebook"));
        assert_null(loaded);
        free(bytes);
    }
    free(x);
}

static double reconstruction_error(const simil_index *index, const float *x, int64_t n,
                                   int64_t dim)
{
    float *rec = sml_test_malloc(4 * dim);
    double err = 0;
    for (int64_t i = 0; i < n; i++) {
        SML_ASSERT_OK(simil_index_reconstruct(index, i, rec));
        err += sml_test_distance(x + i * dim, rec, dim, SIMIL_METRIC_L2);
    }
    free(rec);
    return err / (double)n;
}

static void test_opq_lowers_the_error(void **state)
{
    (void)state;
    /* correlated components: OPQ's rotation spreads them across sub-spaces */
    const int64_t n = 5000, dim = 16;
    float *x = sml_test_malloc(4 * n * dim), *z = sml_test_malloc(4 * n * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 31, z));
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < dim; j++)
            x[i * dim + j] = z[i * dim + j] + (j < 8 ? 3.0f * z[i * dim] : 0.0f);
    simil_index *pq = sml_test_trained_index("cpu", "PQ4", dim, SIMIL_METRIC_L2, n, x, 0);
    simil_index *opq = sml_test_trained_index("cpu", "OPQ4,PQ4", dim, SIMIL_METRIC_L2, n, x, 0);
    double e_pq = reconstruction_error(pq, x, n, dim), e_opq = reconstruction_error(opq, x, n, dim);
    printf("reconstruction error: PQ4 %.4g, OPQ4,PQ4 %.4g\n", e_pq, e_opq);
    assert_true(e_opq < e_pq);
    /* saved and loaded, the rotation comes back */
    const char *path = sml_test_path("opq.simil");
    SML_ASSERT_OK(simil_index_save(opq, path));
    simil_index *loaded;
    SML_ASSERT_OK(simil_index_load(&loaded, path, "cpu"));
    assert_string_equal(simil_index_description(loaded), "OPQ4_16,PQ4x8");
    assert_true(fabs(reconstruction_error(loaded, x, n, dim) - e_opq) < 1e-6 * e_opq);
    simil_index_destroy(loaded);
    simil_index_destroy(pq);
    simil_index_destroy(opq);
    free(x);
    free(z);
}

/* Every vector's reconstruction from an index trained on 1 thread and on 2:
 * sub-quantizers train side by side on the CPU, each k-means alone on its
 * thread, and must give the codebooks a sequential training gives.  Shapes
 * cover short sub-vectors (cpu_nearest.c), wide ones (GEMM), and OPQ, whose
 * products of large matrices go through OpenBLAS (core/blas.h,
 * sml_sgemm_rows). */
static void test_training_is_the_same_on_any_thread_count(void **state)
{
    (void)state;
    const int64_t n = 3000, dim = 96;
    const char *descs[] = {"IVF4,PQ12", "IVF4,PQ2", "OPQ4,PQ4"};
    float *x = sml_test_malloc(4 * n * dim), *a = sml_test_malloc(4 * dim),
          *b = sml_test_malloc(4 * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 41, x));
    const int before = omp_get_max_threads();
    for (size_t d = 0; d < sizeof descs / sizeof descs[0]; d++) {
        omp_set_num_threads(1);
        simil_index *one = sml_test_trained_index("cpu", descs[d], dim, SIMIL_METRIC_L2, n, x, 0);
        omp_set_num_threads(2);
        simil_index *two = sml_test_trained_index("cpu", descs[d], dim, SIMIL_METRIC_L2, n, x, 0);
        omp_set_num_threads(before);
        for (int64_t i = 0; i < n; i++) {
            SML_ASSERT_OK(simil_index_reconstruct(one, i, a));
            SML_ASSERT_OK(simil_index_reconstruct(two, i, b));
            if (memcmp(a, b, 4 * dim) != 0)
                fail_msg("%s (seed 41, %lld x %lld): vector %lld differs between 1 and 2 "
                         "threads",
                         descs[d], (long long)n, (long long)dim, (long long)i);
        }
        simil_index_destroy(one);
        simil_index_destroy(two);
    }
    free(x);
    free(a);
    free(b);
}

static void test_refine_gives_exact_distances(void **state)
{
    (void)state;
    const int64_t n = 6000, nq = 40, dim = 32, k = 10;
    float *x = sml_test_malloc(4 * n * dim), *q = sml_test_malloc(4 * nq * dim);
    float *d = sml_test_malloc(4 * nq * k);
    int64_t *l = sml_test_malloc(8 * nq * k);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 41, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 42, q));
    simil_index *plain = sml_test_trained_index("cpu", "IVF16,PQ4", dim, SIMIL_METRIC_L2, n, x, 0);
    simil_index *refined =
        sml_test_trained_index("cpu", "IVF16,PQ4,Refine", dim, SIMIL_METRIC_L2, n, x, 0);
    search(plain, nq, q, k, 16, 1, d, l);
    double r_plain = recall_vs_exact(x, n, q, nq, dim, l, k, 0);
    simil_search_params *p = sml_test_params("nprobe=16,refine_factor=10");
    SML_ASSERT_OK(simil_index_search(refined, nq, q, k, p, d, l));
    double r_refined = recall_vs_exact(x, n, q, nq, dim, l, k, 0);
    printf("recall10@10: IVF16,PQ4 %.3f, with Refine (x10) %.3f\n", r_plain, r_refined);
    assert_true(r_refined > r_plain);
    assert_true(r_refined >= 0.9);
    for (int64_t i = 0; i < nq * k; i++) {
        double want = sml_test_distance(q + (i / k) * dim, x + l[i] * dim, dim, SIMIL_METRIC_L2);
        assert_true(fabs(d[i] - want) <= 1e-5 * want + 1e-6);
    }
    /* remove, reconstruct, files */
    int64_t gone[1] = {l[0]};
    SML_ASSERT_OK(simil_index_remove(refined, 1, gone, NULL));
    SML_ASSERT_OK(simil_index_search(refined, 1, q, k, p, d, l));
    for (int j = 0; j < k; j++) assert_true(l[j] != gone[0]);
    float v[32];
    SML_ASSERT_OK(simil_index_reconstruct(refined, 5, v));
    assert_memory_equal(v, x + 5 * dim, sizeof v);
    const char *path = sml_test_path("refine.simil");
    SML_ASSERT_OK(simil_index_save(refined, path));
    simil_index *loaded;
    SML_ASSERT_OK(simil_index_load(&loaded, path, "cpu"));
    float d2[10];
    int64_t l2[10];
    SML_ASSERT_OK(simil_index_search(loaded, 1, q, k, p, d2, l2));
    assert_memory_equal(l, l2, sizeof l2);
    simil_index_destroy(loaded);
    simil_index_destroy(plain);
    simil_index_destroy(refined);
    simil_search_params_destroy(p);
    free(x);
    free(q);
    free(d);
    free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pq_beats_kmeans),
        cmocka_unit_test(test_asymmetric_distances),
        cmocka_unit_test(test_recall_mix),
        cmocka_unit_test(test_recall_fashion),
        cmocka_unit_test(test_training_is_the_same_on_any_thread_count),
        cmocka_unit_test(test_ids_remove_files),
        cmocka_unit_test(test_code_past_codebook),
        cmocka_unit_test(test_opq_lowers_the_error),
        cmocka_unit_test(test_refine_gives_exact_distances),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
