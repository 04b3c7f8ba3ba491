/* test_concurrency.c: the locking rule of simil/index.h on a Flat CPU index.
 *
 * Phase 1: 8 threads search one index at once, with batches that take both
 * CPU paths (direct for a few queries, GEMM for many) and with the default
 * and a fixed thread count; every result must equal, bit for bit, the result
 * of the same call made alone beforehand.
 * Phase 2: the same 8 readers under a pthread rwlock (read side), while one
 * writer adds and removes a batch of far-away vectors under the write side.
 * Each reader reads the size under its lock to learn which of the two states
 * it sees, and its result must equal, bit for bit, the single-threaded result
 * for that state.  (The far vectors never reach the top k, so the labels are
 * the same in both states; the distances of the GEMM path can differ in the
 * last bit, because the last tile of the base has another width.)  A search
 * with k past the index size must fill exactly as many slots as the size.
 *
 * tests/tsan.sh runs this under ThreadSanitizer (SIMIL_TEST_QUICK=1 makes
 * the rounds fewer).  SIMIL_TEST_BREAK_LOCKING=1 makes phase 2 break the
 * rule on purpose (the writer takes no lock, results are not checked): the
 * control run of tsan.sh, which must see ThreadSanitizer report a race. */
#define _GNU_SOURCE /* pthread_rwlock_t */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/test_util.h"

enum { DIM = 32, NBASE = 3000, NQ = 64, K = 10, READERS = 8, FAR = 50, NBATCH = 4 };

static float base[NBASE * DIM];
static float queries[NQ * DIM];
static float far_vectors[FAR * DIM];
static int64_t far_ids[FAR];
static int rounds; /* searches per reader per phase */

/* The batches the readers cycle through, and their single-threaded results. */
typedef struct batch {
    int64_t nq;
    int threads;
    float d[2][NQ * K]; /* [0]: the base alone, [1]: with the far vectors */
    int64_t l[2][NQ * K];
} batch;

static batch batches[NBATCH] = {
    {.nq = 1, .threads = 0}, {.nq = 4, .threads = 2}, {.nq = NQ, .threads = 0},
    {.nq = NQ, .threads = 1}};

typedef struct shared {
    simil_index *index;
    pthread_rwlock_t lock;
    int use_lock;
    int stop; /* set by the main thread once the readers are done; ends the writer */
    /* Readers search past their rounds until the writer has done this many
     * add+remove rounds (writer_rounds, atomic), so that a loaded machine,
     * where the writer may be scheduled late, still tests the readers
     * against a changing index. */
    int64_t want_writer_rounds;
    int64_t writer_rounds;
} shared;

typedef struct reader {
    shared *sh;
    int id;
    int64_t searches, mismatches, bad_counts, failures;
} reader;

static void search_batch(const simil_index *index, const batch *b, float *d, int64_t *l,
                         simil_status *status)
{
    simil_search_params *p = NULL;
    *status = simil_search_params_create(&p);
    if (*status == SIMIL_OK) *status = simil_search_params_set_int(p, "threads", b->threads);
    if (*status == SIMIL_OK) *status = simil_index_search(index, b->nq, queries, K, p, d, l);
    simil_search_params_destroy(p);
}

/* Search with k past the size: the filled slots must match the size. */
static int count_matches_size(const simil_index *index)
{
    enum { KBIG = NBASE + FAR + 5 };
    static _Thread_local float d[KBIG];
    static _Thread_local int64_t l[KBIG];
    int64_t size = simil_index_size(index);
    if (simil_index_search(index, 1, queries, KBIG, NULL, d, l) != SIMIL_OK) return 0;
    int64_t filled = 0;
    for (int64_t j = 0; j < KBIG; j++) filled += l[j] != -1;
    return filled == size;
}

static void *reader_main(void *arg)
{
    reader *r = arg;
    float d[NQ * K];
    int64_t l[NQ * K];
    for (int i = 0; i < rounds || __atomic_load_n(&r->sh->writer_rounds, __ATOMIC_ACQUIRE) <
                                      r->sh->want_writer_rounds;
         i++) {
        const batch *b = &batches[(i + r->id) % NBATCH];
        simil_status s;
        if (r->sh->use_lock) pthread_rwlock_rdlock(&r->sh->lock);
        int with_far = simil_index_size(r->sh->index) == NBASE + FAR;
        search_batch(r->sh->index, b, d, l, &s);
        int counted = !r->sh->use_lock || (i % 4 != 0) || count_matches_size(r->sh->index);
        if (r->sh->use_lock) pthread_rwlock_unlock(&r->sh->lock);
        r->searches++;
        if (s != SIMIL_OK) {
            r->failures++;
            continue;
        }
        size_t n = (size_t)(b->nq * K);
        if (memcmp(l, b->l[with_far], n * sizeof *l) != 0 ||
            memcmp(d, b->d[with_far], n * sizeof *d) != 0)
            r->mismatches++;
        if (!counted) r->bad_counts++;
    }
    return NULL;
}

typedef struct writer {
    shared *sh;
    int64_t rounds, failures;
} writer;

static void *writer_main(void *arg)
{
    writer *w = arg;
    const struct timespec pause = {0, 200 * 1000};
    int lock = w->sh->use_lock;
    while (!__atomic_load_n(&w->sh->stop, __ATOMIC_ACQUIRE)) {
        if (lock) pthread_rwlock_wrlock(&w->sh->lock);
        if (simil_index_add(w->sh->index, FAR, far_vectors, far_ids) != SIMIL_OK) w->failures++;
        if (lock) pthread_rwlock_unlock(&w->sh->lock);
        nanosleep(&pause, NULL);
        if (lock) pthread_rwlock_wrlock(&w->sh->lock);
        int64_t removed = 0;
        if (simil_index_remove(w->sh->index, FAR, far_ids, &removed) != SIMIL_OK ||
            removed != FAR)
            w->failures++;
        if (lock) pthread_rwlock_unlock(&w->sh->lock);
        nanosleep(&pause, NULL);
        w->rounds++;
        __atomic_add_fetch(&w->sh->writer_rounds, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static void run_readers(shared *sh, const char *phase, writer *w)
{
    pthread_t threads[READERS], wt;
    reader readers[READERS];
    sh->stop = 0;
    sh->writer_rounds = 0;
    sh->want_writer_rounds = w != NULL ? 5 : 0;
    for (int i = 0; i < READERS; i++) {
        readers[i] = (reader){.sh = sh, .id = i};
        assert_int_equal(pthread_create(&threads[i], NULL, reader_main, &readers[i]), 0);
    }
    if (w != NULL) assert_int_equal(pthread_create(&wt, NULL, writer_main, w), 0);
    int64_t searches = 0, mismatches = 0, bad_counts = 0, failures = 0;
    for (int i = 0; i < READERS; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        searches += readers[i].searches;
        mismatches += readers[i].mismatches;
        bad_counts += readers[i].bad_counts;
        failures += readers[i].failures;
    }
    if (w != NULL) {
        __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
        assert_int_equal(pthread_join(wt, NULL), 0);
    }
    printf("%s: %d threads, %lld searches, %lld failed, %lld differ from the single-threaded "
           "result, %lld size mismatches%s",
           phase, READERS, (long long)searches, (long long)failures, (long long)mismatches,
           (long long)bad_counts, w ? "" : "\n");
    if (w != NULL)
        printf("; writer: %lld add+remove rounds, %lld failed\n", (long long)w->rounds,
               (long long)w->failures);
    if (failures || mismatches || bad_counts || (w && w->failures))
        fail_msg("%s: concurrent calls disagree with single-threaded ones (dim=%d n=%d seed=1)",
                 phase, DIM, NBASE);
}

static void test_concurrent_search(void **state)
{
    (void)state;
    shared sh = {0};
    SML_ASSERT_OK(simil_index_create(&sh.index, DIM, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_add(sh.index, NBASE, base, NULL));
    for (int with_far = 1; with_far >= 0; with_far--) {
        if (with_far) SML_ASSERT_OK(simil_index_add(sh.index, FAR, far_vectors, far_ids));
        for (int b = 0; b < NBATCH; b++) {
            simil_status s;
            batch *bt = &batches[b];
            search_batch(sh.index, bt, bt->d[with_far], bt->l[with_far], &s);
            SML_ASSERT_OK(s);
        }
        if (with_far) SML_ASSERT_OK(simil_index_remove(sh.index, FAR, far_ids, NULL));
    }
    for (int b = 0; b < NBATCH; b++)
        assert_memory_equal(batches[b].l[0], batches[b].l[1], sizeof batches[b].l[0]);
    run_readers(&sh, "phase 1 (search only)", NULL);

    /* glibc's default rwlock lets 8 busy readers starve the writer */
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    assert_int_equal(pthread_rwlock_init(&sh.lock, &attr), 0);
    pthread_rwlockattr_destroy(&attr);
    const char *broken = getenv("SIMIL_TEST_BREAK_LOCKING");
    sh.use_lock = !(broken != NULL && broken[0] == '1');
    writer w = {.sh = &sh};
    if (!sh.use_lock) {
        /* the control run: the race is the point, the results are not */
        pthread_t wt, rt;
        reader r = {.sh = &sh};
        assert_int_equal(pthread_create(&wt, NULL, writer_main, &w), 0);
        assert_int_equal(pthread_create(&rt, NULL, reader_main, &r), 0);
        pthread_join(rt, NULL);
        __atomic_store_n(&sh.stop, 1, __ATOMIC_RELEASE);
        pthread_join(wt, NULL);
        printf("control run: the writer took no lock\n");
        pthread_rwlock_destroy(&sh.lock);
        simil_index_destroy(sh.index);
        return;
    }
    run_readers(&sh, "phase 2 (rwlock, one writer)", &w);
    assert_true(w.rounds >= 5);
    assert_int_equal(simil_index_size(sh.index), NBASE);
    pthread_rwlock_destroy(&sh.lock);
    simil_index_destroy(sh.index);
}

int main(void)
{
    rounds = sml_test_quick() ? 12 : 200;
    sml_test_fill_uniform(base, NBASE * DIM, 1, -1, 1);
    sml_test_fill_uniform(queries, NQ * DIM, 2, -1, 1);
    sml_test_fill_uniform(far_vectors, FAR * DIM, 3, 100, 101);
    for (int i = 0; i < FAR; i++) far_ids[i] = 1000000 + i;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_concurrent_search)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
