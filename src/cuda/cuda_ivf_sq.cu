// cuda_ivf_sq.cu: the scalar-quantizer scan on the GPU (sml_sq_scan_args):
// the tiled pair scan of cuda_ivf.cuh over rows decoded as they are loaded
// into shared memory (core/sq_code.h, the same decoding as the CPU's), plus
// the list's centroid for codes of residuals.  Flat SQ is one list of every
// row: each 32 queries read the codes once.  Keys are fp32 on the decoded
// floats; the CPU keys residual codes as ||(x - c) - r||^2 and <x, c> +
// <x, r>, the GPU as ||x - (c + r)||^2 and <x, c + r>: equal up to rounding.
#include <assert.h>

#include "core/sq_code.h"
#include "cuda/cuda_ivf.cuh"
#include "cuda/select.cuh"

namespace sml {
namespace {

constexpr size_t kCandidateBudget = (size_t)2 << 30;  // bytes of distances per batch
constexpr int kMaxBatch = 65536;

// Rows of codes of type T, stride bytes apart, decoded; with coarse, plus
// their list's centroid.
template <int T>
struct SqRows {
    const uint8_t *codes;
    size_t stride;
    const float *vmin;
    const float *vdiff;
    const float *coarse;
    int dim;
    __device__ float load(long long row, int d, int list) const
    {
        const float v = sml_sq_decode((sml_sq_type)T, codes + row * stride, d, vmin, vdiff);
        return coarse ? v + coarse[(long long)list * dim + d] : v;
    }
    __device__ float4 load4(long long row, int f, int list) const
    {
        return make_float4(load(row, 4 * f, list), load(row, 4 * f + 1, list),
                           load(row, 4 * f + 2, list), load(row, 4 * f + 3, list));
    }
};

template <int T>
simil_status sq_scan(sml_backend *b, const sml_sq_scan_args *a)
{
    const sml_ivf_scan_args *s = &a->scan;
    const BatchLimits limits{kPairShape, s->k > kMaxWarpSelectK ? (size_t)8 : (size_t)4,
                             kCandidateBudget, kMaxBatch};
    const SqRows<T> rows{static_cast<const uint8_t *>(s->lists.codes), s->lists.code_stride,
                         a->vmin, a->vdiff, a->coarse, (int)s->dim};
    return ivf_locked(b, [&](Device *dev) {
        const uint32_t *allowed;
        SML_TRY(scan_rows_allowed(dev, *s, &allowed));
        return scan_planned(dev, s, limits,
                            [&](const sml_ivf_scan_args &batch, long long, long long sub, int n) {
                                return tiled_batch(dev, batch, sub, n, rows, allowed);
                            });
    });
}

}  // namespace

simil_status cuda_sq_scan(sml_backend *b, const sml_sq_scan_args *a)
{
    const sml_ivf_scan_args *s = &a->scan;
    assert(sml_ivf_scan_args_ok(s));
    assert(a->type != SML_SQ_8BIT || (a->vmin != nullptr && a->vdiff != nullptr));
    SML_RETURN_IF(s->k >= INT32_MAX || s->dim >= INT32_MAX, SIMIL_ERR_UNSUPPORTED,
                  "SQ scan on the GPU: k and dim must be below 2^31");
    switch (a->type) {
    case SML_SQ_8BIT: return sq_scan<SML_SQ_8BIT>(b, a);
    case SML_SQ_FP16: return sq_scan<SML_SQ_FP16>(b, a);
    default: assert(a->type == SML_SQ_BF16); return sq_scan<SML_SQ_BF16>(b, a);
    }
}

}  // namespace sml
