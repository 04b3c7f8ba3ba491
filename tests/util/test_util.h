/* test_util.h: helpers shared by the test programs.
 *
 * Random data comes from a seeded splitmix64 so every failure can be replayed;
 * tests print their seed and shape when they fail (SML_TEST_CONTEXT).  The
 * reference k-NN is a plain float64 loop: the oracle for every index. */
#ifndef SML_TEST_UTIL_H
#define SML_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "simil/simil.h"

/* Fill n floats with values uniform in [lo, hi). */
void sml_test_fill_uniform(float *x, int64_t n, uint64_t seed, float lo, float hi);

/* malloc that fails the test on NULL. */
void *sml_test_malloc(size_t bytes);

/* A (key, position) pair, and a sort of n of them in the order of every
 * selection: key, then position (the caller maps NaN to +inf; -0 and +0 are
 * equal). */
typedef struct {
    float key;
    int64_t pos;
} sml_test_key_pos;
void sml_test_sort_key_pos(sml_test_key_pos *pairs, int64_t n);

/* Float64 reference search: for each query the k best (distance, position)
 * pairs, sorted by distance then position, distance +-inf and label -1 past n.
 * metric is L2 or IP (cosine must be normalized by the caller). */
void sml_test_reference_knn(const float *base, int64_t n, const float *queries, int64_t nq,
                            int64_t dim, int64_t k, simil_metric metric, double *distances,
                            int64_t *labels);

/* The float64 k-NN graph of n vectors as the graph build defines it: each
 * row's k + 1 nearest, the row itself dropped (or the last when it is not
 * among them); distances rounded to float. */
void sml_test_reference_graph(const float *x, int64_t n, int64_t dim, int64_t k,
                              simil_metric metric, int64_t *ids, float *distances);

/* n rows of blobs, malloc'd: `clusters` centres uniform in [-1, 1)^dim, row i
 * the centre i % clusters plus uniform noise of half-width spread. */
float *sml_test_blobs(int64_t n, int64_t dim, int64_t clusters, float spread, uint64_t seed);

/* Exact float64 distance between two vectors under metric (L2 or IP). */
double sml_test_distance(const float *a, const float *b, int64_t dim, simil_metric metric);

/* Check search results against the reference, tolerating ties:
 * every returned distance matches the reference distance at the same rank
 * within rel_tol (relative to max(|ref|, scale)), every returned label is a
 * valid position whose true distance matches the returned one, no label
 * repeats, and labels equal the reference where neighbouring reference
 * distances are not within tolerance of each other.  Fails the test with
 * context on the first mismatch. */
void sml_test_check_knn(const char *context, const float *base, int64_t n,
                        const float *queries, int64_t nq, int64_t dim, int64_t k,
                        simil_metric metric, const float *distances, const int64_t *labels,
                        double rel_tol);

/* sml_test_check_knn for results of an index of any metric: for cosine, base
 * and queries are normalized in place and checked as inner product. */
void sml_test_check_knn_metric(const char *context, float *base, int64_t n, float *queries,
                               int64_t nq, int64_t dim, int64_t k, simil_metric metric,
                               const float *distances, const int64_t *labels, double rel_tol);

/* Check results against other results of the same search (e.g. GPU against
 * CPU) with the tolerance rules of sml_test_check_knn: distances equal within
 * rel_tol at every rank, labels equal except where the reference has a near
 * tie at that rank, and every label's true distance matching.  Labels are
 * positions in base. */
void sml_test_check_same(const char *context, const float *base, int64_t n, const float *queries,
                         int64_t nq, int64_t dim, int64_t k, simil_metric metric,
                         const float *distances, const int64_t *labels,
                         const float *ref_distances, const int64_t *ref_labels, double rel_tol);

/* Nonzero when SIMIL_TEST_QUICK is set: GPU tests shrink their sizes so
 * that they run under compute-sanitizer in reasonable time. */
int sml_test_quick(void);

/* Exit with SML_TEST_SKIP, saying so, when no GPU is usable.  With
 * SIMIL_TEST_FILTER set, only the test functions it matches will run; with
 * SIMIL_TEST_SELECT=DESIGN[:WARPS], every k-selection runs that design
 * (sml_cuda_select_force). */
void sml_test_require_gpu(void);

/* A new search parameters handle with these settings, e.g. "nprobe=8,threads=1"
 * ("" for the defaults); fails the test if they do not apply.  The caller
 * destroys it (simil_search_params_destroy). */
simil_search_params *sml_test_params(const char *settings);

/* allowed[id] for ids below nids: a pseudo-random share `percent` (of 100),
 * fixed by seed.  Free with free(). */
unsigned char *sml_test_random_allowed(int64_t nids, int percent, uint64_t seed);

/* The ids allowed[0 .. nids) allows, as a bitset in *bits and as a list in
 * *list: two handles with settings, for filtered searches that must agree. */
void sml_test_allow_params(const unsigned char *allowed, int64_t nids, const char *settings,
                           simil_search_params **bits, simil_search_params **list);

/* Filtered results (d, l: nq x k) against a full ranking of the same index
 * (D, L: nq x all): the ranking's allowed rows, first k, bit for bit, then
 * empty slots (id -1, and distance *empty unless empty is NULL). */
void sml_test_check_filtered_ranking(const char *what, int64_t nq, int64_t k, int64_t all,
                                     const float *D, const int64_t *L, const float *d,
                                     const int64_t *l, const unsigned char *allowed,
                                     const float *empty);

/* A k-NN graph sink (simil_knn_graph_stream) into ids and dist, n x k: rows
 * must come in order, without gaps (next: the row expected next). */
typedef struct sml_test_sink {
    int64_t *ids;
    float *dist;
    int64_t next;
} sml_test_sink;
simil_status sml_test_sink_rows(void *user, int64_t first, int64_t count, int64_t k,
                                const int64_t *ids, const float *dist);

/* A Flat index on device holding the n rows of base (ids 0..n-1); fails the
 * test on error. */
simil_index *sml_test_flat_index(const char *device, int64_t dim, simil_metric metric, int64_t n,
                                 const float *base);

/* A new index of description desc on device, trained on the n rows of x and
 * holding them (ids 0..n-1); fails the test on error.  check_trained: also
 * check that the new index reports untrained and the trained one trained
 * (for types that need training). */
simil_index *sml_test_trained_index(const char *device, const char *desc, int64_t dim,
                                    simil_metric metric, int64_t n, const float *x,
                                    int check_trained);

/* simil_index_search with nprobe set (the other settings at their defaults);
 * fails the test on error. */
void sml_test_search_nprobe(const simil_index *index, int64_t nq, const float *queries,
                            int64_t k, int64_t nprobe, float *distances, int64_t *labels);

/* The share of the first r true neighbours of each query (truth, nq x k)
 * among the k found (found, nq x k): r = k gives recall k@k, r = 1 the
 * 1-recall@k. */
double sml_test_recall(const int64_t *found, const int64_t *truth, int64_t nq, int64_t k,
                       int64_t r);

/* Normalize rows in place (zero rows stay zero). */
void sml_test_normalize(float *x, int64_t n, int64_t dim);

/* A whole file in a new buffer (free() it), its size in *size; and a buffer
 * written as a whole file.  Either fails the test on an error. */
unsigned char *sml_test_read_file(const char *path, long *size);
void sml_test_write_file(const char *path, const unsigned char *buf, long size);

/* A fresh temporary folder for this test program; removed at exit. */
const char *sml_test_tmpdir(void);
/* tmpdir + "/" + name, in a static buffer rotated over 8 slots. */
const char *sml_test_path(const char *name);

/* Fault injection (tests/reliability/test_fault_injection.c for host
 * allocations, tests/cuda/test_cuda_fault_injection.c for GPU ones): one
 * operation, run with the N-th allocation failing for N = 1, 2, ...
 * prepare and finish run with injection off; run is the call under test;
 * check_failed checks the state after a failure, check_ok after a success.
 * Any of them but run may be NULL. */
typedef struct sml_fi_case {
    const char *name;
    void (*prepare)(void *ctx);
    simil_status (*run)(void *ctx);
    void (*check_failed)(void *ctx);
    void (*check_ok)(void *ctx);
    void (*finish)(void *ctx);
} sml_fi_case;

/* Which allocations fail, and what else is checked after each attempt. */
typedef struct sml_fi_driver {
    /* sml_alloc_fail_at or sml_device_alloc_fail_at (src/core/alloc.h) */
    int64_t (*fail_at)(int64_t n, int sticky);
    /* may be NULL: called after finish of every attempt (e.g. a leak check) */
    void (*after_each)(const sml_fi_case *c, int64_t n, int sticky, void *ctx);
    int once_only;        /* skip the sticky pass */
    int64_t total_points; /* summed by sml_fi_both, for the report */
} sml_fi_driver;

/* Run c with allocation N failing (sticky: N and every later one), for
 * N = 1, 2, ... until the call succeeds with fewer than N allocations.  Each
 * failure must be SIMIL_ERR_OUT_OF_MEMORY with a message.  Returns the number
 * of allocations the call makes when none fails (its allocation points). */
int64_t sml_fi_run(const sml_fi_driver *d, const sml_fi_case *c, void *ctx, int sticky);

/* sml_fi_run alone, then sticky (unless d->once_only), checking both find the
 * same points; prints the count, adds it to d->total_points and returns it. */
int64_t sml_fi_both(sml_fi_driver *d, const sml_fi_case *c, void *ctx);

/* Assert a simil call returned the expected status; on mismatch print the
 * call, both status names and the library's message. */
#define SML_ASSERT_STATUS(expected, call)                                              \
    do {                                                                               \
        simil_status sml_got_ = (call);                                                \
        if (sml_got_ != (expected)) {                                                  \
            fail_msg("%s returned %s (%s), expected %s", #call, simil_status_name(sml_got_), \
                     simil_last_error(), simil_status_name(expected));                 \
        }                                                                              \
    } while (0)

#define SML_ASSERT_OK(call) SML_ASSERT_STATUS(SIMIL_OK, call)

/* Exit code CTest reads as "skipped" (SKIP_RETURN_CODE). */
#define SML_TEST_SKIP 77

#endif
