/* ivf.h: what every inverted-file index shares (IVF-Flat, IVF-PQ, IVF-XFBQ):
 * the coarse quantizer and the inverted lists.
 *
 * The coarse quantizer is nlist centroids trained by k-means; a vector belongs
 * to the list of its nearest centroid.  The lists live in one arena of
 * backend memory: list l holds size[l] rows at offset[l], with room for cap[l]
 * (the rest is slack), each row a code of code_size bytes (the vector itself
 * for IVF-Flat) plus an int64 id in a parallel array.  Adding fills the slack;
 * a list that outgrows its room moves the whole arena to a new layout where it
 * has half as much room again.  Every change is built beside the old arena and
 * swapped in only when complete, so a failed call leaves the index as it was.
 * A host copy of the ids serves remove and reconstruct. */
#ifndef SML_IVF_H
#define SML_IVF_H

#include "core/backend.h"
#include "core/file_io.h"
#include "simil/kmeans.h"

typedef struct sml_ivf {
    int64_t nlist;
    int64_t dim;
    simil_metric metric;      /* of the coarse search: L2 or IP */
    int spherical;            /* cosine: unit-norm centroids */
    size_t code_size;         /* bytes per stored row, a multiple of 4 */
    /* Rows may end in data derived from their code (IVF-PQ's term 1): files
     * hold the first file_code_size bytes of each row (code_size unless set).
     * Where derive is set, loading hands it each list's rows, widened, to
     * rebuild the rest (derive(derive_owner, list, n, rows)); it returns 0
     * where a code is not one the owner could have written.  It must be set
     * when file_code_size < code_size. */
    size_t file_code_size;
    int (*derive)(const void *owner, int64_t list, int64_t n, uint8_t *rows);
    const void *derive_owner;
    float *centroids;         /* host: nlist x dim; NULL until trained or loaded */
    float *centroids_mem;     /* backend: the same, their squared norms, ids 0..nlist-1 */
    float *centroid_norms_mem;
    int64_t *centroid_ids_mem;
    void *centroid_shadow;    /* the backend's shadow of centroids_mem (backend.h), or NULL */
    int trained;
    /* the arena */
    uint8_t *codes_mem;       /* backend: capacity x code_size */
    int64_t *ids_mem;         /* backend: capacity */
    int64_t *host_ids;        /* host copy of ids_mem */
    int64_t capacity;
    int64_t *offset;          /* host, per list; NULL until trained or loaded */
    int64_t *size;
    int64_t *cap;
    /* On a GPU: offset and size in backend memory (sml_ivf_lists.layout), so
     * that a small batch does not send them with every call.  Every change of
     * offset or size clears layout_ok; the mutators that end well copy them
     * again.  A copy that fails leaves layout_ok clear: scans then send the
     * host arrays, as on the CPU. */
    int64_t *layout_mem;
    int layout_ok;
} sml_ivf;

/* An empty, untrained IVF.  Nothing sized by nlist or dim is allocated until
 * the IVF is trained or loaded (an untrained index file is a few bytes, and
 * so is what loading it costs).  On failure nothing is left to free. */
simil_status sml_ivf_init(sml_ivf *ivf, int64_t nlist, int64_t dim, simil_metric metric,
                          int spherical, size_t code_size);
void sml_ivf_free(sml_backend *b, sml_ivf *ivf);

/* The k-means settings a coarse quantizer of nlist lists trains with (the
 * list join of k-NN graphs trains with them too). */
void sml_ivf_kmeans_params(int64_t nlist, int spherical, simil_kmeans_params *p);

/* Train the coarse quantizer with k-means on n vectors (host). */
simil_status sml_ivf_train(sml_backend *b, sml_ivf *ivf, int64_t n, const float *x);

/* Exchange the coarse quantizers (centroids, host and backend, and the trained
 * flag) of two IVFs of the same shape; the lists stay.  Training into a fresh
 * IVF and swapping it in when every later step has succeeded keeps a failed
 * train from changing the index. */
void sml_ivf_swap_quantizer(sml_ivf *ivf, sml_ivf *other);

/* Use these nlist x dim centroids (host, copied) as the trained coarse
 * quantizer, e.g. one read from another library's file. */
simil_status sml_ivf_set_centroids(sml_backend *b, sml_ivf *ivf, const float *centroids);

/* The nprobe nearest lists of each of n vectors (host): lists n x nprobe,
 * nearest first. */
simil_status sml_ivf_probe(sml_backend *b, const sml_ivf *ivf, int64_t n, const float *x,
                           int64_t nprobe, int64_t *lists);

struct sml_search_call;

/* The lists as scans read them (backend.h): valid until the next change. */
sml_ivf_lists sml_ivf_lists_of(const sml_ivf *ivf);

/* The scan of a search call (index_internal.h): its queries, k, outputs and
 * threads, nprobe from its parameters (1 to nlist), the lists, and the coarse
 * quantizer as the k-NN search that finds the probes (probes.coarse_search,
 * no probe lists: the backend finds them).  The caller wraps it with what
 * its codes need. */
sml_ivf_scan_args sml_ivf_scan_of(const sml_ivf *ivf, const struct sml_search_call *call);

/* out = each of n vectors x (host) minus the centroid of its list lists[i]
 * (host): the residuals that IVF-PQ and IVF-SQ code. */
void sml_ivf_residuals(const sml_ivf *ivf, int64_t n, const float *x, const int64_t *lists,
                       float *out);

/* Append n rows: row i goes to list lists[i], with code codes + i * code_size
 * (host) and id ids[i]. */
simil_status sml_ivf_append(sml_backend *b, sml_ivf *ivf, int64_t n, const int64_t *lists,
                            const void *codes, const int64_t *ids);

/* Make room for extra[l] more rows in every list l (the lists' room becomes
 * at least size + extra; nothing moves if they have it), so that appends of
 * that many rows never move the arena.  A large build that knows its list
 * sizes lays the arena out once, at its final size, instead of growing it
 * (each growth holds the old and the new arena at once). */
simil_status sml_ivf_reserve(sml_backend *b, sml_ivf *ivf, const int64_t *extra);

/* Undo appends without allocating: every list l back to sizes[l] rows, its
 * size before them (appends put rows after a list's last). */
void sml_ivf_truncate(sml_ivf *ivf, const int64_t *sizes);

/* Remove every row whose id is in sorted_ids (ascending, no repeats). */
simil_status sml_ivf_remove(sml_backend *b, sml_ivf *ivf, int64_t n_sorted,
                            const int64_t *sorted_ids, int64_t *removed);

/* Arena row of the first row with this id, or -1. */
int64_t sml_ivf_find(const sml_ivf *ivf, int64_t id);

/* The ids of every row, list after list, into out. */
void sml_ivf_ids(const sml_ivf *ivf, int64_t *out);

/* The list that holds arena row `row` (a row of some list). */
int64_t sml_ivf_list_of(const sml_ivf *ivf, int64_t row);

/* Empty every list; the quantizer stays. */
void sml_ivf_reset(sml_backend *b, sml_ivf *ivf);

/* n rows of `from` bytes at base, moved apart (in place) to rows of `to`
 * bytes, the new tail bytes zeroed (widen, to > from); or the first `to`
 * bytes of each, packed together (narrow, to < from). */
void sml_rows_widen(uint8_t *base, int64_t n, size_t from, size_t to);
void sml_rows_narrow(uint8_t *base, int64_t n, size_t from, size_t to);

/* Sections IVFC (centroids), LSIZ (list sizes), LIDS (ids), LCOD (codes),
 * lists in order.  Load expects ntotal rows in all, each id fitting next_id
 * (sml_id_fits). */
simil_status sml_ivf_save(sml_backend *b, const sml_ivf *ivf, sml_writer *w);
simil_status sml_ivf_load(sml_backend *b, sml_ivf *ivf, sml_reader *r, int64_t ntotal,
                          int64_t next_id);

#endif
