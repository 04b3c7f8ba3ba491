/* stream_chunks.h: a source (simil/stream.h) read chunk by chunk, the next
 * chunk made ready while the caller works on the current one.
 *
 * Three ways, picked by where the caller wants the rows and what the backend
 * can do:
 *   - generated in backend memory (a generator source, a backend with a
 *     generator, backend memory wanted, no normalization): each chunk is made
 *     on the device when asked for, which takes milliseconds;
 *   - uploaded (a GPU, backend memory wanted): a producer thread moves chunk
 *     i + 1 into one of two device buffers, 64 MiB at a time, while the
 *     caller searches chunk i: straight from the caller's memory where it is
 *     pinned (and not to be normalized), else read into a small ring of
 *     pinned pieces, each piece's upload queued on the copier's stream as
 *     soon as it is read, so that reading and copying overlap too;
 *   - read on the host (host memory wanted, or the CPU): the producer thread
 *     reads chunk i + 1 into the other of two host buffers.
 * Rows are checked (NaN, Inf, norms too large for float distances) before
 * they are handed out: uploaded rows on the device where the backend can,
 * others on the host, which also normalizes them where asked. */
#ifndef SML_STREAM_CHUNKS_H
#define SML_STREAM_CHUNKS_H

#include "core/backend.h"
#include "simil/stream.h"

typedef struct sml_chunks sml_chunks;

typedef enum sml_chunks_where {
    SML_CHUNKS_HOST,    /* rows in host memory */
    SML_CHUNKS_BACKEND  /* rows in b's memory */
} sml_chunks_where;

/* What is done to rows read on the host besides the NaN and Inf check. */
enum {
    SML_CHUNKS_BOUND_NORMS = 1,  /* refuse norms too large for float distances */
    SML_CHUNKS_NORMALIZE = 2     /* scale each row to unit norm (cosine) */
};

/* Read rows [0, simil_source_rows(src)) of src in chunks of chunk_rows rows.
 * flags: SML_CHUNKS_*.  what names the rows in error messages.  src must
 * outlive the reader. */
simil_status sml_chunks_open(sml_chunks **c, sml_backend *b, const simil_source *src,
                             int64_t chunk_rows, sml_chunks_where where, unsigned flags,
                             const char *what);

/* The next chunk: *rows (n x dim floats where the reader was asked to put
 * them) holds rows [*first, *first + *n) of the source, valid until the next
 * call.  *n is 0 after the last chunk.  An error of the producer (a read
 * that failed, NaN in a row) is returned here, with its message. */
simil_status sml_chunks_next(sml_chunks *c, const float **rows, int64_t *first, int64_t *n);

/* Stop the producer, wait for copies in flight, free everything.  NULL does
 * nothing. */
void sml_chunks_close(sml_chunks *c);

/* What the reader measured so far (simil_stream_stats's fields). */
void sml_chunks_stats(sml_chunks *c, simil_stream_stats *stats);

#endif
