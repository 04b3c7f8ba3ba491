// cuda_select_api.cu: the backend's select_k: k smallest or largest of each
// row of a matrix in host or device memory, through WarpSelect/BlockSelect
// (k <= 2048) or radix selection (any k).
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_util.cuh"
#include "cuda/cuda_workspace.cuh"
#include "cuda/select.cuh"

namespace sml {
namespace {

// Indices to int64; keys back to the caller's sign; empty slots (-1) get
// +-inf.
__global__ void select_output_kernel(long long count, bool largest, float *keys, const int *idx,
                                     int64_t *wide)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    wide[i] = idx[i];
    const float key = idx[i] < 0 ? INFINITY : keys[i];
    keys[i] = largest ? -key : key;
}

// Columns below which a row is not worth splitting into pieces.
constexpr int kPieceMin = 8192;

simil_status select_locked(Device *dev, int rows, int cols, const float *values, int k,
                           bool largest, float *out_values, int64_t *out_indices)
{
    cudaStream_t st = dev->stream[0];
    const bool on_device = is_device_pointer(values);
    const size_t out_count = (size_t)rows * k;
    const bool radix = k > kMaxWarpSelectK;
    const int ksel = k < cols ? k : cols;  // past cols: empty slots
    const size_t radix_bytes = radix ? select_rows_radix_workspace(rows, cols, ksel) : 0;
    // Few rows would leave most warps idle: read each row as several pieces
    // (pass 1), then select among the pieces' lists (pass 2).
    int split = 1, piece = cols;
    const long long warps = (long long)dev->sm_count * 64;
    if (!radix && rows < warps && cols >= 4 * kPieceMin) {
        long long want = (2 * warps + rows - 1) / rows;
        if (want > cols / kPieceMin) want = cols / kPieceMin;
        piece = (int)((cols + want - 1) / want + 255) / 256 * 256;
        split = (cols + piece - 1) / piece;
    }
    const size_t piece_count = split > 1 ? (size_t)rows * split * k : 0;
    // the workspace: a copy of host values, the outputs, radix and piece scratch
    float *values_copy, *keys, *piece_keys;
    int *idx, *piece_idx;
    int64_t *wide;
    void *radix_ws;
    const auto carve = [&](void *base) {
        Carve c(base);
        values_copy = c.take<float>(on_device ? 0 : (size_t)rows * cols);
        keys = c.take<float>(out_count);
        idx = c.take<int>(out_count);
        wide = c.take<int64_t>(out_count);
        radix_ws = c.take<char>(radix_bytes);
        piece_keys = c.take<float>(piece_count);
        piece_idx = c.take<int>(piece_count);
        return c.used();
    };
    char *ws;
    SML_TRY(device_workspace(dev, carve(nullptr), reinterpret_cast<void **>(&ws)));
    carve(ws);
    const float *d_values = values;
    if (!on_device) {
        SML_CUDA_TRY(cudaMemcpyAsync(values_copy, values, sizeof(float) * (size_t)rows * cols,
                                     cudaMemcpyHostToDevice, st));
        d_values = values_copy;
    }
    SML_CUDA_TRY(cudaMemsetAsync(idx, 0xff, 4 * out_count, st));
    SelectJob job{};
    job.scores = d_values;
    job.ld = cols;
    job.row_scale_const = largest ? -1.0f : 1.0f;
    job.rows = rows;
    job.cols = cols;
    job.k = radix ? ksel : k;
    job.out_keys = keys;
    job.out_idx = idx;
    job.out_ld = k;
    if (radix) {
        SML_TRY(select_rows_radix(job, ScoreType::f32, radix_ws, radix_bytes, st));
    } else if (split > 1) {
        SelectJob pieces = job;
        pieces.rows = rows * split;
        pieces.cols = piece;
        pieces.split = split;
        pieces.split_cols = cols;
        pieces.out_keys = piece_keys;
        pieces.out_idx = piece_idx;
        SML_TRY(select_rows(pieces, ScoreType::f32, st));
        SelectJob merge{};
        merge.scores = piece_keys;
        merge.ld = (long long)split * k;
        merge.row_scale_const = 1.0f;
        merge.in_idx = piece_idx;
        merge.rows = rows;
        merge.cols = split * k;
        merge.k = k;
        merge.out_keys = keys;
        merge.out_idx = idx;
        merge.out_ld = k;
        SML_TRY(select_rows(merge, ScoreType::f32, st));
    } else {
        SML_TRY(select_rows(job, ScoreType::f32, st));
    }
    if (out_count > 0) {
        select_output_kernel<<<(unsigned)((out_count + 255) / 256), 256, 0, st>>>(
            (long long)out_count, largest, keys, idx, wide);
        SML_LAUNCH_TRY("select_output_kernel");
    }
    const cudaMemcpyKind kind = is_device_pointer(out_values) ? cudaMemcpyDeviceToDevice
                                                              : cudaMemcpyDeviceToHost;
    SML_CUDA_TRY(cudaMemcpyAsync(out_values, keys, 4 * out_count, kind, st));
    SML_CUDA_TRY(cudaMemcpyAsync(out_indices, wide, 8 * out_count, kind, st));
    SML_CUDA_TRY(cudaStreamSynchronize(st));
    return SIMIL_OK;
}

}  // namespace

simil_status cuda_select_k(sml_backend *b, int64_t rows, int64_t cols, const float *values,
                           int64_t k, int largest, float *out_values, int64_t *out_indices)
{
    SML_RETURN_IF(rows >= INT32_MAX || cols >= INT32_MAX || k >= INT32_MAX,
                  SIMIL_ERR_UNSUPPORTED, "select_k on the GPU takes fewer than 2^31 rows, "
                  "columns and k");
    if (rows == 0) return SIMIL_OK;
    Device *dev = device_of(b);
    pthread_mutex_lock(&dev->lock);
    simil_status s = cuda_status(cudaSetDevice(dev->gpu), "cudaSetDevice", __FILE__, __LINE__);
    if (s == SIMIL_OK) s = device_join_caller(dev);
    if (s == SIMIL_OK)
        s = select_locked(dev, (int)rows, (int)cols, values, (int)k, largest != 0, out_values,
                          out_indices);
    if (s != SIMIL_OK) cudaStreamSynchronize(dev->stream[0]);
    pthread_mutex_unlock(&dev->lock);
    return s;
}

}  // namespace sml
