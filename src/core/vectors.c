/* vectors.c: finiteness checks and normalization, in parallel over rows. */
#include "core/vectors.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/error.h"

/* Threads for a pass over count floats: one per 2^18 of them, at most all.
 * A search's queries are checked by every caller thread; teams of all the
 * cores for a megabyte of work made two searches in one process (one per
 * GPU) start 2 x 32 threads on 32 cores.  Past a few threads the pass is
 * bound by memory, not by threads (docs/benchmarks.md, "Several GPUs"). */
static int sml_vectors_threads(int64_t count)
{
    const int64_t want = (count + (1 << 18) - 1) >> 18;
    const int most = omp_get_max_threads();
    return want < most ? (int)(want > 0 ? want : 1) : most;
}

simil_status sml_vectors_check(const float *x, int64_t n, int64_t dim, int bound_norms,
                               const char *what)
{
    return sml_vectors_check_from(x, n, dim, bound_norms, what, 0);
}

/* Whether a row fails the check: NaN or Inf in it (v - v is 0 for finite v
 * and NaN otherwise, so `poison` stays 0 only for a finite row; plain sums
 * let the loop run in SIMD lanes), or, with bound_norms, a squared norm past
 * SML_NORM2_BOUND. */
static inline int sml_row_bad(const float *row, int64_t dim, int bound_norms)
{
    double norm2 = 0, poison = 0;
#pragma omp simd reduction(+ : norm2, poison)
    for (int64_t j = 0; j < dim; j++) {
        const double v = row[j];
        norm2 += v * v;
        poison += v - v;
    }
    return poison != 0 || (bound_norms && norm2 > SML_NORM2_BOUND);
}

/* One row scaled to unit norm (out may be row). */
static inline void sml_normalize_row(const float *row, int64_t dim, float *out)
{
    double norm2 = 0;
#pragma omp simd reduction(+ : norm2)
    for (int64_t j = 0; j < dim; j++) norm2 += (double)row[j] * row[j];
    double scale = norm2 > 0 ? 1.0 / sqrt(norm2) : 0.0;
    for (int64_t j = 0; j < dim; j++) out[j] = (float)(row[j] * scale);
}

/* The error for row bad_row of x (number first + bad_row in the caller's set). */
static simil_status sml_row_error(const float *x, int64_t dim, const char *what, int64_t first,
                                  int64_t bad_row)
{
    const float *row = x + bad_row * dim;
    for (int64_t j = 0; j < dim; j++) {
        SML_RETURN_IF(!isfinite(row[j]), SIMIL_ERR_INVALID_ARGUMENT,
                      "%s: vector %" PRId64 " has %s in component %" PRId64
                      "; remove or repair such vectors first",
                      what, first + bad_row, isnan(row[j]) ? "NaN" : "Inf", j);
    }
    return sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                     "%s: vector %" PRId64 " has a squared norm above %.0e, too large for "
                     "float distances; scale the data down",
                     what, first + bad_row, SML_NORM2_BOUND);
}

simil_status sml_vectors_check_from(const float *x, int64_t n, int64_t dim, int bound_norms,
                                    const char *what, int64_t first)
{
    int64_t bad_row = -1;
#pragma omp parallel for schedule(static) num_threads(sml_vectors_threads(n * dim))
    for (int64_t i = 0; i < n; i++) {
        if (sml_row_bad(x + i * dim, dim, bound_norms)) {
#pragma omp critical(sml_vectors_check)
            if (bad_row < 0 || i < bad_row) bad_row = i;
        }
    }
    return bad_row < 0 ? SIMIL_OK : sml_row_error(x, dim, what, first, bad_row);
}

void sml_vectors_normalize(const float *x, int64_t n, int64_t dim, float *out)
{
#pragma omp parallel for schedule(static) num_threads(sml_vectors_threads(n * dim))
    for (int64_t i = 0; i < n; i++) sml_normalize_row(x + i * dim, dim, out + i * dim);
}

/* The loop of sml_vectors_check_from, with the normalization in it: one
 * loop for both, the normalization under a test of out, made this one pass
 * 7% slower (10,000 x 784 floats, 2 threads: 4.04 against 3.76 ms), as the
 * parallel region's body is outlined and the test stays. */
simil_status sml_vectors_check_normalize(const float *x, int64_t n, int64_t dim, const char *what,
                                         int64_t first, float *out)
{
    int64_t bad_row = -1;
#pragma omp parallel for schedule(static) num_threads(sml_vectors_threads(n * dim))
    for (int64_t i = 0; i < n; i++) {
        if (sml_row_bad(x + i * dim, dim, 0)) {
#pragma omp critical(sml_vectors_check)
            if (bad_row < 0 || i < bad_row) bad_row = i;
        } else {
            sml_normalize_row(x + i * dim, dim, out + i * dim);
        }
    }
    return bad_row < 0 ? SIMIL_OK : sml_row_error(x, dim, what, first, bad_row);
}

void sml_copy_parallel(void *dst, const void *src, size_t bytes)
{
    const size_t slice = (size_t)4 << 20;
    const int64_t slices = (int64_t)((bytes + slice - 1) / slice);
    if (slices < 2) {
        memcpy(dst, src, bytes);
        return;
    }
    /* no more threads than slices: waking a team of all the cores costs
     * more than a small copy (a search's queries: 2 slices) saves
     * (docs/benchmarks.md, "Several GPUs") */
    const int most = omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(slices < most ? (int)slices : most)
    for (int64_t i = 0; i < slices; i++) {
        const size_t at = (size_t)i * slice;
        memcpy((char *)dst + at, (const char *)src + at, bytes - at < slice ? bytes - at : slice);
    }
}
