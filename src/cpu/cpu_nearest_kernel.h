/* cpu_nearest_kernel.h: the body of sml_nearest for one vector width;
 * cpu_nearest.c includes it once per width, with
 *   SML_NK_FN      the function's name,
 *   SML_NK_LANES   floats in a vector (4 or 8),
 *   SML_NK_TARGET  its target attribute (or nothing),
 * and undefines them at its end.  Its vector types of that many floats and
 * int32s are named after the function.
 * The vectors are GCC's (and clang's) generic vectors: the code states which
 * values stay in registers, which gcc's loop vectorizer did not manage (its
 * version kept the 64 running distances on the stack, reloaded for every
 * component: 3x slower). */

/* Distances to the codewords of columns [j0, j0 + 64) in C = 64 / LANES
 * vectors of accumulators, component after component; each lane keeps its
 * running minimum and that minimum's column, and the lanes are reduced at
 * the end.  A lane sees its columns in increasing order and replaces its
 * minimum only on a strictly smaller distance, so ties keep the first. */
#define SML_NK_PASTE2(a, b) a##b
#define SML_NK_PASTE(a, b) SML_NK_PASTE2(a, b)
#define SML_NK_VF SML_NK_PASTE(SML_NK_FN, _vf)
#define SML_NK_VI SML_NK_PASTE(SML_NK_FN, _vi)
typedef float SML_NK_VF __attribute__((vector_size(4 * SML_NK_LANES)));
typedef int32_t SML_NK_VI __attribute__((vector_size(4 * SML_NK_LANES)));

SML_NK_TARGET static int64_t SML_NK_FN(const sml_nearest_book *book, const float *x, float *dist)
{
    enum { L = SML_NK_LANES, C = 64 / SML_NK_LANES };
    const int64_t ld = book->ld, dim = book->dim;
    SML_NK_VF best, zero;
    SML_NK_VI arg, lane;
    for (int l = 0; l < L; l++) {
        best[l] = INFINITY;
        zero[l] = 0.0f;
        arg[l] = 0;
        lane[l] = l;
    }
    for (int64_t j0 = 0; j0 < ld; j0 += 64) {
        SML_NK_VF acc[C];
        for (int k = 0; k < C; k++) acc[k] = zero;
        const float *c = book->by_dim + j0;
        for (int64_t t = 0; t < dim; t++, c += ld) {
            const SML_NK_VF v = zero + x[t];
            for (int k = 0; k < C; k++) {
                SML_NK_VF y;
                memcpy(&y, c + k * L, sizeof y);
                const SML_NK_VF d = v - y;
                acc[k] += d * d;
            }
        }
        for (int k = 0; k < C; k++) {
            const SML_NK_VI less = acc[k] < best;
            arg = (arg & ~less) | ((lane + (int32_t)(j0 + k * L)) & less);
            best = (SML_NK_VF)(((SML_NK_VI)best & ~less) | ((SML_NK_VI)acc[k] & less));
        }
    }
    float d = best[0];
    int32_t a = arg[0];
    for (int l = 1; l < L; l++)
        if (best[l] < d || (best[l] == d && arg[l] < a)) {
            d = best[l];
            a = arg[l];
        }
    *dist = d;
    return a;
}

#undef SML_NK_VF
#undef SML_NK_VI
#undef SML_NK_PASTE
#undef SML_NK_PASTE2
#undef SML_NK_FN
#undef SML_NK_LANES
#undef SML_NK_TARGET
