/* sq.c: training, encoding and decoding of scalar quantizers (sq.h). */
#include "algo/sq.h"

#include <assert.h>
#include <string.h>

void sml_sq_train(int64_t n, int64_t dim, const float *x, float *vmin, float *vdiff)
{
    assert(n >= 1 && dim >= 1);
    memcpy(vmin, x, (size_t)dim * sizeof *vmin);
    memcpy(vdiff, x, (size_t)dim * sizeof *vdiff); /* the maximum, until the end */
    for (int64_t i = 1; i < n; i++) {
        const float *v = x + i * dim;
        for (int64_t j = 0; j < dim; j++) {
            if (v[j] < vmin[j]) vmin[j] = v[j];
            if (v[j] > vdiff[j]) vdiff[j] = v[j];
        }
    }
    for (int64_t j = 0; j < dim; j++) vdiff[j] -= vmin[j];
}

void sml_sq_encode(sml_sq_type t, int64_t dim, int64_t n, const float *x, const float *vmin,
                   const float *vdiff, uint8_t *codes, size_t stride)
{
    const size_t bytes = sml_sq_code_bytes(t, dim);
    assert(stride >= bytes);
    for (int64_t i = 0; i < n; i++) {
        const float *v = x + i * dim;
        uint8_t *c = codes + (size_t)i * stride;
        memset(c + bytes, 0, stride - bytes);
        for (int64_t j = 0; j < dim; j++) {
            if (t == SML_SQ_8BIT) {
                c[j] = sml_sq8_encode(v[j], vmin[j], vdiff[j]);
                continue;
            }
            const uint16_t h = t == SML_SQ_FP16 ? sml_sq_fp16_encode(v[j]) : sml_sq_bf16_encode(v[j]);
            memcpy(c + 2 * j, &h, sizeof h);
        }
    }
}

void sml_sq_decode_row(sml_sq_type t, int64_t dim, const uint8_t *code, const float *vmin,
                       const float *vdiff, float *out)
{
    for (int64_t j = 0; j < dim; j++) out[j] = sml_sq_decode(t, code, j, vmin, vdiff);
}
