/* synthetic.c: the synthetic data sets of docs/datasets.md ("uniform" and "mix"),
 * bit-exact so that numbers compare across runs, machines and libraries.
 *
 * Every element is a pure function of (seed, global row, column), so rows are
 * generated in parallel and in any chunking with identical results.  The
 * float steps are written exactly as the definition states them: u01 rounds
 * a double to float and then divides in float, and gauss uses the float
 * functions sqrtf, logf and cosf (their results are those of the C library).
 * The "mix" centres take only 1024 x dim values, so large requests compute
 * them once into a table. */
#include "core/synthetic.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "simil/dataset.h"

enum { SML_MIX_TABLE_MIN_ROWS = 4096, SML_MIX_TABLE_MAX_DIM = 16384 };

float sml_gauss_radius(uint64_t t) { return sqrtf(-2.0f * logf(sml_u01_top(t))); }

float sml_gauss_cos(uint64_t t) { return cosf(6.2831853f * sml_u01_top(t)); }

static float sml_gauss(uint64_t s)
{
    return sml_gauss_radius(sml_gauss_word_radius(s) >> 40) *
           sml_gauss_cos(sml_gauss_word_angle(s) >> 40);
}

static void sml_gen_uniform(int64_t first, int64_t n, int64_t dim, uint64_t seed, float *out)
{
    uint64_t base = sml_gen_base(seed), d = (uint64_t)dim;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++) {
        uint64_t i = (uint64_t)(first + r);
        float *row = out + (size_t)r * (size_t)dim;
        for (uint64_t j = 0; j < d; j++) row[j] = sml_u01(sml_sm64(base + i * d + j));
    }
}

/* table: the SML_MIX_CENTRES x dim centre values, or NULL to compute them. */
static void sml_gen_mix(int64_t first, int64_t n, int64_t dim, uint64_t seed, const float *table,
                        float *out)
{
    uint64_t base = sml_gen_base(seed), d = (uint64_t)dim;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++) {
        uint64_t i = (uint64_t)(first + r);
        uint64_t c = sml_mix_centre(seed, i);
        float *row = out + (size_t)r * (size_t)dim;
        for (uint64_t j = 0; j < d; j++) {
            float centre = table != NULL ? table[c * d + j] : sml_gauss(0xabcdefull + c * d + j);
            row[j] = centre + 0.5f * sml_gauss(base + i * d + j + 7);
        }
    }
}

simil_status sml_mix_centres(int64_t dim, float **table)
{
    size_t count = (size_t)SML_MIX_CENTRES * (size_t)dim;
    SML_TRY(sml_alloc((void **)table, count, sizeof **table, "the mix generator's centres"));
    float *t = *table;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < (int64_t)count; k++) t[k] = sml_gauss(0xabcdefull + (uint64_t)k);
    return SIMIL_OK;
}

simil_status sml_gauss_tables(float **radius, float **cosine)
{
    *cosine = NULL;
    SML_TRY(sml_alloc((void **)radius, SML_GAUSS_TABLE, sizeof(float), "a Box-Muller table"));
    simil_status s = sml_alloc((void **)cosine, SML_GAUSS_TABLE, sizeof(float),
                               "a Box-Muller table");
    if (s != SIMIL_OK) {
        sml_free(*radius);
        *radius = NULL;
        return s;
    }
    float *r = *radius, *c = *cosine;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < SML_GAUSS_TABLE; t++) {
        r[t] = sml_gauss_radius((uint64_t)t);
        c[t] = sml_gauss_cos((uint64_t)t);
    }
    return SIMIL_OK;
}

int sml_gen_kind(const char *kind)
{
    if (kind == NULL) return -1;
    if (strcmp(kind, "uniform") == 0) return SML_GEN_UNIFORM;
    if (strcmp(kind, "mix") == 0) return SML_GEN_MIX;
    return -1;
}

static simil_status sml_gen_check(const char *kind, int64_t first, int64_t n, int64_t dim,
                                  const float *out)
{
    SML_RETURN_IF(kind == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "no generator kind given; the kinds are \"uniform\" and \"mix\"");
    SML_RETURN_IF(first < 0 || n < 0 || dim < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "cannot generate rows [%" PRId64 ", %" PRId64 " + %" PRId64
                  ") of dimension %" PRId64 ": none may be negative",
                  first, first, n, dim);
    SML_RETURN_IF(n > INT64_MAX - first, SIMIL_ERR_INVALID_ARGUMENT,
                  "cannot generate rows [%" PRId64 ", %" PRId64 " + %" PRId64 "): past 2^63", first,
                  first, n);
    SML_RETURN_IF(dim != 0 && (uint64_t)n > SIZE_MAX / sizeof(float) / (uint64_t)dim,
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "cannot generate %" PRId64 " x %" PRId64 " floats: too many", n, dim);
    SML_RETURN_IF(out == NULL && n > 0 && dim > 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "no output buffer given for %" PRId64 " x %" PRId64 " floats", n, dim);
    return SIMIL_OK;
}

simil_status simil_generate(const char *kind, int64_t first, int64_t n, int64_t dim, uint64_t seed,
                            float *out)
{
    SML_TRY(sml_gen_check(kind, first, n, dim, out));
    const int which = sml_gen_kind(kind);
    SML_RETURN_IF(which < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "unknown generator \"%s\"; the kinds are \"uniform\" and \"mix\"", kind);
    if (which == SML_GEN_UNIFORM) {
        sml_gen_uniform(first, n, dim, seed, out);
        return SIMIL_OK;
    }
    float *table = NULL;
    if (n >= SML_MIX_TABLE_MIN_ROWS && dim <= SML_MIX_TABLE_MAX_DIM)
        SML_TRY(sml_mix_centres(dim, &table));
    sml_gen_mix(first, n, dim, seed, table, out);
    sml_free(table);
    return SIMIL_OK;
}
