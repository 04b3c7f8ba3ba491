/* stream_chunks.c: reading a source chunk by chunk behind the caller's work
 * (stream_chunks.h).
 *
 * Two slots, each FREE (the producer may fill it) or READY (it holds the
 * chunk the caller asks for next); the caller owns a slot from next() to the
 * following next().  Chunk t always uses slot t % 2, and, on a GPU, copier
 * lane t % 2: the producer fills slot t's device buffer as soon as the
 * caller has released chunk t - 2, marks the lane after the chunk's last
 * piece, and the caller waits on the lane before it reads the device copy.
 *
 * Uploads go piece by piece (64 MiB), from the caller's own memory where it
 * is pinned, else through a ring of SML_CHUNKS_RING pinned pieces: piece p
 * is read into ring entry p % SML_CHUNKS_RING once that entry's previous
 * upload (copier lane 2 + p % SML_CHUNKS_RING) has landed.  A ring of
 * pieces, not a pinned buffer per chunk: pinning gigabytes takes seconds
 * per call (cudaMallocHost), longer than the copies it serves.
 *
 * Uploaded rows are checked on the device where the backend can
 * (copier_check, queued after the chunk's last piece in place of the lane's
 * bare mark): a host pass over a gigabyte took 55-64 ms on the H100's host
 * against 20 ms for its copy, so the stream ran at a third of the bus.  A
 * row the device flags is fetched and checked again on the host, which
 * writes the message; the host check stays where rows are normalized on the
 * host anyway. */
#define _POSIX_C_SOURCE 200809L
#include "index/stream_chunks.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/source.h"
#include "core/trace.h"
#include "core/vectors.h"

typedef enum sml_chunks_mode { SML_MODE_GENERATE, SML_MODE_UPLOAD, SML_MODE_HOST } sml_chunks_mode;

enum { SML_SLOT_FREE, SML_SLOT_READY };

/* Pinned pieces a host read goes through on its way up; lanes 0 and 1 of
 * the copier are the chunks', the rest the ring's. */
enum { SML_CHUNKS_RING = 4 };
_Static_assert(2 + SML_CHUNKS_RING <= SML_COPIER_LANES, "a copier lane per ring piece");

typedef struct sml_chunk_slot {
    float *host;   /* host mode: where the producer reads to */
    float *mem;    /* where the caller reads: backend memory, or host itself */
    int64_t first, n;
    int state;
} sml_chunk_slot;

struct sml_chunks {
    sml_backend *b;
    const simil_source *src;
    int64_t rows, dim, chunk_rows, nchunks;
    int64_t piece_rows;  /* rows read, then queued for upload, at a time */
    sml_chunks_mode mode;
    const float *pinned_src; /* upload: the source's rows, pinned, or NULL */
    int check_on_device; /* upload: rows checked by copier_check, not on the host */
    float *ring[SML_CHUNKS_RING]; /* upload without pinned_src: pinned pieces */
    int64_t pieces;      /* pieces uploaded through the ring so far */
    unsigned flags;
    char what[64];
    void *copier, *gen;
    sml_chunk_slot slot[2];
    int64_t next_chunk;  /* the chunk next() hands out next */
    int held;            /* the caller holds the slot of chunk next_chunk - 1 */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stop;
    simil_status failed; /* the producer's error, and its message */
    char message[1024];
    double read_seconds, wait_seconds;
    uint64_t bytes_uploaded;
};

static double sml_chunks_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Check the m rows at rows, rows [at, at + m) of the source, which are
 * named as part of its rows [first, first + n): NaN, Inf and, where asked,
 * norms too large for float distances. */
static simil_status sml_chunks_check(const sml_chunks *c, const float *rows, int64_t at,
                                     int64_t m, int64_t first, int64_t n)
{
    char what[160];
    snprintf(what, sizeof what, "rows [%lld, %lld) of %s '%s'", (long long)first,
             (long long)(first + n), c->what, simil_source_name(c->src));
    return sml_vectors_check_from(rows, m, c->dim, (c->flags & SML_CHUNKS_BOUND_NORMS) != 0,
                                  what, at);
}

/* Read, check (unless the device will) and (cosine) normalize rows
 * [first, first + n) into host. */
static simil_status sml_chunks_read(sml_chunks *c, int64_t first, int64_t n, float *host)
{
    SML_TRY(simil_source_read(c->src, first, n, host));
    if (!c->check_on_device) SML_TRY(sml_chunks_check(c, host, first, n, first, n));
    if (c->flags & SML_CHUNKS_NORMALIZE) sml_vectors_normalize(host, n, c->dim, host);
    return SIMIL_OK;
}

/* Chunk t (rows [first, first + n)) into the device buffer mem, a piece at a
 * time, each piece's upload queued as soon as it is read so that reading the
 * next piece overlaps its copy; then check the chunk on the device, or only
 * mark lane t % 2. */
static simil_status sml_chunks_upload(sml_chunks *c, int64_t t, int64_t first, int64_t n,
                                      float *mem)
{
    sml_backend *b = c->b;
    for (int64_t at = 0; at < n; at += c->piece_rows) {
        const int64_t m = n - at < c->piece_rows ? n - at : c->piece_rows;
        const size_t off = (size_t)(at * c->dim), bytes = sizeof(float) * (size_t)(m * c->dim);
        if (c->pinned_src != NULL) {
            const float *rows = c->pinned_src + (first + at) * c->dim;
            if (!c->check_on_device) SML_TRY(sml_chunks_check(c, rows, first + at, m, first, n));
            SML_TRY(b->ops->copier_upload(b, c->copier, (int)(t & 1), mem + off, rows, bytes));
            continue;
        }
        const int r = (int)(c->pieces++ % SML_CHUNKS_RING);
        SML_TRY(b->ops->copier_wait(b, c->copier, 2 + r));
        SML_TRY(sml_chunks_read(c, first + at, m, c->ring[r]));
        SML_TRY(b->ops->copier_upload(b, c->copier, 2 + r, mem + off, c->ring[r], bytes));
    }
    if (c->check_on_device)
        return b->ops->copier_check(b, c->copier, (int)(t & 1), mem, n, c->dim,
                                    (c->flags & SML_CHUNKS_BOUND_NORMS) != 0);
    return b->ops->copier_upload(b, c->copier, (int)(t & 1), NULL, NULL, 0);
}

static void *sml_chunks_produce(void *arg)
{
    sml_chunks *c = arg;
    for (int64_t t = 0; t < c->nchunks; t++) {
        sml_chunk_slot *s = &c->slot[t & 1];
        pthread_mutex_lock(&c->lock);
        while (s->state != SML_SLOT_FREE && !c->stop) pthread_cond_wait(&c->cond, &c->lock);
        const int stop = c->stop;
        pthread_mutex_unlock(&c->lock);
        if (stop) break;
        const int64_t first = t * c->chunk_rows;
        const int64_t n = c->rows - first < c->chunk_rows ? c->rows - first : c->chunk_rows;
        const double t0 = sml_chunks_now();
        const size_t bytes = sizeof(float) * (size_t)(n * c->dim);
        sml_trace_mark(NULL);
        simil_status st = c->mode == SML_MODE_UPLOAD ? sml_chunks_upload(c, t, first, n, s->mem)
                                                     : sml_chunks_read(c, first, n, s->host);
        sml_trace_mark("stream producer: a chunk read, checked and queued");
        pthread_mutex_lock(&c->lock);
        c->read_seconds += sml_chunks_now() - t0;
        if (st != SIMIL_OK) {
            c->failed = st;
            snprintf(c->message, sizeof c->message, "%s", simil_last_error());
        } else {
            if (c->mode == SML_MODE_UPLOAD) c->bytes_uploaded += bytes;
            s->first = first;
            s->n = n;
            s->state = SML_SLOT_READY;
        }
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        if (st != SIMIL_OK) break;
    }
    return NULL;
}

static simil_status sml_chunks_buffers(sml_chunks *c)
{
    sml_backend *b = c->b;
    const size_t bytes = sizeof(float) * (size_t)(c->chunk_rows * c->dim);
    const int slots = c->mode == SML_MODE_GENERATE ? 1 : 2;
    for (int i = 0; i < slots; i++) {
        sml_chunk_slot *s = &c->slot[i];
        if (c->mode == SML_MODE_HOST) SML_TRY(sml_alloc((void **)&s->host, bytes, 1, "a chunk"));
        if (c->mode != SML_MODE_HOST) SML_TRY(b->ops->mem_alloc(b, bytes, (void **)&s->mem));
        if (c->mode == SML_MODE_HOST) s->mem = s->host;
    }
    if (c->mode != SML_MODE_UPLOAD || c->pinned_src != NULL) return SIMIL_OK;
    const int64_t piece = c->piece_rows < c->chunk_rows ? c->piece_rows : c->chunk_rows;
    for (int r = 0; r < SML_CHUNKS_RING; r++)
        SML_TRY(b->ops->pinned_alloc(b, sizeof(float) * (size_t)(piece * c->dim),
                                     (void **)&c->ring[r]));
    return SIMIL_OK;
}

static simil_status sml_chunks_start(sml_chunks *c)
{
    sml_backend *b = c->b;
    const char *kind;
    uint64_t seed;
    int64_t offset;
    if (c->mode == SML_MODE_GENERATE) {
        SML_RETURN_IF(!sml_source_generator(c->src, &kind, &seed, &offset), SIMIL_ERR_INTERNAL,
                      "generating a source that is not a generator");
        SML_TRY(b->ops->generator_open(b, kind, c->dim, seed, &c->gen));
    }
    if (c->mode == SML_MODE_UPLOAD) {
        SML_TRY(b->ops->copier_open(b, &c->copier));
        /* the caller's rows go up as they are when pinned, unless they are
         * to be normalized, which writes them */
        const float *rows;
        if (!(c->flags & SML_CHUNKS_NORMALIZE) && b->ops->host_pinned != NULL &&
            sml_source_memory(c->src, &rows) &&
            b->ops->host_pinned(b, rows, sizeof(float) * (size_t)(c->rows * c->dim)))
            c->pinned_src = rows;
        c->check_on_device = !(c->flags & SML_CHUNKS_NORMALIZE) && b->ops->copier_check != NULL;
    }
    SML_TRY(sml_chunks_buffers(c));
    if (c->mode == SML_MODE_GENERATE || c->nchunks == 0) return SIMIL_OK;
    SML_RETURN_IF(pthread_create(&c->thread, NULL, sml_chunks_produce, c) != 0,
                  SIMIL_ERR_OUT_OF_MEMORY, "cannot start a thread to read %s", c->what);
    c->thread_started = 1;
    return SIMIL_OK;
}

simil_status sml_chunks_open(sml_chunks **out, sml_backend *b, const simil_source *src,
                             int64_t chunk_rows, sml_chunks_where where, unsigned flags,
                             const char *what)
{
    *out = NULL;
    const char *kind;
    uint64_t seed;
    int64_t offset;
    sml_chunks *c;
    SML_TRY(sml_calloc((void **)&c, 1, sizeof *c, "a chunk reader"));
    c->b = b;
    c->src = src;
    c->rows = simil_source_rows(src);
    c->dim = simil_source_dim(src);
    c->chunk_rows = chunk_rows < c->rows ? chunk_rows : c->rows;
    if (c->chunk_rows < 1) c->chunk_rows = 1;
    c->nchunks = (c->rows + c->chunk_rows - 1) / c->chunk_rows;
    c->piece_rows = ((int64_t)64 << 20) / (4 * (c->dim > 0 ? c->dim : 1));
    if (c->piece_rows < 1) c->piece_rows = 1;
    c->flags = flags;
    snprintf(c->what, sizeof c->what, "%s", what);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    if (where == SML_CHUNKS_BACKEND && b->gpu >= 0 && !(flags & SML_CHUNKS_NORMALIZE) &&
        b->ops->generator_open &&
        sml_source_generator(src, &kind, &seed, &offset))
        c->mode = SML_MODE_GENERATE;
    else if (where == SML_CHUNKS_BACKEND && b->gpu >= 0)
        c->mode = SML_MODE_UPLOAD;
    else
        c->mode = SML_MODE_HOST;
    simil_status s = SIMIL_OK;
    if (c->mode == SML_MODE_UPLOAD && (b->ops->copier_open == NULL || b->ops->pinned_alloc == NULL))
        s = sml_error(SIMIL_ERR_UNSUPPORTED, "the backend %s cannot stream data to its memory",
                      b->name);
    if (s == SIMIL_OK) s = sml_chunks_start(c);
    if (s != SIMIL_OK) {
        sml_chunks_close(c);
        return s;
    }
    *out = c;
    return SIMIL_OK;
}

/* The device's verdict on chunk t (rows [first, first + n) at mem), whose
 * lane has been waited for: a row it flags is fetched and checked on the
 * host, which names the fault; a row the host passes (a norm at the bound,
 * summed in another order) sends the device on from the row after it. */
static simil_status sml_chunks_checked(sml_chunks *c, int64_t t, const float *mem,
                                       int64_t first, int64_t n)
{
    sml_backend *b = c->b;
    const int lane = (int)(t & 1);
    int64_t bad;
    SML_TRY(b->ops->copier_checked(b, c->copier, lane, &bad));
    if (bad < 0) return SIMIL_OK;
    float *row;
    SML_TRY(sml_alloc((void **)&row, sizeof(float) * (size_t)c->dim, 1, "a row"));
    simil_status st = SIMIL_OK;
    for (int64_t from = 0; bad >= 0 && st == SIMIL_OK;) {
        const int64_t at = from + bad;
        assert(at < n);
        st = b->ops->mem_download(b, row, mem + at * c->dim, sizeof(float) * (size_t)c->dim);
        if (st == SIMIL_OK) st = sml_chunks_check(c, row, first + at, 1, first, n);
        from = at + 1;
        bad = -1;
        if (st == SIMIL_OK && from < n) {
            st = b->ops->copier_check(b, c->copier, lane, mem + from * c->dim, n - from, c->dim,
                                      (c->flags & SML_CHUNKS_BOUND_NORMS) != 0);
            if (st == SIMIL_OK) st = b->ops->copier_checked(b, c->copier, lane, &bad);
        }
    }
    sml_free(row);
    return st;
}

/* Hand back the slot of the chunk the caller held. */
static void sml_chunks_release(sml_chunks *c)
{
    if (!c->held) return;
    c->held = 0;
    pthread_mutex_lock(&c->lock);
    c->slot[(c->next_chunk - 1) & 1].state = SML_SLOT_FREE;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

simil_status sml_chunks_next(sml_chunks *c, const float **rows, int64_t *first, int64_t *n)
{
    sml_chunks_release(c);
    *rows = NULL;
    *first = c->next_chunk * c->chunk_rows;
    *n = 0;
    if (c->next_chunk == c->nchunks) return SIMIL_OK;
    const int64_t t = c->next_chunk;
    sml_chunk_slot *s = &c->slot[c->mode == SML_MODE_GENERATE ? 0 : t & 1];
    const double t0 = sml_chunks_now();
    if (c->mode == SML_MODE_GENERATE) {
        s->first = *first;
        s->n = c->rows - *first < c->chunk_rows ? c->rows - *first : c->chunk_rows;
        const char *kind;
        uint64_t seed;
        int64_t offset;
        sml_source_generator(c->src, &kind, &seed, &offset);
        SML_TRY(c->b->ops->generator_fill(c->b, c->gen, offset + s->first, s->n, s->mem));
        c->read_seconds += sml_chunks_now() - t0;
    } else {
        pthread_mutex_lock(&c->lock);
        while (s->state != SML_SLOT_READY && c->failed == SIMIL_OK)
            pthread_cond_wait(&c->cond, &c->lock);
        const simil_status failed = s->state == SML_SLOT_READY ? SIMIL_OK : c->failed;
        pthread_mutex_unlock(&c->lock);
        SML_RETURN_IF(failed != SIMIL_OK, failed, "%s", c->message);
        if (c->mode == SML_MODE_UPLOAD)
            SML_TRY(c->b->ops->copier_wait(c->b, c->copier, (int)(t & 1)));
        if (c->check_on_device) SML_TRY(sml_chunks_checked(c, t, s->mem, s->first, s->n));
        c->wait_seconds += sml_chunks_now() - t0;
    }
    c->next_chunk++;
    c->held = 1;
    *rows = s->mem;
    *first = s->first;
    *n = s->n;
    return SIMIL_OK;
}

void sml_chunks_close(sml_chunks *c)
{
    if (c == NULL) return;
    sml_backend *b = c->b;
    if (c->thread_started) {
        pthread_mutex_lock(&c->lock);
        c->stop = 1;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        pthread_join(c->thread, NULL);
    }
    if (c->copier != NULL) {
        for (int lane = 0; lane < 2 + SML_CHUNKS_RING; lane++)
            b->ops->copier_wait(b, c->copier, lane);
        b->ops->copier_close(b, c->copier);
    }
    for (int r = 0; r < SML_CHUNKS_RING; r++)
        if (c->ring[r] != NULL) b->ops->pinned_free(b, c->ring[r]);
    if (c->gen != NULL) b->ops->generator_close(b, c->gen);
    for (int i = 0; i < 2; i++) {
        sml_chunk_slot *s = &c->slot[i];
        if (c->mode == SML_MODE_HOST) sml_free(s->host);
        if (c->mode != SML_MODE_HOST) b->ops->mem_free(b, s->mem);
    }
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    sml_free(c);
}

void sml_chunks_stats(sml_chunks *c, simil_stream_stats *stats)
{
    pthread_mutex_lock(&c->lock);
    stats->read_seconds = c->read_seconds;
    stats->wait_seconds = c->wait_seconds;
    stats->chunks = c->next_chunk;
    stats->bytes_uploaded = c->bytes_uploaded;
    stats->generated_on_device = c->mode == SML_MODE_GENERATE;
    pthread_mutex_unlock(&c->lock);
}
