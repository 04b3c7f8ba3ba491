/* test_sq.c: scalar quantizers on the CPU: the element codes against known
 * values, every type and metric exact over its decoded vectors (flat, and
 * IVF at nprobe = nlist), recall against Flat, save and load, removal, and
 * bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/sq.h"
#include "cpu/cpu_sq.h"
#include "util/test_util.h"

static const char *const types[] = {"SQ8", "SQfp16", "SQbf16"};
static const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};

static void test_element_codes(void **state)
{
    (void)state;
    /* fp16: exact values, rounding to nearest even, subnormals, overflow */
    assert_int_equal(sml_sq_fp16_encode(1.0f), 0x3c00);
    assert_int_equal(sml_sq_fp16_encode(-2.0f), 0xc000);
    assert_int_equal(sml_sq_fp16_encode(65504.0f), 0x7bff);
    assert_int_equal(sml_sq_fp16_encode(65520.0f), 0x7c00);
    assert_int_equal(sml_sq_fp16_encode(0.1f), 0x2e66);
    assert_int_equal(sml_sq_fp16_encode(1.0f + 1.0f / 2048), 0x3c00);      /* tie: even */
    assert_int_equal(sml_sq_fp16_encode(1.0f + 3.0f / 2048), 0x3c02);      /* tie: even */
    assert_int_equal(sml_sq_fp16_encode(5.9604644775390625e-8f), 0x0001);  /* 2^-24 */
    assert_int_equal(sml_sq_fp16_encode(2.9802322387695312e-8f), 0x0000);  /* tie to 0 */
    assert_int_equal(sml_sq_fp16_encode(6.103515625e-05f), 0x0400);        /* 2^-14 */
    for (uint32_t h = 0; h < 0x7c00; h++) {  /* every finite half round-trips */
        const float f = sml_sq_fp16_decode((uint16_t)h);
        assert_int_equal(sml_sq_fp16_encode(f), h);
        assert_int_equal(sml_sq_fp16_encode(-f), h | 0x8000);
    }
    assert_true(sml_sq_fp16_decode(0x3555) > 0.333f && sml_sq_fp16_decode(0x3555) < 0.3334f);
    /* bf16: the top half of the float, rounded to nearest even */
    assert_int_equal(sml_sq_bf16_encode(1.0f), 0x3f80);
    assert_int_equal(sml_sq_bf16_encode(-3.0f), 0xc040);
    assert_true(sml_sq_bf16_decode(sml_sq_bf16_encode(3.14159f)) == 3.140625f);
    /* SQ8: floor(255 t), decoded at the middle of the step */
    assert_int_equal(sml_sq8_encode(-1.0f, 0.0f, 2.0f), 0);
    assert_int_equal(sml_sq8_encode(2.5f, 0.0f, 2.0f), 255);
    assert_int_equal(sml_sq8_encode(1.0f, 0.0f, 2.0f), 127);
    assert_true(fabsf(sml_sq8_decode(127, 0.0f, 2.0f) - 255.0f / 255.0f) < 1e-6f);
    assert_int_equal(sml_sq8_encode(5.0f, 5.0f, 0.0f), 0);  /* a constant dimension */
}

/* Results are the exact k-NN of the queries among the decoded vectors
 * (reconstruct), for every type, metric, flat and IVF at nprobe = nlist. */
/* The CPU scan's row sums, AVX-512 (where present) and portable, against a
 * double-precision sum over the decoded components, at lengths around the
 * 16-wide steps. */
static void test_row_sums(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 3, 15, 16, 17, 36, 96, 784};
    enum { MAXD = 784 };
    float w[MAXD], st[MAXD], x[MAXD], buf[MAXD];
    uint8_t code8[MAXD], code16[2 * MAXD];
    uint64_t r = 99;
    for (size_t c = 0; c < sizeof dims / sizeof dims[0]; c++) {
        const int64_t dim = dims[c];
        for (int64_t j = 0; j < dim; j++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            w[j] = (float)((int64_t)(r >> 40) % 2001 - 1000) / 700.0f;
            st[j] = (float)((r >> 20) % 1000 + 1) / 50000.0f;
            x[j] = (float)((int64_t)(r >> 8) % 4001 - 2000) / 1300.0f;
            code8[j] = (uint8_t)(r >> 56);
        }
        for (int type = 0; type < 3; type++) {
            for (int l2 = 0; l2 < 2; l2++) {
                double ref = 0, mag = 0;
                if (type == 0) {
                    for (int64_t j = 0; j < dim; j++) {
                        const double t = l2 ? w[j] - (double)st[j] * code8[j] : w[j] * (double)code8[j];
                        ref += l2 ? t * t : t;
                        mag += l2 ? t * t : fabs(t);
                    }
                } else {
                    const sml_sq_type t16 = type == 1 ? SML_SQ_FP16 : SML_SQ_BF16;
                    for (int64_t j = 0; j < dim; j++) {
                        const uint16_t h = t16 == SML_SQ_FP16 ? sml_sq_fp16_encode(w[j])
                                                              : sml_sq_bf16_encode(w[j]);
                        memcpy(code16 + 2 * j, &h, 2);
                        const double y = sml_sq_decode(t16, code16, j, NULL, NULL);
                        const double t = l2 ? x[j] - y : x[j] * y;
                        ref += l2 ? t * t : t;
                        mag += l2 ? t * t : fabs(t);
                    }
                }
                const sml_sq_impl impls[] = {SML_SQ_IMPL_AUTO, SML_SQ_IMPL_PORTABLE};
                for (int i = 0; i < 2; i++) {
                    const float got =
                        type == 0 ? sml_cpu_sq8_row(impls[i], l2, w, st, code8, dim)
                                  : sml_cpu_sq16_row(impls[i], type == 1 ? SML_SQ_FP16 : SML_SQ_BF16,
                                                     l2, x, code16, dim, buf);
                    if (fabs(got - ref) > 1e-5 * mag + 1e-30)
                        fail_msg("%s %s dim=%lld impl=%d: %.9g, reference %.9g",
                                 type == 0 ? "SQ8" : type == 1 ? "SQfp16" : "SQbf16",
                                 l2 ? "L2" : "IP", (long long)dim, i, got, ref);
                }
            }
        }
    }
}

static void test_exact_over_decoded(void **state)
{
    (void)state;
    const int64_t n = 2000, nq = 30, dim = 20, k = 12;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    float *rec = sml_test_malloc(sizeof(float) * n * dim);
    float *d = sml_test_malloc(sizeof(float) * nq * k);
    int64_t *l = sml_test_malloc(sizeof(int64_t) * nq * k);
    for (int ivf = 0; ivf < 2; ivf++) {
        for (int t = 0; t < 3; t++) {
            for (int m = 0; m < 3; m++) {
                SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 11 + m, x));
                SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 17 + m, q));
                char desc[32];
                snprintf(desc, sizeof desc, "%s%s", ivf ? "IVF16," : "", types[t]);
                simil_index *index = sml_test_trained_index("cpu", desc, dim, metrics[m], n, x, 0);
                sml_test_search_nprobe(index, nq, q, k, 16, d, l);
                for (int64_t i = 0; i < n; i++)
                    SML_ASSERT_OK(simil_index_reconstruct(index, i, rec + i * dim));
                if (metrics[m] == SIMIL_METRIC_COSINE) sml_test_normalize(q, nq, dim);
                char context[96];
                snprintf(context, sizeof context, "%s %s n=%lld dim=%lld seed=%d", desc,
                         simil_metric_name(metrics[m]), (long long)n, (long long)dim, 11 + m);
                sml_test_check_knn(context, rec, n, q, nq, dim, k,
                                   metrics[m] == SIMIL_METRIC_L2 ? SIMIL_METRIC_L2
                                                                 : SIMIL_METRIC_IP,
                                   d, l, 1e-3);
                simil_index_destroy(index);
            }
        }
    }
    free(x);
    free(q);
    free(rec);
    free(d);
    free(l);
}

/* Decoded vectors are close to the originals: SQ8 within a step of its
 * range per component, the half types within their relative precision. */
static void test_reconstruction_error(void **state)
{
    (void)state;
    const int64_t n = 1000, dim = 16;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float rec[16];
    sml_test_fill_uniform(x, n * dim, 5, -3.0f, 3.0f);
    const double tol[] = {6.0 / 255, 6.0 / 1024, 6.0 / 128};  /* range/255; 2^-10, 2^-7 of 6 */
    for (int ivf = 0; ivf < 2; ivf++) {
        for (int t = 0; t < 3; t++) {
            char desc[32];
            snprintf(desc, sizeof desc, "%s%s", ivf ? "IVF8," : "", types[t]);
            simil_index *index = sml_test_trained_index("cpu", desc, dim, SIMIL_METRIC_L2, n, x, 0);
            for (int64_t i = 0; i < n; i++) {
                SML_ASSERT_OK(simil_index_reconstruct(index, i, rec));
                for (int64_t j = 0; j < dim; j++) {
                    if (fabs(rec[j] - x[i * dim + j]) > tol[t]) {
                        fail_msg("%s: row %lld dim %lld: %g decodes to %g (tolerance %g)", desc,
                                 (long long)i, (long long)j, x[i * dim + j], rec[j], tol[t]);
                    }
                }
            }
            simil_index_destroy(index);
        }
    }
    free(x);
}

/* recall 10@10 against the exact search (Flat): fp16 and bf16 barely move
 * it, SQ8 a little; IVF-SQ8 follows IVF-Flat at the same nprobe. */
static void test_recall(void **state)
{
    (void)state;
    const int64_t n = 20000, nq = 200, dim = 32, k = 10;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    float *d = sml_test_malloc(sizeof(float) * nq * k);
    int64_t *truth = sml_test_malloc(sizeof(int64_t) * nq * k);
    int64_t *l = sml_test_malloc(sizeof(int64_t) * nq * k);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 1, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 2, q));
    simil_index *flat = sml_test_trained_index("cpu", "Flat", dim, SIMIL_METRIC_L2, n, x, 0);
    sml_test_search_nprobe(flat, nq, q, k, 1, d, truth);
    simil_index_destroy(flat);
    const struct {
        const char *desc;
        int64_t nprobe;
        double bar;
    } cases[] = {{"SQfp16", 1, 0.99}, {"SQbf16", 1, 0.99}, {"SQ8", 1, 0.97},
                 {"IVF64,SQ8", 64, 0.98}, {"IVF64,SQfp16", 64, 0.99}, {"SQ8,Refine", 1, 0.999}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        simil_index *index =
            sml_test_trained_index("cpu", cases[c].desc, dim, SIMIL_METRIC_L2, n, x, 0);
        sml_test_search_nprobe(index, nq, q, k, cases[c].nprobe, d, l);
        const double r = sml_test_recall(l, truth, nq, k, k);
        printf("%-14s nprobe=%lld recall 10@10 = %.4f (bar %.2f)\n", cases[c].desc,
               (long long)cases[c].nprobe, r, cases[c].bar);
        if (r < cases[c].bar)
            fail_msg("%s: recall 10@10 %.4f below %.2f (mix n=%lld dim=%lld seeds 1, 2)",
                     cases[c].desc, r, cases[c].bar, (long long)n, (long long)dim);
        simil_index_destroy(index);
    }
    /* IVF-SQ8 against IVF-Flat at a partial nprobe */
    simil_index *ivf_flat =
        sml_test_trained_index("cpu", "IVF64,Flat", dim, SIMIL_METRIC_L2, n, x, 0);
    simil_index *ivf_sq = sml_test_trained_index("cpu", "IVF64,SQ8", dim, SIMIL_METRIC_L2, n, x, 0);
    sml_test_search_nprobe(ivf_flat, nq, q, k, 8, d, l);
    const double r_flat = sml_test_recall(l, truth, nq, k, k);
    sml_test_search_nprobe(ivf_sq, nq, q, k, 8, d, l);
    const double r_sq = sml_test_recall(l, truth, nq, k, k);
    printf("nprobe=8: IVF64,Flat %.4f  IVF64,SQ8 %.4f\n", r_flat, r_sq);
    if (r_sq < r_flat - 0.03) fail_msg("IVF64,SQ8 recall %.4f vs IVF64,Flat %.4f", r_sq, r_flat);
    simil_index_destroy(ivf_flat);
    simil_index_destroy(ivf_sq);
    free(x);
    free(q);
    free(d);
    free(truth);
    free(l);
}

/* A saved index loads with the same results; removal takes rows out. */
static void test_save_load_remove(void **state)
{
    (void)state;
    const int64_t n = 1500, nq = 20, dim = 12, k = 5;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    float d[20 * 5], d2[20 * 5];
    int64_t l[20 * 5], l2[20 * 5];
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 3, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 4, q));
    const char *descs[] = {"SQ8", "SQfp16", "SQbf16", "IVF8,SQ8", "IVF8,SQfp16"};
    for (int c = 0; c < 5; c++) {
        for (int m = 0; m < 3; m++) {
            simil_index *index = sml_test_trained_index("cpu", descs[c], dim, metrics[m], n, x, 0);
            sml_test_search_nprobe(index, nq, q, k, 3, d, l);
            const char *path = sml_test_path("sq.simil");
            SML_ASSERT_OK(simil_index_save(index, path));
            simil_index *loaded;
            SML_ASSERT_OK(simil_index_load(&loaded, path, "cpu"));
            assert_int_equal(simil_index_size(loaded), n);
            sml_test_search_nprobe(loaded, nq, q, k, 3, d2, l2);
            assert_memory_equal(l, l2, sizeof l);
            assert_memory_equal(d, d2, sizeof d);
            /* remove the first results of query 0: they are gone */
            int64_t removed;
            int64_t gone[2] = {l[0] < l[1] ? l[0] : l[1], l[0] < l[1] ? l[1] : l[0]};
            SML_ASSERT_OK(simil_index_remove(loaded, 2, gone, &removed));
            assert_int_equal(removed, 2);
            sml_test_search_nprobe(loaded, 1, q, k, 3, d2, l2);
            for (int64_t j = 0; j < k; j++) assert_true(l2[j] != gone[0] && l2[j] != gone[1]);
            simil_index_destroy(loaded);
            simil_index_destroy(index);
            remove(path);
        }
    }
    free(x);
    free(q);
}

static void test_bad_input(void **state)
{
    (void)state;
    simil_index *index;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(&index, 8, "SQ4", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(&index, 8, "SQ8,Refine,Refine", SIMIL_METRIC_L2, "cpu"));
    float x[4 * 8];
    sml_test_fill_uniform(x, 4 * 8, 9, -1.0f, 1.0f);
    /* SQ8 needs its ranges; the half types do not */
    SML_ASSERT_OK(simil_index_create(&index, 8, "SQ8", SIMIL_METRIC_L2, "cpu"));
    assert_false(simil_index_is_trained(index));
    SML_ASSERT_STATUS(SIMIL_ERR_NOT_TRAINED, simil_index_add(index, 4, x, NULL));
    SML_ASSERT_OK(simil_index_train(index, 4, x));
    SML_ASSERT_OK(simil_index_add(index, 4, x, NULL));
    /* retraining would strand the codes */
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_train(index, 4, x));
    assert_int_equal(simil_index_size(index), 4);
    simil_index_destroy(index);
    SML_ASSERT_OK(simil_index_create(&index, 8, "SQfp16", SIMIL_METRIC_L2, "cpu"));
    assert_true(simil_index_is_trained(index));
    SML_ASSERT_OK(simil_index_add(index, 4, x, NULL));
    assert_string_equal(simil_index_description(index), "SQfp16");
    simil_index_destroy(index);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_element_codes),
        cmocka_unit_test(test_row_sums),
        cmocka_unit_test(test_exact_over_decoded),
        cmocka_unit_test(test_reconstruction_error),
        cmocka_unit_test(test_recall),
        cmocka_unit_test(test_save_load_remove),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
