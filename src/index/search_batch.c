/* search_batch.c: dynamic batching of concurrent searches (search_batch.h).
 *
 * One mutex guards the queue.  A search is in one of four states: queued,
 * taken (in the batch that runs), done (its rows written, or its own
 * failure when it ran alone in its own thread), or alone (a batch with it,
 * or another thread running it, failed: it runs again by itself, so that its
 * status and message are its own).
 *
 * Waking: the thread that ends a batch marks its searches, hands the lead
 * to the oldest search still queued, and wakes every waiter at once on one
 * word (a futex on Linux); a search that finds itself done returns without
 * the mutex.  Waking each waiter on its own condition variable cost the
 * leader a system call per caller, and a broadcast on one condition variable
 * made every waiter take the mutex in turn: both stretched the gap between
 * two GPU batches of 16 callers to about the length of a batch.
 *
 * How long a leader waits for companions: callers that search in a loop come
 * back as soon as their batch ends, so the next batch waits, up to
 * max_wait_us after its oldest search arrived, until as many searches have
 * queued as the last batch held (or the batch is full; the first batch
 * waits until full).  A lone caller's last batch held one search: from its
 * second call on, it never waits.  Without this, the caller that came back
 * first led a batch of one while the others queued behind it, and batches of
 * one and of all the rest took turns.
 *
 * The leader's buffers for the joined queries and results are kept from
 * batch to batch; only one batch runs at a time, so only the leader touches
 * them. */
#include "index/search_batch.h"

#include <assert.h>
#include <pthread.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "core/alloc.h"
#include "core/error.h"
#include "index/index_internal.h"

enum { SML_QUEUED, SML_TAKEN, SML_DONE, SML_ALONE };

typedef struct sml_batch_req {
    const sml_search_call *call;
    struct sml_batch_req *next;
    struct timespec arrival;
    atomic_int state;     /* written under the lock; read without it after a wake */
    atomic_int lead;      /* handed the lead of the next batch */
    simil_status status;  /* when done (written before state) */
} sml_batch_req;

struct sml_batcher {
    pthread_mutex_t lock;
    pthread_cond_t companions; /* a leader waiting for companions sleeps here */
#ifndef __linux__
    pthread_cond_t ended;      /* where there is no futex: waiters for gen */
#endif
    atomic_uint gen;           /* batches ended: waiters sleep until it moves */
    int enabled;
    int64_t max_wait_us;
    sml_batch_req *head, *tail;  /* queued, oldest first */
    int64_t nqueued, nqueries;   /* searches queued, and their queries */
    int running;                 /* a batch is being searched, or its lead handed on */
    int leader_waiting;          /* a leader sleeps on companions */
    int64_t expect;              /* searches the last batch held (INT64_MAX: none yet) */
    float *queries;              /* the leader's buffers */
    float *distances;
    int64_t *labels;
    size_t query_floats, result_slots, label_slots;
    int64_t batches, searches;
};

_Static_assert(sizeof(atomic_uint) == sizeof(unsigned), "the futex word is an unsigned");

/* Sleep until b->gen differs from seen (or spuriously); lock not held. */
static void sml_gen_wait(sml_batcher *b, unsigned seen)
{
#ifdef __linux__
    syscall(SYS_futex, (unsigned *)&b->gen, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
#else
    pthread_mutex_lock(&b->lock);
    while (atomic_load(&b->gen) == seen) pthread_cond_wait(&b->ended, &b->lock);
    pthread_mutex_unlock(&b->lock);
#endif
}

/* Wake every thread in sml_gen_wait; b->gen has moved; lock not held. */
static void sml_gen_wake(sml_batcher *b)
{
#ifdef __linux__
    syscall(SYS_futex, (unsigned *)&b->gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    pthread_mutex_lock(&b->lock);
    pthread_cond_broadcast(&b->ended);
    pthread_mutex_unlock(&b->lock);
#endif
}

simil_status sml_batcher_create(sml_batcher **out)
{
    *out = NULL;
    sml_batcher *b;
    SML_TRY(sml_calloc((void **)&b, 1, sizeof *b, "a search batcher"));
    pthread_condattr_t attr;
    int failed = pthread_condattr_init(&attr);
    if (!failed) failed = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (!failed) failed = pthread_cond_init(&b->companions, &attr);
    pthread_condattr_destroy(&attr);
#ifndef __linux__
    if (!failed && pthread_cond_init(&b->ended, NULL) != 0) {
        pthread_cond_destroy(&b->companions);
        failed = 1;
    }
#endif
    if (!failed && pthread_mutex_init(&b->lock, NULL) != 0) {
        pthread_cond_destroy(&b->companions);
#ifndef __linux__
        pthread_cond_destroy(&b->ended);
#endif
        failed = 1;
    }
    if (failed) {
        sml_free(b);
        return sml_error(SIMIL_ERR_OUT_OF_MEMORY, "could not create the locks of a search batcher");
    }
    atomic_init(&b->gen, 0);
    b->expect = INT64_MAX; /* none yet: the first batch waits until full */
    *out = b;
    return SIMIL_OK;
}

void sml_batcher_destroy(sml_batcher *b)
{
    if (b == NULL) return;
    assert(b->head == NULL && !b->running);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->companions);
#ifndef __linux__
    pthread_cond_destroy(&b->ended);
#endif
    sml_free(b->queries);
    sml_free(b->distances);
    sml_free(b->labels);
    sml_free(b);
}

void sml_batcher_set(sml_batcher *b, int enabled, int64_t max_wait_us)
{
    pthread_mutex_lock(&b->lock);
    b->enabled = enabled != 0;
    b->max_wait_us = max_wait_us;
    pthread_mutex_unlock(&b->lock);
}

int sml_batcher_enabled(const sml_batcher *b) { return b->enabled; }
int64_t sml_batcher_wait_us(const sml_batcher *b) { return b->max_wait_us; }

void sml_batcher_counts(const sml_batcher *b, int64_t *batches, int64_t *searches)
{
    pthread_mutex_lock((pthread_mutex_t *)&b->lock);
    *batches = b->batches;
    *searches = b->searches;
    pthread_mutex_unlock((pthread_mutex_t *)&b->lock);
}

/* Whether r can join a batch led by first. */
static int sml_batch_fits(const sml_batch_req *first, const sml_batch_req *r)
{
    return r->call->k == first->call->k &&
           sml_search_params_equal(&r->call->params, &first->call->params);
}

static void sml_deadline(struct timespec *t, int64_t us)
{
    t->tv_sec += (time_t)(us / 1000000);
    t->tv_nsec += (long)(us % 1000000) * 1000;
    if (t->tv_nsec >= 1000000000) {
        t->tv_sec++;
        t->tv_nsec -= 1000000000;
    }
}

static int sml_before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* The queued searches that would join a batch led by the oldest: how many,
 * and their queries. */
static void sml_batch_queued(const sml_batcher *b, int64_t limit, int64_t *searches,
                             int64_t *queries)
{
    int64_t n = 0, nq = 0;
    for (const sml_batch_req *r = b->head; r != NULL; r = r->next)
        if (sml_batch_fits(b->head, r) && nq + r->call->nq <= limit) {
            nq += r->call->nq;
            n++;
        }
    *searches = n;
    *queries = nq;
}

/* The leader, lock held: let the oldest search wait, up to max_wait_us after
 * it arrived, for as many companions as the last batch held (unless the
 * batch is full), then move the batch out of the queue, in order, into a
 * list; returns its first search. */
static sml_batch_req *sml_batch_take(sml_batcher *b, int64_t limit)
{
    if (b->max_wait_us > 0) {
        struct timespec until = b->head->arrival;
        sml_deadline(&until, b->max_wait_us);
        for (;;) {
            int64_t n, nq;
            sml_batch_queued(b, limit, &n, &nq);
            if (n >= b->expect || nq >= limit) break;
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (!sml_before(&now, &until)) break;
            b->leader_waiting = 1;
            pthread_cond_timedwait(&b->companions, &b->lock, &until);
            b->leader_waiting = 0;
        }
    }
    sml_batch_req *first = b->head, *last = NULL, **link = &b->head;
    int64_t nq = 0, n = 0;
    b->tail = NULL;
    for (sml_batch_req *r = b->head; r != NULL;) {
        sml_batch_req *next = r->next;
        if (sml_batch_fits(first, r) && nq + r->call->nq <= limit) {
            nq += r->call->nq;
            n++;
            b->nqueued--;
            b->nqueries -= r->call->nq;
            *link = next;  /* out of the queue, onto the batch */
            atomic_store_explicit(&r->state, SML_TAKEN, memory_order_relaxed);
            r->next = NULL;
            if (last) last->next = r;
            last = r;
        } else {
            link = &r->next;
            b->tail = r;
        }
        r = next;
    }
    b->expect = n;
    return first;
}

static simil_status sml_batch_grow(void **p, size_t *have, size_t need, size_t size)
{
    if (need <= *have) return SIMIL_OK;
    void *fresh;
    SML_TRY(sml_alloc(&fresh, need, size, "a batch of searches"));
    sml_free(*p);
    *p = fresh;
    *have = need;
    return SIMIL_OK;
}

/* Run the batch that starts at first (lock not held), led by the thread
 * whose search is mine; each search ends done or alone, and is woken.  A
 * search that ran by itself and failed in its own thread is done, with its
 * status: running it again would hide the failure.  Then the lead goes to
 * the oldest search still queued, if any. */
static void sml_batch_run(sml_batcher *b, const simil_index *index, sml_batch_req *first,
                          const sml_batch_req *mine)
{
    simil_status s = SIMIL_OK;
    int failed_state = SML_ALONE;
    if (first->next == NULL) {
        s = index->vt->search(index, first->call);
        if (first == mine) failed_state = SML_DONE;
    } else {
        const int64_t dim = index->dim, k = first->call->k;
        sml_search_call joint = *first->call;
        joint.nq = 0;
        for (const sml_batch_req *r = first; r != NULL; r = r->next) joint.nq += r->call->nq;
        const size_t nq = (size_t)joint.nq;
        s = sml_batch_grow((void **)&b->queries, &b->query_floats, nq * (size_t)dim, sizeof(float));
        if (s == SIMIL_OK)
            s = sml_batch_grow((void **)&b->distances, &b->result_slots, nq * (size_t)k,
                               sizeof(float));
        if (s == SIMIL_OK)
            s = sml_batch_grow((void **)&b->labels, &b->label_slots, nq * (size_t)k,
                               sizeof(int64_t));
        if (s == SIMIL_OK) {
            size_t at = 0;
            for (const sml_batch_req *r = first; r != NULL; r = r->next) {
                const size_t n = (size_t)(r->call->nq * dim);
                memcpy(b->queries + at, r->call->queries, n * sizeof(float));
                at += n;
            }
            joint.queries = b->queries;
            joint.distances = b->distances;
            joint.labels = b->labels;
            s = index->vt->search(index, &joint);
        }
        if (s == SIMIL_OK) {
            size_t at = 0;
            for (const sml_batch_req *r = first; r != NULL; r = r->next) {
                const size_t n = (size_t)(r->call->nq * k);
                memcpy(r->call->distances, b->distances + at, n * sizeof(float));
                memcpy(r->call->labels, b->labels + at, n * sizeof(int64_t));
                at += n;
            }
        }
    }
    pthread_mutex_lock(&b->lock);
    b->batches++;
    for (sml_batch_req *r = first; r != NULL;) {
        /* r's thread may return as soon as it sees its state: read next first */
        sml_batch_req *next = r->next;
        r->status = s;
        b->searches++;
        atomic_store_explicit(&r->state, s == SIMIL_OK ? SML_DONE : failed_state,
                              memory_order_release);
        r = next;
    }
    if (b->head != NULL) /* running stays set: the lead is the oldest queued search's */
        atomic_store_explicit(&b->head->lead, 1, memory_order_release);
    else
        b->running = 0;
    atomic_fetch_add_explicit(&b->gen, 1, memory_order_release);
    pthread_mutex_unlock(&b->lock);
    sml_gen_wake(b);
}

simil_status sml_batcher_search(sml_batcher *b, const simil_index *index,
                                const sml_search_call *call)
{
    const sml_backend *be = index->backend;
    pthread_mutex_lock(&b->lock);
    if (!b->enabled || call->nq > be->batch_max_queries || call->k > be->batch_max_k) {
        pthread_mutex_unlock(&b->lock);
        return index->vt->search(index, call);
    }
    sml_batch_req req = {.call = call, .status = SIMIL_OK};
    atomic_init(&req.state, SML_QUEUED);
    atomic_init(&req.lead, 0);
    clock_gettime(CLOCK_MONOTONIC, &req.arrival);
    if (b->tail) b->tail->next = &req;
    else b->head = &req;
    b->tail = &req;
    b->nqueued++;
    b->nqueries += call->nq;
    if (!b->running) {
        assert(b->head == &req);  /* with no batch running, nothing stays queued */
        b->running = 1;
        atomic_store_explicit(&req.lead, 1, memory_order_relaxed);
    } else if (b->leader_waiting &&
               (b->nqueued >= b->expect || b->nqueries >= be->batch_max_queries)) {
        pthread_cond_signal(&b->companions);  /* enough may be in: it counts again */
    }
    for (;;) {  /* lock held */
        if (atomic_load_explicit(&req.lead, memory_order_relaxed)) {
            assert(b->running && b->head == &req);
            atomic_store_explicit(&req.lead, 0, memory_order_relaxed);
            sml_batch_req *first = sml_batch_take(b, be->batch_max_queries);
            pthread_mutex_unlock(&b->lock);
            sml_batch_run(b, index, first, &req);
            pthread_mutex_lock(&b->lock);
            continue;
        }
        const int state = atomic_load_explicit(&req.state, memory_order_relaxed);
        if (state != SML_QUEUED && state != SML_TAKEN) break;
        const unsigned seen = atomic_load_explicit(&b->gen, memory_order_relaxed);
        pthread_mutex_unlock(&b->lock);
        sml_gen_wait(b, seen);
        /* woken: a search that ended returns without the mutex (its leader
         * touches it no more once it has marked it) */
        const int now = atomic_load_explicit(&req.state, memory_order_acquire);
        if (now == SML_DONE) return req.status;
        if (now == SML_ALONE) return index->vt->search(index, call);
        pthread_mutex_lock(&b->lock);
    }
    const int alone = atomic_load_explicit(&req.state, memory_order_relaxed) == SML_ALONE;
    pthread_mutex_unlock(&b->lock);
    return alone ? index->vt->search(index, call) : req.status;
}
