// cuda_ivf_flat.cu: IVF-Flat's scan on the GPU (the GPU paper, section 5.2):
// the tiled pair scan of cuda_ivf.cuh over rows of floats, read as they are,
// and for small batches a scan that reads its probes on the device.
// The distances are exact fp32 (sum of squared differences, or dot
// products), the same arithmetic as the CPU scan.  The small batches' scan
// is ivf_probe_scan.cuh's over the rows as they are.
#include <assert.h>

#include "cuda/cuda_ivf.cuh"
#include "cuda/ivf_probe_scan.cuh"
#include "cuda/select.cuh"

namespace sml {
namespace {

constexpr size_t kCandidateBudget = (size_t)2 << 30;  // bytes of distances per batch
constexpr int kMaxBatch = 65536;

// Rows of dim floats.
struct FloatRows {
    static constexpr bool kFloatRows = true;  // thin_staged_kernel reads codes
    const float *codes;
    int dim;
    __device__ float load(long long row, int d, int) const { return codes[row * dim + d]; }
    __device__ float4 load4(long long row, int f, int) const
    {
        return __ldg(reinterpret_cast<const float4 *>(codes + row * dim) + f);
    }
};

}  // namespace

simil_status cuda_ivf_flat_scan(sml_backend *b, const sml_ivf_scan_args *a)
{
    assert(sml_ivf_scan_args_ok(a));
    assert(a->lists.code_stride == sizeof(float) * (size_t)a->dim);
    SML_RETURN_IF(a->k >= INT32_MAX || a->dim >= INT32_MAX, SIMIL_ERR_UNSUPPORTED,
                  "IVF scan on the GPU: k and dim must be below 2^31");
    const BatchLimits limits{kPairShape, a->k > kMaxWarpSelectK ? (size_t)8 : (size_t)4,
                             kCandidateBudget, kMaxBatch};
    const FloatRows rows{static_cast<const float *>(a->lists.codes), (int)a->dim};
    return ivf_locked(b, *a, [&](Device *dev, bool host_queries) {
        const bool small = probe_scan_fits(*a, a->nq);
        RowFilter allowed;
        SML_TRY(scan_filter(dev, *a, small, &allowed));
        if (small) return probe_scan_all(dev, a, host_queries, allowed, rows);
        return scan_planned(dev, a, host_queries, limits,
                            [&](const sml_ivf_scan_args &batch, long long, long long sub, int n) {
                                return tiled_batch(dev, batch, sub, n, rows, allowed);
                            });
    });
}

}  // namespace sml
