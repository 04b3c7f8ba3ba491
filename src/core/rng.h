/* rng.h: splitmix64, the one random generator of the library's own draws
 * (k-means seeding and reseeding, k-NN graph samples, the XFBQ rotation).
 *
 * Why not rand() or a platform generator: a draw here must be seedable and
 * give the same bits on every platform, compiler and thread count, so that a
 * seed reproduces the same centroids, samples and rotations everywhere.
 * splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
 * generators", 2014) is small, needs only 64-bit integer arithmetic, and its
 * output function is also a good hash of a counter.
 *
 * The conversions to double are exact: the top 53 bits of a word, scaled by
 * 2^-53.  core/synthetic.h keeps its own copy of the output function
 * (sml_sm64) because the CUDA generator compiles it for the device too. */
#ifndef SML_RNG_H
#define SML_RNG_H

#include <math.h>
#include <stdint.h>

/* The splitmix64 output for state z + the golden-ratio increment: a pure
 * function of z, for counter-based draws. */
static inline uint64_t sml_rng_hash(uint64_t z)
{
    uint64_t x = z + 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The next word of the stream whose state is *state (which it advances). */
static inline uint64_t sml_rng_next(uint64_t *state)
{
    const uint64_t z = *state;
    *state = z + 0x9e3779b97f4a7c15ull;
    return sml_rng_hash(z);
}

/* A word's top 53 bits as a double in [0, 1). */
static inline double sml_rng_unit(uint64_t w) { return (double)(w >> 11) * 0x1p-53; }

/* A word's top 53 bits plus one half as a double in (0, 1], never 0: safe
 * to take the log of. */
static inline double sml_rng_unit_open(uint64_t w) { return ((double)(w >> 11) + 0.5) * 0x1p-53; }

/* A uniform double in [0, 1) from the stream. */
static inline double sml_rng_uniform(uint64_t *state) { return sml_rng_unit(sml_rng_next(state)); }

/* A standard normal draw that is a pure function of counter c: Box-Muller in
 * double on the words of counters 2c (radius) and 2c + 1 (angle). */
static inline double sml_rng_gauss_at(uint64_t c)
{
    const double u = sml_rng_unit_open(sml_rng_hash(c * 2)),
                 v = sml_rng_unit(sml_rng_hash(c * 2 + 1));
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif
