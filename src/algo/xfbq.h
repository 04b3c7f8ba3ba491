/* xfbq.h: XOR-friendly binary quantization (the XFBQ paper, section 3;
 * docs/papers.md, "The XFBQ paper"): the codes, the scale alpha, the stored rows and the
 * histogram selection's parameters, the same on every backend.
 *
 * Codes.  A vector x (unit norm) is scaled by alpha and each component v is
 * coded greedily with `bits` signs: s_1 = sign(v), each later s_i the sign of
 * what remains, so v ~ sum_i s_i 2^-i, an odd multiple of 2^-bits in (-1, 1)
 * (components beyond +-1 clip to +-(1 - 2^-bits)).  Where what remains is
 * exactly 0 (v = 0, or v a multiple of 2^-(bits-1)), the sign is +1 in even
 * dimensions and -1 in odd ones: v sits halfway between two levels, and
 * alternating the tie-break keeps exact zeros (background pixels, sparse
 * data) from adding a bias of 2^-bits per dimension to every inner product,
 * which would widen the candidates needed for a given precision
 * (docs/xfbq.md, "The codes").
 * Bit plane i holds f(s_i) (f(+1) = 0, f(-1) = 1) of every component, packed
 * into `words` = ceil(dim / 64) 64-bit words, component d at bit d % 64 of
 * word d / 64.  The padding bits past dim are 0 in every plane of every code,
 * so they XOR to 0 and the popcount identity below holds with N = dim exactly.
 *
 * Distance.  With Q query planes X_i and B base planes Y_j,
 *     D = sum_{i,j} 2^{(Q-i)+(B-j)} popcount(X_i XOR Y_j)           (i, j from 1)
 *     2^{Q+B} <x^, y^> = dim (2^Q - 1)(2^B - 1) - 2 D                 (exactly)
 * so D falls as the quantized inner product grows: top-K similarity is the
 * K smallest D.  D <= dmax = dim (2^Q - 1)(2^B - 1), kept below 2^31.
 *
 * Storage.  A stored vector's base code takes code_bytes: B planes of
 * `words` words, padded with zero bytes to a multiple of 16.  Flat XFBQ keeps
 * the codes in an array of their own; an inverted list keeps one row of
 * row_size bytes per vector: the code, its dim floats (what re-ranking
 * reads), zero bytes up to a multiple of 16.  Both are the same on every
 * backend, so index files move between them. */
#ifndef SML_XFBQ_H
#define SML_XFBQ_H

#include <stddef.h>
#include <stdint.h>

#include "core/xfbq_code.h"
#include "simil/status.h"

/* Bins of the distance histogram at most (one bin per D value where they fit). */
#define SML_XFBQ_MAX_BINS 4096

typedef struct sml_xfbq {
    int64_t dim;
    int query_bits;      /* Q, 1..8 */
    int base_bits;       /* B, 1..8 */
    int64_t words;       /* per bit plane */
    size_t code_bytes;   /* a base code, padded to a multiple of 16 */
    size_t row_size;     /* an inverted-list row: code and floats */
    float alpha;         /* the scale; 0 until chosen */
} sml_xfbq;

/* How the scan selects candidates (see sml_xfbq_selection). */
typedef struct sml_xfbq_select {
    int shift;           /* bin of a distance: min(D >> shift, nbins - 1) */
    int64_t nbins;
    int64_t extra_bins;  /* the extra distance, in whole bins (of the range) */
    uint32_t spread_q16; /* the extra distance in 2^-16 of each query's spread */
} sml_xfbq_select;


/* Fill q for dim and the bit counts; fails if dmax reaches 2^31. */
simil_status sml_xfbq_init(sml_xfbq *q, int64_t dim, int query_bits, int base_bits);

/* dim (2^Q - 1)(2^B - 1), the largest D. */
uint64_t sml_xfbq_dmax(const sml_xfbq *q);

/* alpha = 1 / (the 0.98 quantile of |x_ij|) over a sample of up to 2^21
 * components (whole rows, evenly spaced), each row scaled to unit norm first
 * when normalize is set.  Where that quantile is 0 (data more than 98% zeros),
 * 1 / the largest |x_ij|; for all-zero data, 1. */
simil_status sml_xfbq_choose_alpha(int64_t n, int64_t dim, const float *x, int normalize,
                                   float *alpha);

/* Codes of n vectors with `bits` planes (the query or the base side):
 * out + i * stride (bytes) receives bits x words words (bytes past them are
 * left alone).  Each row is scaled by alpha, after scaling to unit norm when
 * normalize is set (zero rows stay 0). */
void sml_xfbq_encode(const sml_xfbq *q, int bits, int64_t n, const float *x, int normalize,
                     uint64_t *out, size_t stride);

/* y = x r for n rows x of dim components and RR's r (dim x dim, row-major),
 * each component exactly core/xfbq_code.h's sml_xfbq_rotated_component (the
 * device rotates queries in the same order: the same bits). */
void sml_xfbq_rotate(const float *r, int64_t dim, int64_t n, const float *x, float *y);

/* n rows (q->row_size bytes each) for the host vectors x: code, floats, zero
 * padding.  The floats are x as given; the code as sml_xfbq_encode. */
void sml_xfbq_make_rows(const sml_xfbq *q, int64_t n, const float *x, int normalize,
                        uint8_t *rows);

/* The selection for an extra distance e in [0, 1]: bins of width 2^shift
 * over D's range [0, dmax], at most SML_XFBQ_MAX_BINS of them, and the window
 * the scan adds per query (sml_xfbq_window_bins):
 *   - of_spread 0, a fraction of D's range: extra_bins = ceil(e dmax / 2^shift),
 *     spread_q16 = 0.  In cosines: <x^, y^> ~ alpha^2 cos, so e dmax is about
 *     e 2 dim / alpha^2 of cosine (about 0.45 at e = 0.05 for alpha from the
 *     0.98 quantile of Gaussian-like components), the same for every data set
 *     and query;
 *   - of_spread 1, a fraction of each query's observed spread of D, from its
 *     smallest D to its median over the rows it scans (its probed lists;
 *     core/xfbq_code.h, sml_xfbq_window_bins):
 *     extra_bins = 0, spread_q16 = ceil(e 2^16).  The window follows the data:
 *     narrow where every row has a similar cosine (Fashion-MNIST), wide where
 *     the cosines spread out.
 * The scan then keeps, per query, the rows with
 *     D <= ((c + 1) << shift) - 1,  c = min(b + window, nbins - 1),
 * b the bin of the K-th smallest D (K = min(k, rows scanned)). */
void sml_xfbq_selection(const sml_xfbq *q, float extra_distance, int of_spread,
                        sml_xfbq_select *sel);

#endif
