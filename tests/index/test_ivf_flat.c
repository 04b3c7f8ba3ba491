/* test_ivf_flat.c: IVF-Flat on the CPU: exact at nprobe = nlist for every
 * metric, the recall bar on Fashion-MNIST, removal, re-adding, reconstruct,
 * tiny and empty lists, untrained use, and index files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/test_util.h"

static const double rel_tol = 1e-4;

static void test_full_probe_is_exact(void **state)
{
    (void)state;
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};
    const int64_t n = 3000, nq = 40, dim = 24, k = 15;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    float *d = sml_test_malloc(sizeof(float) * nq * k);
    int64_t *l = sml_test_malloc(sizeof(int64_t) * nq * k);
    for (int m = 0; m < 3; m++) {
        SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 3 + m, x));
        SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 7 + m, q));
        simil_index *index = sml_test_trained_index("cpu", "IVF32,Flat", dim, metrics[m], n, x, 1);
        sml_test_search_nprobe(index, nq, q, k, 32, d, l);
        if (metrics[m] == SIMIL_METRIC_COSINE) {
            sml_test_normalize(x, n, dim);
            sml_test_normalize(q, nq, dim);
        }
        char context[64];
        snprintf(context, sizeof context, "IVF32,Flat nprobe=nlist %s", simil_metric_name(metrics[m]));
        sml_test_check_knn(context, x, n, q, nq, dim, k,
                           metrics[m] == SIMIL_METRIC_L2 ? SIMIL_METRIC_L2 : SIMIL_METRIC_IP, d,
                           l, rel_tol);
        /* nprobe above nlist is clamped: the same answer */
        float d2[40 * 15];
        int64_t l2[40 * 15];
        sml_test_search_nprobe(index, nq, metrics[m] == SIMIL_METRIC_COSINE ? q : q, k, 1000, d2,
                               l2);
        if (metrics[m] != SIMIL_METRIC_COSINE) assert_memory_equal(l, l2, sizeof l2);
        simil_index_destroy(index);
    }
    free(x);
    free(q);
    free(d);
    free(l);
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
    SML_ASSERT_OK(simil_matrix_read_float(query_path, 0, 2000, &queries));
    const int64_t k = 10, nq = queries.rows, dim = base.cols;
    simil_index *ivf = sml_test_trained_index("cpu", "IVF1024,Flat", dim, SIMIL_METRIC_L2,
                                              base.rows, base.data, 1);
    simil_index *flat = sml_test_flat_index("cpu", dim, SIMIL_METRIC_L2, base.rows, base.data);
    float *d = sml_test_malloc(sizeof(float) * nq * k), *dt = sml_test_malloc(sizeof(float) * nq * k);
    int64_t *l = sml_test_malloc(sizeof(int64_t) * nq * k);
    int64_t *lt = sml_test_malloc(sizeof(int64_t) * nq * k);
    SML_ASSERT_OK(simil_index_search(flat, nq, queries.data, k, NULL, dt, lt));
    sml_test_search_nprobe(ivf, nq, queries.data, k, 16, d, l);
    double recall = sml_test_recall(l, lt, nq, k, k);
    printf("Fashion-MNIST IVF1024,Flat nprobe=16: recall10@10 %.4f over %lld queries\n", recall,
           (long long)nq);
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

static void test_remove_and_readd(void **state)
{
    (void)state;
    const int64_t n = 2000, dim = 8;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 5, x));
    simil_index *index = sml_test_trained_index("cpu", "IVF16,Flat", dim, SIMIL_METRIC_L2, n, x, 1);
    int64_t *odd = sml_test_malloc(sizeof(int64_t) * n / 2);
    for (int64_t i = 0; i < n / 2; i++) odd[i] = 2 * i + 1;
    int64_t removed;
    SML_ASSERT_OK(simil_index_remove(index, n / 2, odd, &removed));
    assert_int_equal(removed, n / 2);
    assert_int_equal(simil_index_size(index), n / 2);
    float d[50];
    int64_t l[50];
    for (int64_t i = 0; i < n; i += 37) {
        sml_test_search_nprobe(index, 1, x + i * dim, 50, 16, d, l);
        for (int j = 0; j < 50; j++) assert_true(l[j] % 2 == 0);
        if (i % 2 == 0) assert_int_equal(l[0], i);
    }
    float v[8];
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_reconstruct(index, 3, v));
    SML_ASSERT_OK(simil_index_reconstruct(index, 4, v));
    assert_memory_equal(v, x + 4 * dim, sizeof v);
    /* re-adding a removed id, and more growth of the lists */
    int64_t id = 3;
    SML_ASSERT_OK(simil_index_add(index, 1, x + 3 * dim, &id));
    sml_test_search_nprobe(index, 1, x + 3 * dim, 1, 16, d, l);
    assert_int_equal(l[0], 3);
    SML_ASSERT_OK(simil_index_add(index, n, x, NULL)); /* ids n..2n-1 */
    assert_int_equal(simil_index_size(index), n / 2 + 1 + n);
    sml_test_search_nprobe(index, 1, x + 10 * dim, 2, 16, d, l);
    assert_true((l[0] == 10 && l[1] == n + 10) || (l[0] == n + 10 && l[1] == 10));
    simil_index_destroy(index);
    free(odd);
    free(x);
}

static void test_small_and_empty_lists(void **state)
{
    (void)state;
    /* 60 vectors in 50 lists: most lists hold 0 or 1 vector */
    const int64_t n = 60, dim = 5, nq = 10, k = 70;
    float x[60 * 5], d[10 * 70];
    int64_t l[10 * 70];
    sml_test_fill_uniform(x, n * dim, 9, -1, 1);
    simil_index *index = sml_test_trained_index("cpu", "IVF50,Flat", dim, SIMIL_METRIC_L2, n, x, 1);
    sml_test_search_nprobe(index, nq, x, k, 50, d, l);
    sml_test_check_knn("IVF50 on 60 vectors", x, n, x, nq, dim, k, SIMIL_METRIC_L2, d, l, rel_tol);
    sml_test_search_nprobe(index, nq, x, 3, 1, d, l); /* one probe: the vector itself comes first */
    for (int i = 0; i < nq; i++) assert_int_equal(l[i * 3], i);
    simil_index_destroy(index);
}

static void test_untrained_and_bad(void **state)
{
    (void)state;
    float x[40];
    sml_test_fill_uniform(x, 40, 1, 0, 1);
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, 4, "IVF8,Flat", SIMIL_METRIC_L2, "cpu"));
    float d[2];
    int64_t l[2];
    SML_ASSERT_STATUS(SIMIL_ERR_NOT_TRAINED, simil_index_add(index, 10, x, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_NOT_TRAINED, simil_index_search(index, 1, x, 2, NULL, d, l));
    /* nlist above n: a clear error, and the index stays untrained */
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_train(index, 5, x));
    assert_non_null(strstr(simil_last_error(), "at least 8 training vectors"));
    assert_false(simil_index_is_trained(index));
    /* an untrained index saves and loads */
    const char *path = sml_test_path("untrained.simil");
    SML_ASSERT_OK(simil_index_save(index, path));
    simil_index *loaded;
    SML_ASSERT_OK(simil_index_load(&loaded, path, "cpu"));
    assert_false(simil_index_is_trained(loaded));
    assert_string_equal(simil_index_description(loaded), "IVF8,Flat");
    SML_ASSERT_OK(simil_index_train(loaded, 10, x));
    simil_index_destroy(loaded);
    simil_index_destroy(index);
}

static void test_files(void **state)
{
    (void)state;
    const int64_t n = 1500, dim = 12, nq = 20, k = 7;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 13, x));
    simil_index *index = sml_test_trained_index("cpu", "IVF20,Flat", dim, SIMIL_METRIC_IP, n, x, 1);
    int64_t gone[3] = {1, 2, 3};
    SML_ASSERT_OK(simil_index_remove(index, 3, gone, NULL));
    const char *path = sml_test_path("ivf.simil");
    SML_ASSERT_OK(simil_index_save(index, path));
    simil_index *loaded;
    SML_ASSERT_OK(simil_index_load(&loaded, path, "cpu"));
    assert_int_equal(simil_index_size(loaded), n - 3);
    float d1[20 * 7], d2[20 * 7];
    int64_t l1[20 * 7], l2[20 * 7];
    sml_test_search_nprobe(index, nq, x, k, 4, d1, l1);
    sml_test_search_nprobe(loaded, nq, x, k, 4, d2, l2);
    assert_memory_equal(l1, l2, sizeof l1);
    assert_memory_equal(d1, d2, sizeof d1);
    /* every cut of the file is refused cleanly */
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = sml_test_malloc((size_t)size);
    assert_int_equal(fread(bytes, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    const char *bad = sml_test_path("cut.simil");
    for (long cut = 0; cut < size; cut += 97) {
        FILE *o = fopen(bad, "wb");
        fwrite(bytes, 1, (size_t)cut, o);
        fclose(o);
        simil_index *broken;
        simil_status s = simil_index_load(&broken, bad, "cpu");
        if (s != SIMIL_ERR_CORRUPT) fail_msg("cut at %ld of %ld: %s", cut, size, simil_status_name(s));
    }
    free(bytes);
    simil_index_destroy(loaded);
    simil_index_destroy(index);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_probe_is_exact),
        cmocka_unit_test(test_fashion_mnist_recall),
        cmocka_unit_test(test_remove_and_readd),
        cmocka_unit_test(test_small_and_empty_lists),
        cmocka_unit_test(test_untrained_and_bad),
        cmocka_unit_test(test_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
