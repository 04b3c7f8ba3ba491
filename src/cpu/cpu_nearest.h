/* cpu_nearest.h: the nearest of a few short vectors, on the CPU.
 *
 * The inner step of k-means in the sub-spaces of a product quantizer and of
 * PQ encoding: each of many points of 1 to a few dozen components against the
 * 2^b codewords of one sub-quantizer.  A GEMM (K = the sub-vector width, 14 at
 * PQ56 on 784-d data) followed by an arg-min pass spends most of its time
 * writing and re-reading its distance tile; here the distances to a block of
 * 64 codewords stay in registers until the arg-min takes them (cpu_nearest.c
 * says how). */
#ifndef SML_CPU_NEAREST_H
#define SML_CPU_NEAREST_H

#include <stdint.h>

#include "simil/status.h"

/* Vectors laid out by component: component t of vector j at
 * by_dim[t * ld + j]; the ld - n columns past the last vector hold +inf, so
 * that blocks of 64 need no remainder loop. */
typedef struct sml_nearest_book {
    float *by_dim;
    int64_t n, dim, ld;
} sml_nearest_book;

/* Books for n vectors of dim floats whose rows start `stride` floats apart
 * (rows[j * stride + t]). */
simil_status sml_nearest_book_init(sml_nearest_book *book, int64_t n, int64_t dim,
                                   const float *rows, int64_t stride);
void sml_nearest_book_free(sml_nearest_book *book);

/* Bytes of a book: callers choose this path while a book fits a core's
 * caches. */
int64_t sml_nearest_book_bytes(int64_t n, int64_t dim);

/* The index of the vector of book nearest to x (book->dim floats) in squared
 * L2 distance, and that distance in *dist.  Each distance is the float sum of
 * (x_t - y_t)^2 in component order, the same on every CPU; among equal
 * distances the smallest index wins. */
int64_t sml_nearest(const sml_nearest_book *book, const float *x, float *dist);

/* The same through the kernel of `lanes` floats (4; 8 where
 * sml_nearest_lanes() says 8), for tests. */
int64_t sml_nearest_width(const sml_nearest_book *book, const float *x, float *dist, int lanes);

/* The widest kernel this CPU runs: 8 or 4. */
int sml_nearest_lanes(void);

#endif
