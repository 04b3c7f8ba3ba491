/* test_api.c: the public API as a plain C11 user sees it.  The umbrella
 * header is included twice to prove the headers are self-contained and
 * guarded; nothing from src/ is included here. */
#include <simil/simil.h>
#include <simil/simil.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/test_util.h"

static void test_status_names_and_version(void **state)
{
    (void)state;
    assert_int_equal(SIMIL_OK, 0);
    assert_string_equal(simil_status_name(SIMIL_OK), "SIMIL_OK");
    assert_string_equal(simil_status_name(SIMIL_ERR_CORRUPT), "SIMIL_ERR_CORRUPT");
    assert_string_equal(simil_status_name((simil_status)-1000), "SIMIL_ERR_UNKNOWN");
    const simil_status all[] = {SIMIL_ERR_INVALID_ARGUMENT, SIMIL_ERR_OUT_OF_MEMORY,
                                SIMIL_ERR_UNSUPPORTED,      SIMIL_ERR_NO_DEVICE,
                                SIMIL_ERR_IO,               SIMIL_ERR_CORRUPT,
                                SIMIL_ERR_NOT_TRAINED,      SIMIL_ERR_DEVICE,
                                SIMIL_ERR_INTERNAL,         SIMIL_ERR_REMOTE};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        assert_true(all[i] < 0);
        assert_string_not_equal(simil_status_name(all[i]), "SIMIL_ERR_UNKNOWN");
    }
    assert_int_equal(simil_version_number(), SIMIL_VERSION_NUMBER);
    char expect[32];
    snprintf(expect, sizeof expect, "%d.%d.%d", SIMIL_VERSION_MAJOR, SIMIL_VERSION_MINOR,
             SIMIL_VERSION_PATCH);
    assert_string_equal(simil_version_string(), expect);
}

static void test_metrics(void **state)
{
    (void)state;
    simil_metric m;
    SML_ASSERT_OK(simil_metric_parse("l2", &m));
    assert_int_equal(m, SIMIL_METRIC_L2);
    SML_ASSERT_OK(simil_metric_parse("ip", &m));
    assert_int_equal(m, SIMIL_METRIC_IP);
    SML_ASSERT_OK(simil_metric_parse("cosine", &m));
    assert_int_equal(m, SIMIL_METRIC_COSINE);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_metric_parse("hamming", &m));
    assert_non_null(strstr(simil_last_error(), "hamming"));
    assert_string_equal(simil_metric_name(SIMIL_METRIC_COSINE), "cosine");
}

static void *fail_in_thread(void *arg)
{
    (void)arg;
    simil_metric m;
    simil_metric_parse("from-another-thread", &m);
    return NULL;
}

static void test_error_is_per_thread(void **state)
{
    (void)state;
    simil_metric m;
    simil_metric_parse("mine", &m);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fail_in_thread, NULL), 0);
    pthread_join(t, NULL);
    assert_non_null(strstr(simil_last_error(), "mine"));
}

static void test_handles(void **state)
{
    (void)state;
    simil_index_destroy(NULL);
    simil_index *index = NULL;
    SML_ASSERT_OK(simil_index_create(&index, 3, "Flat", SIMIL_METRIC_L2, NULL));
    assert_int_equal(simil_index_dim(index), 3);
    assert_int_equal(simil_index_size(index), 0);
    assert_true(simil_index_is_trained(index));
    assert_true(strlen(simil_backend_name(index)) > 0);
    SML_ASSERT_OK(simil_index_train(index, 0, NULL));
    simil_index_destroy(index);
}

static void test_gpu_request_without_gpu(void **state)
{
    (void)state;
    if (simil_gpu_count() > 0) skip();
    simil_index *index = NULL;
    SML_ASSERT_STATUS(SIMIL_ERR_NO_DEVICE,
                      simil_index_create(&index, 3, "Flat", SIMIL_METRIC_L2, "gpu"));
    assert_null(index);
    SML_ASSERT_STATUS(SIMIL_ERR_NO_DEVICE,
                      simil_index_create(&index, 3, "Flat", SIMIL_METRIC_L2, "gpu:1"));
    /* auto never fails for lack of a GPU */
    SML_ASSERT_OK(simil_index_create(&index, 3, "Flat", SIMIL_METRIC_L2, "auto"));
    assert_non_null(strstr(simil_backend_name(index), "cpu"));
    simil_index_destroy(index);
}

typedef struct {
    int64_t calls;
    int64_t last_done;
    int64_t last_total;
    char stage[32];
} progress_record;

static void record_progress(const char *stage, int64_t done, int64_t total, void *user)
{
    progress_record *r = user;
    r->calls++;
    r->last_done = done;
    r->last_total = total;
    snprintf(r->stage, sizeof r->stage, "%s", stage);
}

static void test_progress_callback(void **state)
{
    (void)state;
    progress_record rec = {0};
    simil_set_progress(record_progress, &rec);
    enum { N = 200000, D = 2 };
    float *x = sml_test_malloc(sizeof(float) * N * D);
    sml_test_fill_uniform(x, N * D, 1, 0, 1);
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, D, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_add(index, N, x, NULL));
    simil_set_progress(NULL, NULL);
    assert_true(rec.calls >= 1);
    assert_string_equal(rec.stage, "add");
    assert_int_equal(rec.last_done, N);
    assert_int_equal(rec.last_total, N);
    int64_t before = rec.calls;
    SML_ASSERT_OK(simil_index_add(index, N, x, NULL));
    assert_int_equal(rec.calls, before); /* uninstalled: no more calls */
    simil_index_destroy(index);
    free(x);
}

/* The stages of a long IVF-PQ build, each reported on the caller's thread
 * with done rising to total: where the time goes shows while it runs, also
 * when the sub-quantizers train side by side on other threads. */
typedef struct {
    pthread_t caller;
    int64_t calls, last_done;
    char stage[32];
    char ended[8][32]; /* stages that reached done == total, in order */
    int nended;
    char wrong[160];   /* the first broken rule, if any */
} stage_record;

static void record_stages(const char *stage, int64_t done, int64_t total, void *user)
{
    stage_record *r = user;
    r->calls++;
    const int same = strcmp(stage, r->stage) == 0;
    if (r->wrong[0] == '\0') {
        if (!pthread_equal(pthread_self(), r->caller))
            snprintf(r->wrong, sizeof r->wrong, "%s reported on another thread", stage);
        else if (done < 1 || done > total)
            snprintf(r->wrong, sizeof r->wrong, "%s: done %lld of %lld", stage, (long long)done,
                     (long long)total);
        else if (same && done < r->last_done)
            snprintf(r->wrong, sizeof r->wrong, "%s: done went from %lld to %lld", stage,
                     (long long)r->last_done, (long long)done);
    }
    snprintf(r->stage, sizeof r->stage, "%s", stage);
    r->last_done = done;
    if (done == total && r->nended < 8) snprintf(r->ended[r->nended++], 32, "%s", stage);
}

static void test_build_progress_stages(void **state)
{
    (void)state;
    const int64_t n = 3000, dim = 16;
    const char *want[] = {"train OPQ", "kmeans", "train PQ", "add"};
    float *x = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 7, x));
    stage_record rec = {.caller = pthread_self()};
    simil_set_progress(record_stages, &rec);
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, dim, "OPQ4,IVF16,PQ4", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_train(index, n, x));
    SML_ASSERT_OK(simil_index_add(index, n, x, NULL));
    simil_set_progress(NULL, NULL);
    if (rec.wrong[0] != '\0') fail_msg("OPQ4,IVF16,PQ4 (mix seed 7, %lld x %lld): %s", (long long)n,
                                       (long long)dim, rec.wrong);
    assert_int_equal(rec.nended, 4);
    for (int i = 0; i < 4; i++) assert_string_equal(rec.ended[i], want[i]);
    simil_index_destroy(index);
    free(x);
}

/* Training an index whose stored vectors depend on its training (their
 * lists, codes, rotation) is refused while it holds vectors, and the refusal
 * changes nothing; after a reset it trains again.  Flat XFBQ recodes its
 * vectors, so it accepts the call. */
static void test_retrain_with_vectors(void **state)
{
    (void)state;
    const int64_t n = 3000, dim = 16, k = 5;
    const char *refused[] = {"IVF16,Flat", "IVF16,PQ4", "PQ4", "OPQ4,IVF16,PQ4",
                             "IVF16,PQ4,Refine", "IVF16,XFBQ"};
    const char *devices[] = {"cpu", "cpu", "cpu", "cpu", "cpu", "cpu", "cpu:2"};
    float *x = malloc(sizeof(float) * (size_t)(n * dim));
    float d0[5], d1[5];
    int64_t l0[5], l1[5];
    assert_non_null(x);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 5, x));
    for (int i = 0; i < 7; i++) {
        const char *desc = refused[i < 6 ? i : 0];
        simil_index *index;
        SML_ASSERT_OK(simil_index_create(&index, dim, desc, SIMIL_METRIC_L2, devices[i]));
        SML_ASSERT_OK(simil_index_train(index, n, x));
        SML_ASSERT_OK(simil_index_add(index, n, x, NULL));
        SML_ASSERT_OK(simil_index_search(index, 1, x, k, NULL, d0, l0));
        SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_train(index, n / 2, x + dim));
        assert_non_null(strstr(simil_last_error(), "reset the index"));
        assert_int_equal(simil_index_size(index), n);
        SML_ASSERT_OK(simil_index_search(index, 1, x, k, NULL, d1, l1));
        assert_memory_equal(d0, d1, sizeof d0);
        assert_memory_equal(l0, l1, sizeof l0);
        SML_ASSERT_OK(simil_index_reset(index));
        SML_ASSERT_OK(simil_index_train(index, n / 2, x + dim));
        SML_ASSERT_OK(simil_index_add(index, n, x, NULL));
        assert_int_equal(simil_index_size(index), n);
        simil_index_destroy(index);
    }
    simil_index *xfbq;
    SML_ASSERT_OK(simil_index_create(&xfbq, dim, "XFBQ", SIMIL_METRIC_COSINE, "cpu"));
    SML_ASSERT_OK(simil_index_add(xfbq, n, x, NULL));
    SML_ASSERT_OK(simil_index_train(xfbq, n / 2, x + dim));
    SML_ASSERT_OK(simil_index_search(xfbq, 1, x, k, NULL, d1, l1));
    assert_int_equal(l1[0], 0);
    simil_index_destroy(xfbq);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names_and_version),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_error_is_per_thread),
        cmocka_unit_test(test_handles),
        cmocka_unit_test(test_gpu_request_without_gpu),
        cmocka_unit_test(test_progress_callback),
        cmocka_unit_test(test_build_progress_stages),
        cmocka_unit_test(test_retrain_with_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
