// radix_select.cu: k-selection for any k (past WarpSelect's 2048), the path
// Faiss users ask for.
//
// Keys become order-preserving uint32s.  Three histogram passes over each row
// (11 + 11 + 10 bits, most significant first) narrow down the exact value of
// the k-th smallest key, T, and how many keys lie strictly below it.  When more
// keys equal T than the k places left for them, three more passes over the
// indices of those ties find the index I of the last one to keep, so ties go
// to the smaller indices, as everywhere else.  One more pass collects the keys
// below T and the ties up to I, as 64-bit (key << 32 | index) words, and a
// segmented radix sort (CUB) orders each row's k survivors by key, then index.
//
// Launch shapes: histogram and collect kernels run a grid of (chunks, rows)
// blocks of 256 threads, each block over a 8192-column chunk of one row, with a
// shared-memory histogram; the per-row bin search runs one block per row.
#include <cub/device/device_segmented_radix_sort.cuh>

#include "cuda/select.cuh"

namespace sml {
namespace {

constexpr int kRadixThreads = 256;
constexpr int kRadixChunk = 8192;
constexpr int kRadixBins = 2048;

struct RadixRow {
    unsigned prefix;     // bits of T found so far
    unsigned mask;       // which bits those are
    unsigned remaining;  // rank wanted among the keys that match the prefixes (1-based)
    unsigned less;       // keys known to be below T
    unsigned equal;      // keys equal to T (after the key passes)
    unsigned ties;       // places left for them
    unsigned iprefix;    // bits of I found so far (the tie passes)
    unsigned imask;
    unsigned written_less;
    unsigned written_equal;
};

template <typename S>
__device__ __forceinline__ void radix_pair(const RowReader<S, false> &rd, int j, unsigned &key,
                                           int &idx)
{
    float k;
    rd.load1(j, k, idx);
    key = to_ordered(k);
}

// Key passes count key digits of the keys that match the prefix; tie passes
// (on_idx) count index digits of the keys equal to T, in rows that have more
// ties than places.
template <typename S>
__global__ void radix_histogram_kernel(const __grid_constant__ SelectJob job, RadixRow *rows, unsigned *hist, int shift,
                                       int bits, bool on_idx)
{
    __shared__ unsigned local[kRadixBins];
    const int row = blockIdx.y;
    const RadixRow r = rows[row];
    if (on_idx && r.equal <= r.ties) return;
    const int nbins = 1 << bits;
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) local[b] = 0;
    __syncthreads();
    const RowReader<S, false> rd(job, row);
    const int end = min(rd.cols, (blockIdx.x + 1) * kRadixChunk);
    for (int j = blockIdx.x * kRadixChunk + threadIdx.x; j < end; j += blockDim.x) {
        unsigned key;
        int idx;
        radix_pair<S>(rd, j, key, idx);
        if (!on_idx) {
            if ((key & r.mask) == r.prefix) atomicAdd(&local[(key >> shift) & (nbins - 1)], 1u);
        } else if (key == r.prefix && ((unsigned)idx & r.imask) == r.iprefix) {
            atomicAdd(&local[((unsigned)idx >> shift) & (nbins - 1)], 1u);
        }
    }
    __syncthreads();
    unsigned *out = hist + (size_t)row * kRadixBins;
    for (int b = threadIdx.x; b < nbins; b += blockDim.x)
        if (local[b]) atomicAdd(&out[b], local[b]);
}

// One block per row: find the bin holding the remaining-th key (or tie
// index), then clear the histogram for the next pass.
__global__ void radix_pick_kernel(RadixRow *rows, unsigned *hist, int shift, int bits,
                                  bool on_idx, bool last_key_pass)
{
    __shared__ unsigned counts[kRadixBins];
    const int row = blockIdx.x;
    const int nbins = 1 << bits;
    unsigned *h = hist + (size_t)row * kRadixBins;
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) {
        counts[b] = h[b];
        h[b] = 0;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    RadixRow r = rows[row];
    if (on_idx && r.equal <= r.ties) return;
    unsigned before = 0;
    int b = 0;
    while (b < nbins - 1 && before + counts[b] < r.remaining) before += counts[b++];
    if (on_idx) {
        r.iprefix |= (unsigned)b << shift;
        r.imask |= (unsigned)(nbins - 1) << shift;
        r.remaining -= before;
    } else {
        r.prefix |= (unsigned)b << shift;
        r.mask |= (unsigned)(nbins - 1) << shift;
        r.remaining -= before;
        r.less += before;
        if (last_key_pass) {
            r.equal = counts[b];
            r.ties = r.remaining;
        }
    }
    rows[row] = r;
}

template <typename S>
__global__ void radix_collect_kernel(const __grid_constant__ SelectJob job, RadixRow *rows, unsigned long long *out,
                                     int k)
{
    const int row = blockIdx.y;
    RadixRow *r = rows + row;
    const unsigned t = r->prefix, less = r->less;
    const unsigned places = r->equal > r->ties ? r->ties : r->equal;
    // with more ties than places, the tie passes found the last index to keep
    const unsigned last = r->equal > r->ties ? r->iprefix : 0xffffffffu;
    unsigned long long *dst = out + (size_t)row * k;
    const RowReader<S, false> rd(job, row);
    const int end = min(rd.cols, (blockIdx.x + 1) * kRadixChunk);
    for (int j = blockIdx.x * kRadixChunk + threadIdx.x; j < end; j += blockDim.x) {
        unsigned key;
        int idx;
        radix_pair<S>(rd, j, key, idx);
        unsigned long long word = (unsigned long long)key << 32 | (unsigned)idx;
        if (key < t) {
            dst[atomicAdd(&r->written_less, 1u)] = word;
        } else if (key == t && (unsigned)idx <= last) {
            unsigned slot = atomicAdd(&r->written_equal, 1u);
            if (slot < places) dst[less + slot] = word;
        }
    }
}

__global__ void radix_init_kernel(RadixRow *rows, int nrows, int k, int *offsets)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < nrows) rows[row] = RadixRow{0u, 0u, (unsigned)k, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
    if (row <= nrows) offsets[row] = row * k;
}

__global__ void radix_write_kernel(const unsigned long long *sorted, int rows, int k,
                                   float *out_keys, int *out_idx, long long out_ld)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * k) return;
    const long long row = i / k, col = i % k;
    const unsigned long long word = sorted[i];
    const int idx = (int)(unsigned)word;
    const bool empty = idx == kEmptyIdx;
    out_keys[row * out_ld + col] = empty ? INFINITY : from_ordered((unsigned)(word >> 32));
    out_idx[row * out_ld + col] = empty ? -1 : idx;
}

struct RadixScratch {
    RadixRow *rows;
    unsigned *hist;
    int *offsets;
    unsigned long long *words;
    unsigned long long *sorted;
    void *sort_temp;
    size_t sort_temp_bytes;
    size_t total;
};

size_t align_up(size_t x) { return (x + 255) / 256 * 256; }

RadixScratch radix_layout(char *base, int rows, int k)
{
    RadixScratch s{};
    size_t off = 0;
    s.rows = reinterpret_cast<RadixRow *>(base + off);
    off += align_up(sizeof(RadixRow) * rows);
    s.hist = reinterpret_cast<unsigned *>(base + off);
    off += align_up(sizeof(unsigned) * kRadixBins * (size_t)rows);
    s.offsets = reinterpret_cast<int *>(base + off);
    off += align_up(sizeof(int) * (rows + 1));
    s.words = reinterpret_cast<unsigned long long *>(base + off);
    off += align_up(8 * (size_t)rows * k);
    s.sorted = reinterpret_cast<unsigned long long *>(base + off);
    off += align_up(8 * (size_t)rows * k);
    cub::DeviceSegmentedRadixSort::SortKeys(nullptr, s.sort_temp_bytes, s.words, s.sorted,
                                            rows * k, rows, s.offsets, s.offsets + 1);
    s.sort_temp = base + off;
    off += align_up(s.sort_temp_bytes);
    s.total = off;
    return s;
}

template <typename S>
simil_status radix_run(const SelectJob &job, RadixScratch s, cudaStream_t stream)
{
    const int k = job.k;
    radix_init_kernel<<<(job.rows + 256) / 256, 256, 0, stream>>>(s.rows, job.rows, k, s.offsets);
    SML_LAUNCH_TRY("radix_init_kernel");
    SML_CUDA_TRY(cudaMemsetAsync(s.hist, 0, sizeof(unsigned) * kRadixBins * (size_t)job.rows,
                                 stream));
    SML_CUDA_TRY(cudaMemsetAsync(s.words, 0xff, 8 * (size_t)job.rows * k, stream));
    const dim3 grid((job.cols + kRadixChunk - 1) / kRadixChunk, job.rows);
    // three passes over the key bits, then three over the index bits of ties
    const int shifts[6] = {21, 10, 0, 20, 9, 0}, bits[6] = {11, 11, 10, 11, 11, 9};
    for (int pass = 0; pass < 6; ++pass) {
        const bool on_idx = pass >= 3;
        radix_histogram_kernel<S><<<grid, kRadixThreads, 0, stream>>>(
            job, s.rows, s.hist, shifts[pass], bits[pass], on_idx);
        SML_LAUNCH_TRY("radix_histogram_kernel");
        radix_pick_kernel<<<job.rows, kRadixThreads, 0, stream>>>(
            s.rows, s.hist, shifts[pass], bits[pass], on_idx, pass == 2);
        SML_LAUNCH_TRY("radix_pick_kernel");
    }
    radix_collect_kernel<S><<<grid, kRadixThreads, 0, stream>>>(job, s.rows, s.words, k);
    SML_LAUNCH_TRY("radix_collect_kernel");
    size_t temp_bytes = s.sort_temp_bytes;
    SML_CUDA_TRY(cub::DeviceSegmentedRadixSort::SortKeys(s.sort_temp, temp_bytes, s.words,
                                                         s.sorted, job.rows * k, job.rows,
                                                         s.offsets, s.offsets + 1, 0, 64,
                                                         stream));
    const long long total = (long long)job.rows * k;
    radix_write_kernel<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>(
        s.sorted, job.rows, k, job.out_keys, job.out_idx, job.out_ld);
    SML_LAUNCH_TRY("radix_write_kernel");
    return SIMIL_OK;
}

}  // namespace

size_t select_rows_radix_workspace(int rows, int cols, int k)
{
    return radix_layout(nullptr, rows, k).total;
}

simil_status select_rows_radix(const SelectJob &job, ScoreType type, void *workspace,
                               size_t workspace_bytes, cudaStream_t stream)
{
    SML_RETURN_IF(job.k < 1 || job.k > job.cols, SIMIL_ERR_INTERNAL,
                  "radix select: k=%d outside [1, cols=%d]", job.k, job.cols);
    if (job.rows == 0) return SIMIL_OK;
    RadixScratch s = radix_layout(static_cast<char *>(workspace), job.rows, job.k);
    SML_RETURN_IF(s.total > workspace_bytes, SIMIL_ERR_INTERNAL,
                  "radix select: workspace of %zu bytes, %zu needed", workspace_bytes, s.total);
    return type == ScoreType::f16 ? radix_run<__half>(job, s, stream)
                                  : radix_run<float>(job, s, stream);
}

}  // namespace sml
