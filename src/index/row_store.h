/* row_store.h: the growable arrays of rows behind the flat index types
 * (Flat: vectors and norms; flat XFBQ: codes and vectors; flat SQ: codes).
 *
 * A store holds up to SML_ROW_STORE_COLUMNS columns of backend memory, each
 * capacity rows of its own width, the rows' ids in backend memory and a host
 * copy of them (for remove, reconstruct and save without a download), and
 * optionally the backend's shadow of one column (sml_row_store_shadow).  The
 * caller keeps the count of rows in use.  Nothing changes in place that a
 * failure could leave half done: growing and removing build the new arrays
 * beside the old ones, and the caller commits them once every later step has
 * succeeded, or discards them; commit brings the shadow up to the new rows
 * first, and fails, changing nothing, where that fails. */
#ifndef SML_ROW_STORE_H
#define SML_ROW_STORE_H

#include "core/backend.h"
#include "core/file_io.h"

#define SML_ROW_STORE_COLUMNS 2

typedef struct sml_row_store {
    size_t width[SML_ROW_STORE_COLUMNS]; /* bytes per row; 0: the column is unused */
    void *column[SML_ROW_STORE_COLUMNS]; /* mem: capacity x width (host: see host) */
    unsigned host;                       /* bit c: column c is host memory (below) */
    int64_t *ids;                        /* mem: capacity */
    int64_t *host_ids;                   /* host: capacity */
    int64_t capacity;
    int shadow_column;                   /* the column shadowed, or -1 (below) */
    simil_metric shadow_metric;          /* for shadow_sync */
    void *shadow;                        /* the backend's shadow, or NULL */
    int64_t shadow_rows;                 /* rows [0, shadow_rows) of it are current */
} sml_row_store;

/* An empty store with columns of these widths (bytes, multiples of 4; 0 for
 * none), without a shadow. */
sml_row_store sml_row_store_empty(size_t width0, size_t width1);

/* Column c of an empty store s, rows of floats, is to have the backend's
 * shadow (backend.h, shadow_sync: on a GPU an fp16 copy that makes knn and
 * XFBQ's re-ranking faster), made with metric; none where the backend keeps
 * none.  commit keeps it in step with the rows in use, sml_row_store_sync
 * brings it up to rows filled otherwise (a load), and free frees it. */
void sml_row_store_shadow(sml_row_store *s, int c, simil_metric metric);

/* Column c of an empty store s is to live in host memory that b's kernels
 * read directly (on a GPU: pinned, mapped memory, pinned_alloc), not in
 * backend memory: for data that only a few rows of each search touch (flat
 * XFBQ's re-ranking floats, XFBQ..._host), so that the GPU holds less.  On a
 * backend whose memory is host memory already it changes nothing.  Whether
 * it takes effect is fixed when the column is first allocated. */
void sml_row_store_host_column(sml_backend *b, sml_row_store *s, int c);

/* n bytes of host memory into column c at row `at`, and out of it
 * (mem_upload / mem_download, or a copy for a host column). */
simil_status sml_row_store_put(sml_backend *b, const sml_row_store *s, int c, int64_t at,
                               const void *host, size_t bytes);
simil_status sml_row_store_get(sml_backend *b, const sml_row_store *s, int c, int64_t at,
                               void *host, size_t bytes);

/* Column c's first n rows to and from a file section (section_mem.h, or the
 * host calls for a host column). */
simil_status sml_row_store_write_column(sml_writer *w, uint32_t tag, sml_backend *b,
                                        const sml_row_store *s, int c, int64_t n);
simil_status sml_row_store_read_column(sml_reader *r, uint32_t tag, sml_backend *b,
                                       const sml_row_store *s, int c, int64_t n);

/* Free every block of s and its shadow; s stays a store of the same
 * columns, host columns and shadowed column, empty. */
void sml_row_store_free(sml_backend *b, sml_row_store *s);

/* Bring s's shadow up to its first used rows, of which those it had at the
 * last sync are unchanged (none in a freshly loaded store); on failure the
 * shadow is as it was.  Nothing without a shadow. */
simil_status sml_row_store_sync(sml_backend *b, sml_row_store *s, int64_t used);

/* *next = a store with room for need rows holding the first `used` of s: s
 * itself when it has the room, else new blocks growing by half (all or
 * none; s is left as it is).  The caller fills rows past used, then commits
 * next or discards it. */
simil_status sml_row_store_reserve(sml_backend *b, const sml_row_store *s, int64_t used,
                                   int64_t need, sml_row_store *next);

/* next (from reserve or keep), whose first used rows are filled, becomes s;
 * s's old blocks (and its shadow, where keep made next) are freed.  First
 * next's shadow is brought up to those rows (sml_row_store_sync, from the
 * rows reserve was given, or from none after keep): where that fails, next
 * is discarded and s stays as it was. */
simil_status sml_row_store_commit(sml_backend *b, sml_row_store *s, sml_row_store *next,
                                  int64_t used);

/* Drop next after a failure; s stays as it was. */
void sml_row_store_discard(sml_backend *b, const sml_row_store *s, sml_row_store *next);

/* Rows [at, at + n) of s get these ids (host), in backend memory and the
 * host copy. */
simil_status sml_row_store_put_ids(sml_backend *b, sml_row_store *s, int64_t at, int64_t n,
                                   const int64_t *ids);

/* *next = a tight new store of the rows among the first `used` of s whose id
 * is not in sorted_ids (ascending), in order; *kept its rows.  Where no row
 * goes, *next is s itself and nothing is allocated. */
simil_status sml_row_store_keep(sml_backend *b, const sml_row_store *s, int64_t used,
                                int64_t n_sorted, const int64_t *sorted_ids, sml_row_store *next,
                                int64_t *kept);

/* Remove the rows among the first `used` whose id is in sorted_ids
 * (ascending): keep, then commit where any goes (a new shadow of the rest
 * included); *removed their count, 0 on failure, which leaves s as it was. */
simil_status sml_row_store_remove(sml_backend *b, sml_row_store *s, int64_t used,
                                  int64_t n_sorted, const int64_t *sorted_ids, int64_t *removed);

/* The first `used` rows of column c as the one list of a scan (flat XFBQ,
 * flat SQ): every query of call probes it.  The view points into *one,
 * which the caller keeps while the scan runs and frees with
 * sml_row_store_scan_free. */
typedef struct sml_one_list {
    int64_t offset;
    int64_t size;
    int64_t *probes;  /* host: nq zeros */
} sml_one_list;

struct sml_search_call;
simil_status sml_row_store_scan(const sml_row_store *s, int c, int64_t used, int64_t dim,
                                simil_metric metric, const struct sml_search_call *call,
                                sml_one_list *one, sml_ivf_scan_args *scan);
void sml_row_store_scan_free(sml_one_list *one);

/* The ids of the first `used` rows, into out (host). */
void sml_row_store_ids(const sml_row_store *s, int64_t used, int64_t *out);

/* Column c of the first of the `used` rows with this id, into out (host,
 * width[c] bytes): what reconstruct returns; an error where no row has it. */
simil_status sml_row_store_reconstruct(sml_backend *b, const sml_row_store *s, int64_t used,
                                       int64_t id, int c, void *out);

/* The address of row r of column c (backend memory). */
static inline void *sml_row_store_at(const sml_row_store *s, int c, int64_t r)
{
    return (char *)s->column[c] + (size_t)r * s->width[c];
}

/* Loading n rows from a file section of their ids (tag): the ids are
 * checked against next_id (sml_ids_check), and the store is a fresh one of n rows that
 * the caller fills from the sections after, then brings its shadow up to
 * them (sml_row_store_sync).  file_row_bytes, the bytes a row takes in the
 * file, bounds n by the file's size before anything is allocated. */
simil_status sml_row_store_load_ids(sml_backend *b, sml_row_store *s, sml_reader *r,
                                    uint32_t tag, int64_t n, int64_t next_id,
                                    uint64_t file_row_bytes);

#endif
