/* search_batch.c: dynamic batching of concurrent searches (search_batch.h).
 *
 * One mutex guards the queue.  A search is in one of four states: queued,
 * taken (in a batch that runs), done (its rows written, or its own failure
 * when it ran alone in its own thread), or alone (a batch with it, or
 * another thread running it, failed: it runs again by itself, so that its
 * status and message are its own).
 *
 * Waking: the thread that ends a batch marks its searches, hands the lead
 * on if no one holds it, and wakes every waiter at once on one word (a
 * futex on Linux); a search that finds itself done returns without the
 * mutex.  Waking each waiter on its own condition variable cost the leader a
 * system call per caller, and a broadcast on one condition variable made
 * every waiter take the mutex in turn: both stretched the gap between two
 * GPU batches of 16 callers to about the length of a batch.  A lead handed
 * on while no batch ends wakes its new holder only: each waiter sleeps on
 * the word with a bit of its own (FUTEX_WAIT_BITSET).
 *
 * Batches side by side: a backend that runs up to batch_lanes batches at
 * once (the GPU's lanes; backend.h) gets them.  Once a leader has taken its
 * batch, the oldest search still queued leads the next one while fewer than
 * batch_lanes batches run.
 *
 * How long a leader waits for companions: callers that search in a loop
 * come back as soon as their batch ends, so the next batch waits, up to
 * max_wait_us after its oldest search arrived, until its share of the
 * callers has queued: the searches of the last batch, of those that ran
 * beside it and of those still queued when it was taken, divided by
 * batch_lanes (or until the batch is full; the first batch waits until
 * full).  A lone caller's share is one search: from its second call on, it
 * never waits.  Without this, the caller that came back first led a batch of
 * one while the others queued behind it, and batches of one and of all the
 * rest took turns; with lanes, the callers settle into batch_lanes groups
 * that take turns on the GPU's lanes.
 *
 * A leader's buffers for the joined queries and results are kept from batch
 * to batch, one set per batch that may run. */
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

/* batch_lanes beyond this count as this many */
#define SML_BATCH_MAX_LANES 16

#ifndef __linux__
#define FUTEX_BITSET_MATCH_ANY 0xffffffffu
#endif

/* A leader's buffers for its joined queries and results. */
typedef struct {
    float *queries;
    float *distances;
    int64_t *labels;
    size_t query_floats, result_slots, label_slots;
    int busy;
} sml_batch_buf;

typedef struct sml_batch_req {
    const sml_search_call *call;
    struct sml_batch_req *next;
    struct timespec arrival;
    unsigned bit;         /* its futex bit (one of 32: a shared bit only wakes more) */
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
    atomic_uint gen;           /* batches ended, leads handed: waiters sleep until it moves */
    int enabled;
    int64_t max_wait_us;
    sml_batch_req *head, *tail;  /* queued, oldest first */
    int64_t nqueued, nqueries;   /* searches queued, and their queries */
    int collecting;              /* a search holds the lead and has not taken its batch */
    int inflight;                /* batches taken and not ended */
    int64_t inflight_searches;   /* their searches */
    int leader_waiting;          /* a leader sleeps on companions */
    int64_t expect;              /* callers when the last batch was taken: its searches,
                                    those running, those queued (INT64_MAX: none yet) */
    unsigned arrivals;           /* for the futex bits */
    sml_batch_buf buf[SML_BATCH_MAX_LANES];
    int64_t batches, searches;
    int most_inflight;
};

_Static_assert(sizeof(atomic_uint) == sizeof(unsigned), "the futex word is an unsigned");

/* Sleep until b->gen differs from seen and a wake names bit (or
 * spuriously); lock not held. */
static void sml_gen_wait(sml_batcher *b, unsigned seen, unsigned bit)
{
#ifdef __linux__
    syscall(SYS_futex, (unsigned *)&b->gen, FUTEX_WAIT_BITSET_PRIVATE, seen, NULL, NULL, bit);
#else
    (void)bit;
    pthread_mutex_lock(&b->lock);
    while (atomic_load(&b->gen) == seen) pthread_cond_wait(&b->ended, &b->lock);
    pthread_mutex_unlock(&b->lock);
#endif
}

/* Wake the threads in sml_gen_wait whose bit is in bits
 * (FUTEX_BITSET_MATCH_ANY: all); b->gen has moved; lock not held. */
static void sml_gen_wake(sml_batcher *b, unsigned bits)
{
#ifdef __linux__
    syscall(SYS_futex, (unsigned *)&b->gen, FUTEX_WAKE_BITSET_PRIVATE, INT_MAX, NULL, NULL, bits);
#else
    (void)bits;
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
    assert(b->head == NULL && !b->collecting && b->inflight == 0);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->companions);
#ifndef __linux__
    pthread_cond_destroy(&b->ended);
#endif
    for (int i = 0; i < SML_BATCH_MAX_LANES; i++) {
        sml_free(b->buf[i].queries);
        sml_free(b->buf[i].distances);
        sml_free(b->buf[i].labels);
    }
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

void sml_batcher_counts(const sml_batcher *b, int64_t *batches, int64_t *searches,
                        int *most_at_once)
{
    pthread_mutex_lock((pthread_mutex_t *)&b->lock);
    *batches = b->batches;
    *searches = b->searches;
    *most_at_once = b->most_inflight;
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

/* How many searches the next batch waits for: its share of the callers. */
static int64_t sml_batch_share(const sml_batcher *b, int lanes)
{
    return b->expect == INT64_MAX ? INT64_MAX : (b->expect + lanes - 1) / lanes;
}

/* The leader, lock held: let the oldest search wait, up to max_wait_us after
 * it arrived, for its share of the callers (unless the batch is full), then
 * move the batch out of the queue, in order, into a list; returns its first
 * search, and its count in *count. */
static sml_batch_req *sml_batch_take(sml_batcher *b, int64_t limit, int lanes, int64_t *count)
{
    assert(b->collecting && b->inflight < lanes);
    const int64_t want = sml_batch_share(b, lanes);
    if (b->max_wait_us > 0) {
        struct timespec until = b->head->arrival;
        sml_deadline(&until, b->max_wait_us);
        for (;;) {
            int64_t n, nq;
            sml_batch_queued(b, limit, &n, &nq);
            if (n >= want || nq >= limit) break;
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
    /* the callers now: this batch's, those running, those still queued */
    b->expect = n + b->inflight_searches + b->nqueued;
    b->collecting = 0;
    b->inflight++;
    if (b->inflight > b->most_inflight) b->most_inflight = b->inflight;
    b->inflight_searches += n;
    *count = n;
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

/* The lead to the oldest queued search if no one holds it and another batch
 * may start; lock held.  Returns its futex bit (0: none handed). */
static unsigned sml_batch_hand_lead(sml_batcher *b, int lanes)
{
    if (b->head == NULL || b->collecting || b->inflight >= lanes) return 0;
    b->collecting = 1;
    atomic_store_explicit(&b->head->lead, 1, memory_order_release);
    atomic_fetch_add_explicit(&b->gen, 1, memory_order_release);
    return b->head->bit;
}

/* Run the batch of n searches that starts at first (lock not held) with
 * buffers buf, led by the thread whose search is mine; each search ends done
 * or alone, and is woken.  A search that ran by itself and failed in its own thread is
 * done, with its status: running it again would hide the failure.  Then the
 * lead goes to the oldest search still queued, if no one holds it. */
static void sml_batch_run(sml_batcher *b, const simil_index *index, sml_batch_req *first,
                          int64_t n, const sml_batch_req *mine, sml_batch_buf *buf, int lanes)
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
        s = sml_batch_grow((void **)&buf->queries, &buf->query_floats, nq * (size_t)dim,
                           sizeof(float));
        if (s == SIMIL_OK)
            s = sml_batch_grow((void **)&buf->distances, &buf->result_slots, nq * (size_t)k,
                               sizeof(float));
        if (s == SIMIL_OK)
            s = sml_batch_grow((void **)&buf->labels, &buf->label_slots, nq * (size_t)k,
                               sizeof(int64_t));
        if (s == SIMIL_OK) {
            size_t at = 0;
            for (const sml_batch_req *r = first; r != NULL; r = r->next) {
                const size_t m = (size_t)(r->call->nq * dim);
                memcpy(buf->queries + at, r->call->queries, m * sizeof(float));
                at += m;
            }
            joint.queries = buf->queries;
            joint.distances = buf->distances;
            joint.labels = buf->labels;
            s = index->vt->search(index, &joint);
        }
        if (s == SIMIL_OK) {
            size_t at = 0;
            for (const sml_batch_req *r = first; r != NULL; r = r->next) {
                const size_t m = (size_t)(r->call->nq * k);
                memcpy(r->call->distances, buf->distances + at, m * sizeof(float));
                memcpy(r->call->labels, buf->labels + at, m * sizeof(int64_t));
                at += m;
            }
        }
    }
    pthread_mutex_lock(&b->lock);
    b->batches++;
    buf->busy = 0;
    b->inflight--;
    b->inflight_searches -= n;
    for (sml_batch_req *r = first; r != NULL;) {
        /* r's thread may return as soon as it sees its state: read next first */
        sml_batch_req *next = r->next;
        r->status = s;
        b->searches++;
        atomic_store_explicit(&r->state, s == SIMIL_OK ? SML_DONE : failed_state,
                              memory_order_release);
        r = next;
    }
    sml_batch_hand_lead(b, lanes);
    atomic_fetch_add_explicit(&b->gen, 1, memory_order_release);
    pthread_mutex_unlock(&b->lock);
    sml_gen_wake(b, FUTEX_BITSET_MATCH_ANY);
}

simil_status sml_batcher_search(sml_batcher *b, const simil_index *index,
                                const sml_search_call *call)
{
    const sml_backend *be = index->backend;
    const int lanes = be->batch_lanes < 1                     ? 1
                      : be->batch_lanes > SML_BATCH_MAX_LANES ? SML_BATCH_MAX_LANES
                                                              : be->batch_lanes;
    pthread_mutex_lock(&b->lock);
    if (!b->enabled || call->nq > be->batch_max_queries || call->k > be->batch_max_k) {
        pthread_mutex_unlock(&b->lock);
        return index->vt->search(index, call);
    }
    sml_batch_req req = {.call = call, .status = SIMIL_OK};
    atomic_init(&req.state, SML_QUEUED);
    atomic_init(&req.lead, 0);
    req.bit = 1u << (b->arrivals++ % 32);
    clock_gettime(CLOCK_MONOTONIC, &req.arrival);
    if (b->tail) b->tail->next = &req;
    else b->head = &req;
    b->tail = &req;
    b->nqueued++;
    b->nqueries += call->nq;
    if (!b->collecting && b->inflight < lanes) {
        /* no one leads, and the lead was handed whenever someone queued */
        assert(b->head == &req);
        b->collecting = 1;
        atomic_store_explicit(&req.lead, 1, memory_order_relaxed);
    } else if (b->leader_waiting &&
               (b->nqueued >= sml_batch_share(b, lanes) ||
                b->nqueries >= be->batch_max_queries)) {
        pthread_cond_signal(&b->companions);  /* enough may be in: it counts again */
    }
    for (;;) {  /* lock held */
        if (atomic_load_explicit(&req.lead, memory_order_relaxed)) {
            assert(b->collecting && b->head == &req);
            atomic_store_explicit(&req.lead, 0, memory_order_relaxed);
            int64_t n;
            sml_batch_req *first = sml_batch_take(b, be->batch_max_queries, lanes, &n);
            sml_batch_buf *buf = NULL;
            for (int i = 0; i < lanes && buf == NULL; i++)
                if (!b->buf[i].busy) buf = &b->buf[i];
            assert(buf != NULL);  /* a set per batch that may run */
            buf->busy = 1;
            const unsigned next = sml_batch_hand_lead(b, lanes);
            pthread_mutex_unlock(&b->lock);
            if (next) sml_gen_wake(b, next);
            sml_batch_run(b, index, first, n, &req, buf, lanes);
            pthread_mutex_lock(&b->lock);
            continue;
        }
        const int state = atomic_load_explicit(&req.state, memory_order_relaxed);
        if (state != SML_QUEUED && state != SML_TAKEN) break;
        const unsigned seen = atomic_load_explicit(&b->gen, memory_order_relaxed);
        pthread_mutex_unlock(&b->lock);
        sml_gen_wait(b, seen, req.bit);
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
