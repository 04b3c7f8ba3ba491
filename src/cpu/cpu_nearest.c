/* cpu_nearest.c: the nearest of a few short vectors (cpu_nearest.h).
 *
 * One kernel, two vector widths: 8 floats where the CPU has AVX2, 4 floats
 * elsewhere (SSE2, NEON).  Both add the same float terms in the same order,
 * so they return the same results.  Only one generic width would not do: gcc
 * lowers vectors wider than the target's through the stack (8-float vectors
 * on SSE2 ran 9x slower than 4-float ones), and 4-float vectors use half of
 * AVX2.  On the development machine (AVX2, 2026-11-25), 60,000 points of 14
 * floats against 256 codewords: 0.24 us a point at 8 floats, 0.42 at 4, and
 * 0.55-0.75 through the k = 1 GEMM path of cpu_knn.c. */
#include "cpu/cpu_nearest.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

#define SML_NK_FN sml_nearest_4
#define SML_NK_LANES 4
#define SML_NK_TARGET
#include "cpu/cpu_nearest_kernel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define SML_NEAREST_AVX2 1
#define SML_NK_FN sml_nearest_8
#define SML_NK_LANES 8
#define SML_NK_TARGET __attribute__((target("avx2")))
#include "cpu/cpu_nearest_kernel.h"
#endif

enum { SML_NEAREST_BLOCK = 64 };

int64_t sml_nearest_book_bytes(int64_t n, int64_t dim)
{
    const int64_t ld = (n + SML_NEAREST_BLOCK - 1) / SML_NEAREST_BLOCK * SML_NEAREST_BLOCK;
    return ld * dim * (int64_t)sizeof(float);
}

simil_status sml_nearest_book_init(sml_nearest_book *book, int64_t n, int64_t dim,
                                   const float *rows, int64_t stride)
{
    assert(n >= 1 && n <= INT32_MAX - SML_NEAREST_BLOCK && dim >= 1);
    memset(book, 0, sizeof *book);
    const int64_t ld = (n + SML_NEAREST_BLOCK - 1) / SML_NEAREST_BLOCK * SML_NEAREST_BLOCK;
    float *by_dim;
    SML_TRY(sml_alloc((void **)&by_dim, (size_t)(ld * dim), sizeof(float), "a codebook"));
    for (int64_t t = 0; t < dim; t++) {
        float *row = by_dim + t * ld;
        for (int64_t j = 0; j < n; j++) row[j] = rows[j * stride + t];
        for (int64_t j = n; j < ld; j++) row[j] = INFINITY;
    }
    book->by_dim = by_dim;
    book->n = n;
    book->dim = dim;
    book->ld = ld;
    return SIMIL_OK;
}

void sml_nearest_book_free(sml_nearest_book *book)
{
    sml_free(book->by_dim);
    memset(book, 0, sizeof *book);
}

int sml_nearest_lanes(void)
{
#ifdef SML_NEAREST_AVX2
    if (__builtin_cpu_supports("avx2")) return 8;
#endif
    return 4;
}

int64_t sml_nearest_width(const sml_nearest_book *book, const float *x, float *dist, int lanes)
{
    assert(lanes == 4 || (lanes == 8 && sml_nearest_lanes() == 8));
#ifdef SML_NEAREST_AVX2
    if (lanes == 8) return sml_nearest_8(book, x, dist);
#endif
    return sml_nearest_4(book, x, dist);
}

int64_t sml_nearest(const sml_nearest_book *book, const float *x, float *dist)
{
#ifdef SML_NEAREST_AVX2
    if (__builtin_cpu_supports("avx2")) return sml_nearest_8(book, x, dist);
#endif
    return sml_nearest_4(book, x, dist);
}
