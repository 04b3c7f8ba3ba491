/* test_search_batch.c: dynamic batching of concurrent searches
 * (src/index/search_batch.c), on the CPU backend, or on the device that
 * SIMIL_TEST_DEVICE names (ctest's test_search_batch_gpu: "gpu"; it skips
 * without one).
 *
 * For Flat, IVF-Flat, IVF-PQ and XFBQ: every query's results are first found
 * by a search of that query alone; then 8 threads search the same queries at
 * once, in calls of 1 to 3 queries, with two values of k and two of nprobe
 * mixed (only searches of the same k and parameters may join), with and
 * without a wait, one batch at a time and three side by side, and without
 * batching; every row must equal its lone result bit for bit, and the
 * counters must show that searches were combined, and batches ran side by
 * side.  Calls larger than a batch
 * run alone; a batch that fails gives every caller the failure in its own
 * thread; and the setting's arguments are checked.  On the CPU, two searches
 * of the same k and parameters but different allowed ids must not join.
 * A lone caller pays a batch's wait on its first call only.
 *
 * SIMIL_TEST_REPLAY=0 turns off the GPU's graph replay of small IVF batches
 * (sml_cuda_replay; on by default).  With it on, this test once stopped on
 * an H200: a lane's buffer grew, a new block came back at a freed one's
 * address, and a graph whose copy named the old block was replayed.  Each
 * phase prints a line before it starts, so that a run that stops says
 * where. */
#define _GNU_SOURCE /* pthread_barrier_t */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "cuda/cuda_backend.h"
#include "index/index_internal.h"
#include "index/search_batch.h"
#include "util/test_util.h"

enum { DIM = 24, NBASE = 6000, NQ = 96, THREADS = 8, ROUNDS = 6 };

static const char *device(void)
{
    const char *d = getenv("SIMIL_TEST_DEVICE");
    return d && *d ? d : "cpu";
}

typedef struct lone {
    int64_t k, nprobe;
    int allow;                   /* 0: every id; 1: the even ids; 2: the odd ones */
    simil_search_params *params; /* nprobe (and allow) set; read by every thread */
    float d[NQ * 10];
    int64_t l[NQ * 10];
} lone;

typedef struct worker {
    const simil_index *index;
    const float *queries;
    lone *variants; /* [0]: k = 10, nprobe 4; [1]: k = 5, nprobe 8 */
    pthread_barrier_t *start;
    int id;
    int64_t mismatches, failures;
    char first_failure[256];
} worker;

static void *search_loop(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(w->start);
    for (int r = 0; r < ROUNDS; r++) {
        for (int64_t q0 = w->id; q0 < NQ;) {
            const int64_t nq = 1 + (q0 + r) % 3 < NQ - q0 ? 1 + (q0 + r) % 3 : NQ - q0;
            const lone *v = &w->variants[(q0 + r + w->id) % 2];
            float d[3 * 10];
            int64_t l[3 * 10];
            simil_status s = simil_index_search(w->index, nq, w->queries + q0 * DIM, v->k,
                                                v->params, d, l);
            if (s != SIMIL_OK) {
                if (w->failures++ == 0)
                    snprintf(w->first_failure, sizeof w->first_failure, "%s: %s",
                             simil_status_name(s), simil_last_error());
            } else if (memcmp(d, v->d + q0 * v->k, sizeof(float) * (size_t)(nq * v->k)) != 0 ||
                       memcmp(l, v->l + q0 * v->k, sizeof(int64_t) * (size_t)(nq * v->k)) != 0) {
                w->mismatches++;
            }
            q0 += nq + THREADS - 1;
        }
    }
    return NULL;
}

/* Lone results of each query for both variants (batching off). */
static void lone_results(simil_index *index, const float *q, lone variants[2])
{
    SML_ASSERT_OK(simil_index_set_batching(index, 0, 0));
    for (int v = 0; v < 2; v++) {
        SML_ASSERT_OK(simil_search_params_create(&variants[v].params));
        SML_ASSERT_OK(simil_search_params_set_int(variants[v].params, "nprobe",
                                                  variants[v].nprobe));
        if (variants[v].allow) {
            int64_t ids[NBASE / 2];
            for (int64_t i = 0; i < NBASE / 2; i++) ids[i] = 2 * i + (variants[v].allow - 1);
            SML_ASSERT_OK(simil_search_params_allow_ids(variants[v].params, NBASE / 2, ids));
        }
        for (int64_t i = 0; i < NQ; i++)
            SML_ASSERT_OK(simil_index_search(index, 1, q + i * DIM, variants[v].k,
                                             variants[v].params,
                                             variants[v].d + i * variants[v].k,
                                             variants[v].l + i * variants[v].k));
    }
}

/* wait_us < 0: batching off (on the GPU, the threads' searches then run on
 * its lanes side by side). */
static void run_threads(const char *desc, simil_index *index, const float *q, lone variants[2],
                        int64_t wait_us)
{
    SML_ASSERT_OK(simil_index_set_batching(index, wait_us >= 0, wait_us >= 0 ? wait_us : 0));
    long long hits, builds, direct, dropped;
    sml_cuda_replay_counts(&hits, &builds, &direct, &dropped);
    printf("%s on %s: %d threads, batching %s (wait %lld us), %d lanes; graphs so far: %lld "
           "reused, %lld made, %lld one by one, %lld dropped\n",
           desc, device(), THREADS, wait_us < 0 ? "off" : "on",
           (long long)(wait_us > 0 ? wait_us : 0), index->backend->batch_lanes, hits, builds,
           direct, dropped);
    fflush(stdout);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    worker w[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.index = index, .queries = q, .variants = variants, .start = &start,
                        .id = i};
        assert_int_equal(pthread_create(&t[i], NULL, search_loop, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < THREADS; i++) {
        if (w[i].failures)
            fail_msg("%s on %s, wait %lld us: thread %d: %lld searches failed, first: %s", desc,
                     device(), (long long)wait_us, i, (long long)w[i].failures,
                     w[i].first_failure);
        if (w[i].mismatches)
            fail_msg("%s on %s, wait %lld us, seed 7: thread %d: %lld searches differ from "
                     "the same queries searched alone",
                     desc, device(), (long long)wait_us, i, (long long)w[i].mismatches);
    }
}

/* filtered: both variants k = 10 and nprobe 4, one allowing the even ids,
 * the other the odd ones. */
static void check_type(const char *desc, int filtered)
{
    float *base = sml_test_malloc(sizeof(float) * NBASE * DIM);
    float *q = sml_test_malloc(sizeof(float) * NQ * DIM);
    sml_test_fill_uniform(base, NBASE * DIM, 7, -1, 1);
    sml_test_fill_uniform(q, NQ * DIM, 8, -1, 1);
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, DIM, desc, SIMIL_METRIC_L2, device()));
    SML_ASSERT_OK(simil_index_train(index, NBASE, base));
    SML_ASSERT_OK(simil_index_add(index, NBASE, base, NULL));
    lone *variants = sml_test_malloc(2 * sizeof *variants);
    variants[0].k = 10, variants[0].nprobe = 4, variants[0].allow = filtered ? 1 : 0;
    variants[1].k = filtered ? 10 : 5, variants[1].nprobe = filtered ? 4 : 8;
    variants[1].allow = filtered ? 2 : 0;
    lone_results(index, q, variants);
    int64_t batches0, searches0, batches1, searches1;
    int most;
    sml_batcher_counts(index->batcher, &batches0, &searches0, &most);
    /* one batch at a time (the CPU's lanes; the GPU's, set to one), then
     * three side by side (on the CPU too: its searches are thread-safe) */
    const int lanes = index->backend->batch_lanes;
    for (int at_once = 1; at_once <= 3; at_once += 2) {
        index->backend->batch_lanes = at_once;
        run_threads(desc, index, q, variants, 0);
        /* a wait: batches take what arrives within 2 ms of their first search */
        run_threads(desc, index, q, variants, 2000);
    }
    index->backend->batch_lanes = lanes;
    run_threads(desc, index, q, variants, -1);
    sml_batcher_counts(index->batcher, &batches1, &searches1, &most);
    printf("%s on %s: %lld searches in %lld batches, at most %d at once\n", desc, device(),
           (long long)(searches1 - searches0), (long long)(batches1 - batches0), most);
    assert_true(searches1 - searches0 > 0);
    assert_true(batches1 - batches0 < searches1 - searches0);
    assert_true(most >= 2 && most <= 3);
    simil_index_destroy(index);
    for (int v = 0; v < 2; v++) simil_search_params_destroy(variants[v].params);
    free(variants);
    free(base);
    free(q);
}

static void test_flat(void **state)
{
    (void)state;
    check_type("Flat", 0);
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A batch waits for as many searches as the last one held: a lone caller
 * pays the wait on its first call only. */
static void test_lone_caller_waits_once(void **state)
{
    (void)state;
    enum { N = 500, CALLS = 5 };
    float *base = sml_test_malloc(sizeof(float) * N * DIM);
    sml_test_fill_uniform(base, N * DIM, 14, 0, 1);
    simil_index *index = sml_test_flat_index(device(), DIM, SIMIL_METRIC_L2, N, base);
    SML_ASSERT_OK(simil_index_set_batching(index, 1, 1000000));
    float d[10];
    int64_t l[10];
    double t = seconds_now();
    SML_ASSERT_OK(simil_index_search(index, 1, base, 10, NULL, d, l));
    const double first = seconds_now() - t;
    t = seconds_now();
    for (int i = 0; i < CALLS; i++)
        SML_ASSERT_OK(simil_index_search(index, 1, base + i * DIM, 10, NULL, d, l));
    const double rest = seconds_now() - t;
    printf("lone caller, 1 s wait: first call %.3f s, next %d calls %.3f s\n", first, CALLS, rest);
    assert_true(first >= 0.99);     /* nothing known yet: it waited for companions */
    assert_true(rest < 0.9);        /* then never: CALLS s if each had waited */
    assert_int_equal(l[0], CALLS - 1);
    simil_index_destroy(index);
    free(base);
}

/* Searches with different allowed ids run apart (filters are CPU-only). */
static void test_filters_apart(void **state)
{
    (void)state;
    if (strcmp(device(), "cpu") != 0) skip();
    check_type("Flat", 1);
    check_type("IVF32,Flat", 1);
}

static void test_ivf_flat(void **state)
{
    (void)state;
    check_type("IVF32,Flat", 0);
}

static void test_ivf_pq(void **state)
{
    (void)state;
    check_type("IVF32,PQ6", 0);
}

static void test_xfbq(void **state)
{
    (void)state;
    check_type("XFBQ", 0);
    check_type("IVF32,XFBQ", 0);
}

/* Calls of more queries than a batch holds run alone, with the same results
 * as with batching off. */
static void test_large_calls_run_alone(void **state)
{
    (void)state;
    enum { N = 2000, Q = 300, K = 7 };
    float *base = sml_test_malloc(sizeof(float) * N * DIM);
    float *q = sml_test_malloc(sizeof(float) * Q * DIM);
    sml_test_fill_uniform(base, N * DIM, 11, 0, 1);
    sml_test_fill_uniform(q, Q * DIM, 12, 0, 1);
    simil_index *index = sml_test_flat_index(device(), DIM, SIMIL_METRIC_L2, N, base);
    float *d1 = sml_test_malloc(sizeof(float) * Q * K), *d2 = sml_test_malloc(sizeof(float) * Q * K);
    int64_t *l1 = sml_test_malloc(sizeof(int64_t) * Q * K);
    int64_t *l2 = sml_test_malloc(sizeof(int64_t) * Q * K);
    SML_ASSERT_OK(simil_index_search(index, Q, q, K, NULL, d1, l1));
    SML_ASSERT_OK(simil_index_set_batching(index, 0, 0));
    SML_ASSERT_OK(simil_index_search(index, Q, q, K, NULL, d2, l2));
    assert_memory_equal(d1, d2, sizeof(float) * Q * K);
    assert_memory_equal(l1, l2, sizeof(int64_t) * Q * K);
    simil_index_destroy(index);
    free(d1);
    free(d2);
    free(l1);
    free(l2);
    free(base);
    free(q);
}

/* A batch that fails: every caller gets the failure, with the message in its
 * own thread (sticky allocation failures from the moment the threads start;
 * each caller's retry alone fails too). */
typedef struct failing {
    const simil_index *index;
    const float *queries;
    pthread_barrier_t *start;
    simil_status status;
    char message[256];
} failing;

static void *search_failing(void *arg)
{
    failing *f = arg;
    float d[4 * 10];
    int64_t l[4 * 10];
    pthread_barrier_wait(f->start);
    f->status = simil_index_search(f->index, 4, f->queries, 10, NULL, d, l);
    snprintf(f->message, sizeof f->message, "%s", simil_last_error());
    return NULL;
}

static void test_failed_batch(void **state)
{
    (void)state;
    enum { N = 2000, CALLERS = 4 };
    float *base = sml_test_malloc(sizeof(float) * N * DIM);
    sml_test_fill_uniform(base, N * DIM, 13, 0, 1);
    simil_index *index = sml_test_flat_index("cpu", DIM, SIMIL_METRIC_L2, N, base);
    /* the batch starts once the 4 x 4 queries (a full CPU batch) are in */
    SML_ASSERT_OK(simil_index_set_batching(index, 1, 5000000));
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, CALLERS + 1);
    failing f[CALLERS];
    pthread_t t[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        f[i] = (failing){.index = index, .queries = base + i * 4 * DIM, .start = &start};
        assert_int_equal(pthread_create(&t[i], NULL, search_failing, &f[i]), 0);
    }
    sml_alloc_fail_at(1, 1);
    pthread_barrier_wait(&start);
    for (int i = 0; i < CALLERS; i++) pthread_join(t[i], NULL);
    sml_alloc_fail_at(0, 0);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < CALLERS; i++) {
        if (f[i].status != SIMIL_ERR_OUT_OF_MEMORY || f[i].message[0] == '\0')
            fail_msg("caller %d of a failed batch: %s, message '%s'", i,
                     simil_status_name(f[i].status), f[i].message);
    }
    float d[10];
    int64_t l[10];
    /* the last batch held 4 searches: without this, a lone one waits 5 s for 3 more */
    SML_ASSERT_OK(simil_index_set_batching(index, 1, 0));
    SML_ASSERT_OK(simil_index_search(index, 1, base, 10, NULL, d, l));
    assert_int_equal(l[0], 0);
    simil_index_destroy(index);
    free(base);
}

static void test_setting(void **state)
{
    (void)state;
    simil_index *flat, *opq;
    SML_ASSERT_OK(simil_index_create(&flat, 8, "Flat", SIMIL_METRIC_L2, "cpu"));
    assert_true(sml_batcher_enabled(flat->batcher));
    assert_int_equal(sml_batcher_wait_us(flat->batcher), SML_BATCH_DEFAULT_WAIT_US);
    SML_ASSERT_OK(simil_index_set_batching(flat, 1, 250));
    assert_int_equal(sml_batcher_wait_us(flat->batcher), 250);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_set_batching(flat, 1, -1));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_set_batching(flat, 1, 10000001));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_set_batching(NULL, 0, 0));
    assert_int_equal(sml_batcher_wait_us(flat->batcher), 250); /* failed calls change nothing */
    SML_ASSERT_OK(simil_index_create(&opq, 8, "OPQ2,IVF4,PQ2", SIMIL_METRIC_L2, "cpu"));
    assert_false(sml_batcher_enabled(opq->batcher));
    SML_ASSERT_STATUS(SIMIL_ERR_UNSUPPORTED, simil_index_set_batching(opq, 1, 0));
    SML_ASSERT_OK(simil_index_set_batching(opq, 0, 0));
    simil_index_destroy(flat);
    simil_index_destroy(opq);
}

int main(void)
{
    if (strcmp(device(), "cpu") != 0) sml_test_require_gpu();
    const char *replay = getenv("SIMIL_TEST_REPLAY");
    if (replay) sml_cuda_replay(strcmp(replay, "0") != 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_setting),  cmocka_unit_test(test_flat),
        cmocka_unit_test(test_ivf_flat), cmocka_unit_test(test_ivf_pq),
        cmocka_unit_test(test_xfbq),     cmocka_unit_test(test_large_calls_run_alone),
        cmocka_unit_test(test_failed_batch), cmocka_unit_test(test_filters_apart),
        cmocka_unit_test(test_lone_caller_waits_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
