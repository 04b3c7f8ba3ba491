/* synthetic.h: the pieces of the generators of docs/datasets.md, as inline
 * functions that the host generator (synthetic.c) and the CUDA one
 * (cuda/cuda_generate.cu) share, so that both give the same bits.
 *
 * Box-Muller's two float functions of the C library, logf and cosf, are the
 * one part a GPU cannot reproduce (its logf and cosf round differently), but
 * each takes u(w), which depends only on the top 24 bits of a hashed word: a
 * GPU reads them from two tables of 2^24 floats that the host fills with
 * sml_gauss_radius and sml_gauss_cos. */
#ifndef SML_SYNTHETIC_H
#define SML_SYNTHETIC_H

#include <stdint.h>

#include "simil/status.h"

#ifdef __CUDACC__
#define SML_GEN_HD __host__ __device__
#else
#define SML_GEN_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum { SML_MIX_CENTRES = 1024, SML_GAUSS_TABLE = 1 << 24 };

/* h(z), the splitmix64 finalizer. */
static inline SML_GEN_HD uint64_t sml_sm64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* u(w) from the top 24 bits t = w >> 40: ((double)t + 0.5) rounded to float,
 * then divided in float (by a power of two: exact). */
static inline SML_GEN_HD float sml_u01_top(uint64_t t)
{
    return (float)((double)t + 0.5) / 16777216.0f;
}

static inline SML_GEN_HD float sml_u01(uint64_t h) { return sml_u01_top(h >> 40); }

/* The word every uniform element and every mix noise element hashes. */
static inline SML_GEN_HD uint64_t sml_gen_base(uint64_t seed) { return seed * 0x100000001b3ull; }

/* The cluster of row i of a mix set. */
static inline SML_GEN_HD uint64_t sml_mix_centre(uint64_t seed, uint64_t i)
{
    return sml_sm64(seed ^ (i * 0x632be59bd9b4e019ull)) % SML_MIX_CENTRES;
}

/* The hashed words of g(s)'s radius and angle. */
static inline SML_GEN_HD uint64_t sml_gauss_word_radius(uint64_t s) { return sml_sm64(s); }
static inline SML_GEN_HD uint64_t sml_gauss_word_angle(uint64_t s)
{
    return sml_sm64(s ^ 0x5555555555555555ull);
}

/* Host only (the C library's float functions): the radius and the cosine of
 * g(s) for top bits t of their words, for t < SML_GAUSS_TABLE. */
float sml_gauss_radius(uint64_t t);
float sml_gauss_cos(uint64_t t);

/* Both for every t < SML_GAUSS_TABLE, into two new arrays the caller frees
 * (sml_free); on failure both are NULL. */
simil_status sml_gauss_tables(float **radius, float **cosine);

/* The SML_MIX_CENTRES x dim centre values of mix, into a new array. */
simil_status sml_mix_centres(int64_t dim, float **table);

/* SML_GEN_UNIFORM or SML_GEN_MIX for a kind's name, else -1. */
enum { SML_GEN_UNIFORM = 0, SML_GEN_MIX = 1 };
int sml_gen_kind(const char *kind);

#ifdef __cplusplus
}
#endif
#endif
