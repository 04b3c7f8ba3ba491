/* alloc.h: host memory for the whole library, and fault injection.
 *
 * All host allocations go through here so that tests can make the N-th one
 * fail (sml_alloc_fail_at) and prove that every out-of-memory path returns
 * SIMIL_ERR_OUT_OF_MEMORY, leaks nothing and leaves the index as it was.  GPU
 * allocations (src/cuda) ask here too, on a counter of their own
 * (sml_device_alloc_fail_at). */
#ifndef SML_ALLOC_H
#define SML_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bounds on products of caller values (counts, dimensions, k, nprobe), checked
 * before the product is formed or sizes anything.  sml_product_fits: a x b
 * (both >= 0) is at most limit.  SML_MAX_FLOATS: the most floats one array may
 * hold, so that its byte count fits ptrdiff_t. */
#define SML_MAX_FLOATS (PTRDIFF_MAX / 4)
static inline int sml_product_fits(int64_t a, int64_t b, int64_t limit)
{
    return a == 0 || b <= limit / a;
}

/* Allocate count * size bytes (64-byte aligned, uninitialized) into *out.
 * On overflow or failure returns SIMIL_ERR_OUT_OF_MEMORY with a message naming
 * what, and leaves *out NULL. */
simil_status sml_alloc(void **out, size_t count, size_t size, const char *what);

/* As sml_alloc, zero-filled. */
simil_status sml_calloc(void **out, size_t count, size_t size, const char *what);

/* Replace *p by a block of new_bytes holding its first keep_bytes.  On failure
 * *p is untouched and still owned by the caller. */
simil_status sml_grow(void **p, size_t keep_bytes, size_t new_bytes, const char *what);

/* Free memory from the functions above.  NULL is allowed. */
/* Ask for transparent huge pages on the whole pages of [p, p + bytes) where
 * that is 64 MiB or more (Linux, where THP is "madvise", Debian's default;
 * elsewhere, and on failure, nothing changes).  Large arrays written once,
 * first touch, by many threads (a k-NN graph's 1.3 GB of results for 10M
 * rows) are bound by the page faults in 4 KiB pages: the join's results went
 * home at 1.7 GB/s on an H100 machine's host.  sml_alloc advises its own
 * large blocks; a caller's output arrays that the library will fill whole
 * may be advised too. */
void sml_huge_pages(void *p, size_t bytes);

void sml_free(void *p);

/* strdup through sml_alloc. */
simil_status sml_strdup(char **out, const char *s);

/* Fault injection for tests: the n-th allocation from now (1 = the next one)
 * fails, and so does every later one while sticky is set.  n = 0 turns it off.
 * Returns how many allocations have been made since the last call. */
int64_t sml_alloc_fail_at(int64_t n, int sticky);

/* The same for GPU allocations (device memory and pinned host memory), with a
 * counter of their own: the CUDA backend asks sml_device_alloc_injected_failure
 * before each cudaMalloc and cudaMallocHost, which counts the allocation and
 * returns nonzero when it is to fail.  cuBLAS's own allocations are not
 * counted. */
int64_t sml_device_alloc_fail_at(int64_t n, int sticky);
int sml_device_alloc_injected_failure(void);

#ifdef __cplusplus
}
#endif
#endif
