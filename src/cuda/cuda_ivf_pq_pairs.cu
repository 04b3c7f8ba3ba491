// cuda_ivf_pq_pairs.cu: IVF-PQ's pair scan on the GPU (residual tables, or
// k past kPqFusedMaxK): one block per (query, list) pair and chunk of up to
// kPqItemVectors of the list's vectors builds the pair's lookup table in
// shared memory (cuda_ivf_pq.cuh) and writes every distance, for the pair
// scan's multi-pass selection (cuda_ivf.cuh).
#include "cuda/cuda_ivf_pq.cuh"

namespace sml {
namespace {

// term3[q] for the pair scan.  One block per query.
__global__ void pq_term3_kernel(const float *queries, int dim, const float *codebooks, int m,
                                int ksub, int dsub, float scale, float *term3)
{
    const long long q = blockIdx.x;
    for (int e = threadIdx.x; e < m * ksub; e += blockDim.x)
        term3[q * m * ksub + e] = term3_entry(queries + q * dim, codebooks, ksub, dsub, scale, e);
}

struct TableArgs {
    const float *term3;   // nq x m x ksub
    const float *coarse;  // nlist x dim
    const float *codebooks;
    int m, ksub, dsub, dim;
};

template <Table T>
__device__ __forceinline__ float table_entry(const TableArgs &t, int q, int e,
                                             const float *residual)
{
    if (T == Table::term3) return t.term3[(long long)q * t.m * t.ksub + e];
    const int i = e / t.ksub;
    const float *c = t.codebooks + (long long)e * t.dsub;
    float s = 0;
    for (int u = 0; u < t.dsub; ++u) {
        const float d = residual[i * t.dsub + u] - c[u];
        s = fmaf(d, d, s);
    }
    return s;
}

template <Table T, bool FP16>
__global__ void __launch_bounds__(kPqThreads)
pq_distance_kernel(const PqBatch batch, const TableArgs tab, const uint8_t *codes,
                   int code_size, int term1_at, float *distances, int *rows)
{
    extern __shared__ float pq_smem[];
    __shared__ float reduce[32];
    const PqItem item = batch.items[blockIdx.x];
    const int q = batch.pair_query[item.pair], l = batch.pair_list[item.pair];
    float *residual = pq_smem;  // dim floats (residual tables only)
    void *table = pq_smem + (T == Table::residual ? (tab.dim + 3) / 4 * 4 : 0);
    if (T == Table::residual) {
        const float *x = batch.queries + (long long)q * tab.dim;
        const float *c = tab.coarse + (long long)l * tab.dim;
        for (int u = threadIdx.x; u < tab.dim; u += blockDim.x) residual[u] = x[u] - c[u];
        __syncthreads();
    }
    float inv_scale, offset;
    fill_table<FP16>(table, tab.m * tab.ksub, tab.m,
                     [&](int e) { return table_entry<T>(tab, q, e, residual); }, reduce,
                     inv_scale, offset);
    const float base = (T == Table::residual ? 0.0f : batch.pair_key[item.pair]) + offset;
    __syncthreads();
    const int cols = batch.pair_cols[item.pair];
    const int end = min(cols, item.vector0 + kPqItemVectors);
    const long long first_row = batch.pair_base[item.pair];
    const long long out = batch.pair_out[item.pair];
    for (int r = item.vector0 + threadIdx.x; r < end; r += blockDim.x) {
        const uint8_t *row = codes + (first_row + r) * code_size;
        distances[out + r] = base + row_term1(row, term1_at) +
                             row_sum<FP16>(row, tab.m, tab.ksub, table) * inv_scale;
        if (rows) rows[out + r] = (int)(first_row + r);
    }
}

template <Table T, bool FP16>
simil_status launch_table(const PqBatch &batch, const TableArgs &tab, const uint8_t *codes,
                          int code_size, int term1_at, float *distances, int *rows,
                          cudaStream_t st)
{
    const size_t smem = (T == Table::residual ? (size_t)(tab.dim + 3) / 4 * 4 * 4 : 0) +
                        (size_t)tab.m * tab.ksub * (FP16 ? 2 : 4);
    const auto kernel = pq_distance_kernel<T, FP16>;
    SML_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem));
    kernel<<<batch.nitems, kPqThreads, smem, st>>>(batch, tab, codes, code_size, term1_at,
                                                   distances, rows);
    SML_LAUNCH_TRY("pq_distance_kernel");
    return SIMIL_OK;
}

template <Table T>
simil_status launch_precision(bool fp16, const PqBatch &batch, const TableArgs &tab,
                              const uint8_t *codes, int code_size, int term1_at,
                              float *distances, int *rows, cudaStream_t st)
{
    return fp16 ? launch_table<T, true>(batch, tab, codes, code_size, term1_at, distances, rows,
                                        st)
                : launch_table<T, false>(batch, tab, codes, code_size, term1_at, distances, rows,
                                         st);
}

}  // namespace

size_t pq_scratch_floats(const sml_ivf_pq_scan_args *a, int nq)
{
    return table_kind(a) == Table::residual ? 1 : (size_t)nq * a->m * a->ksub;
}

simil_status launch_pq_distances(const sml_ivf_pq_scan_args *a, const PqBatch &batch,
                                 float *scratch, float *distances, int *rows, cudaStream_t st)
{
    const Table kind = table_kind(a);
    const int m = (int)a->m, ksub = (int)a->ksub, dsub = (int)a->dsub, dim = (int)a->scan.dim;
    if (kind == Table::term3) {
        pq_term3_kernel<<<batch.nq, 256, 0, st>>>(batch.queries, dim, a->codebooks, m, ksub, dsub,
                                                   term3_scale(a), scratch);
        SML_LAUNCH_TRY("pq_term3_kernel");
    }
    const TableArgs tab{scratch, a->coarse, a->codebooks, m, ksub, dsub, dim};
    const uint8_t *codes = static_cast<const uint8_t *>(a->scan.lists.codes);
    const int cs = (int)a->scan.lists.code_stride, t1 = (int)a->term1_at;
    const bool fp16 = a->lut_fp16 != 0;
    if (kind == Table::term3)
        return launch_precision<Table::term3>(fp16, batch, tab, codes, cs, t1, distances, rows, st);
    return launch_precision<Table::residual>(fp16, batch, tab, codes, cs, t1, distances, rows, st);
}

}  // namespace sml
