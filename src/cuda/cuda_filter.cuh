// cuda_filter.cuh: filtered search on the GPU (core/id_filter.h).
//
// A search that allows only some ids makes, once per call, a bitset over the
// rows of the stored array it scans (row r allowed iff the filter allows
// ids[r]), from the caller's bitset or sorted id list and the rows' labels on
// the device; an IVF scan of a small batch, which reads far fewer rows than
// the bitset's pass over every label, tests the label of each row it reads
// instead (RowFilter).  The scans then give a refused row the key +inf: Flat's
// batch path through the per-column term its selection already adds (the
// squared norms for L2; its small-batch path does not read a refused row at
// all), the pair scans by marking the refused positions of their distance
// segments, IVF-PQ's fused scan and XFBQ in their kernels.  A +inf key never
// beats a real one, and the results (finish_row, knn_device.cuh) turn a +inf
// key into an empty slot (-1), so a filtered search returns the k best of the
// allowed rows it scans and empty slots past them: what the CPU returns.
// Keys of stored rows are finite (every added row is checked against
// SML_NORM2_BOUND), so no allowed row is mistaken for a refused one.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include "core/id_filter.h"
#include "cuda/cuda_device.cuh"

namespace sml {

// Whether the rows' bitset (null: no filter) allows row r.
__device__ __forceinline__ bool row_allowed(const uint32_t *bits, long long r)
{
    return bits == nullptr || ((bits[r >> 5] >> (r & 31)) & 1u);
}

// What a kernel reads of the caller's filter: its bitset over ids or its
// ascending list, in device memory.
struct DeviceFilter {
    const uint64_t *bits;  // or null: the list
    long long nbits;
    const int64_t *ids;
    long long n;
};

__device__ __forceinline__ bool id_allowed(const DeviceFilter &f, int64_t id)
{
    if (f.bits != nullptr)
        return id >= 0 && id < f.nbits && ((f.bits[id >> 6] >> (id & 63)) & 1u);
    long long lo = 0, hi = f.n;
    while (lo < hi) {
        const long long mid = lo + (hi - lo) / 2;
        if (f.ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < f.n && f.ids[lo] == id;
}

// The rows a scan may rank: those of the rows' bitset (rows_allowed), or,
// for a scan that reads few rows (a small batch), those whose labels the
// caller's filter allows, tested as the scan reads them: the bitset costs a
// pass over every row's label, more than a small batch's scan reads.
struct RowFilter {
    const uint32_t *rows;   // the rows' bitset, or null
    bool by_label;          // else: labels[r] tested against f
    DeviceFilter f;
    const int64_t *labels;  // device, a label per row
};

// Whether a (no filter: rows null and by_label false) allows row r.
__device__ __forceinline__ bool row_allowed(const RowFilter &a, long long r)
{
    if (a.by_label) return id_allowed(a.f, a.labels[r]);
    return row_allowed(a.rows, r);
}

// The rows [0, n) of a stored array that f allows, by their labels ids
// (device), into *bits (device, (n + 31) / 32 words; null where f is null),
// with extra_bytes more device bytes, 16-aligned, at *extra for the caller
// (the Flat scan's column terms).  Queued on dev's first stream; the memory
// is dev's filter buffer, which stays until the next filtered call.  f goes
// to the device once: a call with the same filter as the last reads it
// there (Device::sent) once its bytes compare equal on the host.  Caller
// holds dev->lock.
simil_status rows_allowed(Device *dev, const sml_id_filter *f, const int64_t *ids, long long n,
                          size_t extra_bytes, const uint32_t **bits, void **extra);

// The filter f (null: none) for a scan that tests each row's label as it
// reads the row (RowFilter::by_label): f sent to the device as
// rows_allowed sends it, no bitset over the rows.  Caller holds dev->lock.
simil_status labels_allowed(Device *dev, const sml_id_filter *f, const int64_t *labels,
                            RowFilter *out);

// add[r] = (norms ? norms[r] : 0) + (row r allowed ? 0 : +inf), r < n: the
// per-column term of Flat's selection under a filter.
simil_status launch_filter_add(long long n, const float *norms, const uint32_t *bits, float *add,
                               cudaStream_t st);

// Each of npairs distance segments (device plan arrays: segment p starts at
// pair_out[p] and holds pair_cols[p] positions, position i being arena row
// pair_base[p] + i): +inf at the positions of the rows f refuses (by the
// rows' bitset, or by label; no filter: nothing to do).
simil_status launch_mask_pairs(int npairs, const long long *pair_out, const int *pair_cols,
                               const int *pair_base, const RowFilter &f, float *distances,
                               cudaStream_t st);

}  // namespace sml
