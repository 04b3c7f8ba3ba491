// warp_select.cuh: WarpSelect, k-selection in registers (the GPU paper,
// section 4), and the row reader that every selection kernel shares.
//
// One warp streams a row once and keeps the k smallest (key, index) pairs:
//   - a thread queue per lane: T pairs sorted largest first, filled with
//     pairs below both its head and the warp's current k-th smallest;
//   - a warp queue: K pairs (K >= k, a multiple of 32), sorted, lane-strided
//     (warp_sort.cuh).
// When a warp vote finds some lane's thread queue full of pairs below the k-th,
// the thread queues are sorted together and merged into the warp queue (keep
// the K smallest), and restart empty.  T follows the paper: 2 for K <= 32, 3 for
// K <= 128, 4 for K <= 256, 8 above.  WarpSelect<K, true> sorts and merges
// with the paper's odd-size networks (odd_network.cuh): T registers sorted as
// they are, any multiple of 32 for K.  WarpSelect<K> (the IVF-PQ scan's)
// pads the thread queues to a power of two and takes K a power of two, with
// bitonic networks.
//
// The paper's WarpSelect over rows is queue_warp_select_kernel: thread
// queues in registers, keys read four at a time, and one warp vote per step
// (select_step) before any pair is offered.
//
// The selection kernel over rows (warp_select_kernel) departs from the paper
// in three ways.  Each lane reads 8 keys at a time (two 16-byte loads where the
// rows are aligned) and one warp vote asks whether any of them beats the k-th
// at all; only then are they offered one by one.  Once the queue is warm
// almost every batch stops at that vote, so the kernel streams at memory
// speed.  A job may carry a bound per row (the k-th of what an earlier pass
// already kept): pairs above it are dropped at once.  And in place of the
// thread queues, the warp appends the pairs that beat the k-th to one buffer
// of 32 slots in shared memory (BufferedWarpSelect), merged into the warp
// queue when full: a merge then sorts 32 pairs, where the thread queues' merge
// sorts 32 T slots (at K = 64, 128 slots, mostly empty), and on short rows the
// merges were half of the kernel's instructions.  The thread queues stay for
// callers that offer one pair per lane at a time (the IVF-PQ scan).
//
// Keys come from a SelectJob: key(i, j) = add[j] + row_scale[i] * scale[j] *
// score[i][j], each factor optional, so the same kernel reads a GEMM tile and
// finishes the distance on the way (the paper's fused kernel: ||y||^2 added and
// selection in one pass).  NaN keys count as +inf.
#pragma once

#include <cuda_fp16.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "cuda/warp_sort.cuh"

namespace sml {

// What to select.  Keys ascend; select the largest by negating row_scale.
struct SelectJob {
    const void *scores;       // rows x cols, row stride ld (float or __half)
    long long ld;
    const float *add;         // per column, or null
    const float *scale;       // per column, or null
    const float *row_scale;   // per row, or null for row_scale_const
    float row_scale_const;
    const int *in_idx;        // rows x cols (stride ld) indices to report, or null
    int idx_base;             // reported index of column j: idx_base + j (no in_idx)
    int rows;
    int cols;
    int k;                    // 1 <= k <= K
    const float *bound_key;   // per row (stride bound_ld): drop pairs above
    const int *bound_idx;     //   (bound_key, bound_idx); null for no bound
    long long bound_ld;
    int split;                // > 1: each row is read as `split` pieces of `cols`
    int split_cols;           //   columns (the last one shorter) out of split_cols;
                              //   piece p of row r is output row r * split + p
    const long long *row_offsets;  // ragged rows: row r starts at element
    const int *row_cols;           //   row_offsets[r] of scores (and in_idx), has
    const int *row_idx_base;       //   row_cols[r] columns, reports idx_base + j with
                                   //   idx_base = row_idx_base[r] (may be null)
    const int *out_rows;           // row r is written to output row out_rows[r] (or r)
    float *out_keys;          // rows x k, stride out_ld; empty slots (+inf, -1)
    int *out_idx;
    long long out_ld;
};

constexpr int kEmptyIdx = INT_MAX;

// Reads the keys of one row of a job.  Vec: the row and the per-column arrays
// are 16-byte aligned (8 for fp16 scores) and ld is a multiple of 4, so four
// columns come in one load.
template <typename S, bool Vec>
struct RowReader {
    const SelectJob &job;
    const S *scores;
    const float *add;
    const float *scale;
    const int *in_idx;
    float row_scale;
    int idx_base;
    int cols;
    int row;  // the matrix row (out_row / split when split)

    __device__ __forceinline__ RowReader(const SelectJob &j, int out_row) : job(j)
    {
        row = out_row;
        int first = 0;
        cols = j.cols;
        if (j.split > 1) {
            row = out_row / j.split;
            first = (out_row % j.split) * j.cols;
            cols = min(j.cols, j.split_cols - first);
        }
        long long start = (long long)row * j.ld + first;
        idx_base = j.idx_base + first;
        if (j.row_offsets) {
            start = j.row_offsets[row];
            cols = j.row_cols[row];
            if (j.row_idx_base) idx_base = j.row_idx_base[row];
        }
        scores = static_cast<const S *>(j.scores) + start;
        add = j.add ? j.add + first : nullptr;
        scale = j.scale ? j.scale + first : nullptr;
        in_idx = j.in_idx ? j.in_idx + start : nullptr;
        row_scale = j.row_scale ? j.row_scale[row] : j.row_scale_const;
    }

    __device__ __forceinline__ float key_of(float s, int j) const
    {
        s *= row_scale;
        if (scale) s *= scale[j];
        const float key = add ? add[j] + s : s;
        return key != key ? INFINITY : key;
    }

    __device__ __forceinline__ void finish(float s, int j, float &key, int &idx) const
    {
        key = key_of(s, j);
        idx = in_idx ? in_idx[j] : idx_base + j;
        if (idx < 0) {  // an empty slot of an earlier pass
            key = INFINITY;
            idx = kEmptyIdx;
        }
    }

    // The score of column j < cols.
    __device__ __forceinline__ float raw1(int j) const
    {
        if constexpr (sizeof(S) == 4)
            return scores[j];
        else
            return __half2float(scores[j]);
    }

    // The scores of columns j..j+3 in one load (Vec, j a multiple of 4).
    __device__ __forceinline__ void raw4(int j, float (&s)[4]) const
    {
        if constexpr (sizeof(S) == 4) {
            const float4 v = *reinterpret_cast<const float4 *>(scores + j);
            s[0] = v.x, s[1] = v.y, s[2] = v.z, s[3] = v.w;
        } else {
            const uint2 raw = *reinterpret_cast<const uint2 *>(scores + j);
            const float2 lo = __half22float2(*reinterpret_cast<const __half2 *>(&raw.x));
            const float2 hi = __half22float2(*reinterpret_cast<const __half2 *>(&raw.y));
            s[0] = lo.x, s[1] = lo.y, s[2] = hi.x, s[3] = hi.y;
        }
    }

    __device__ __forceinline__ void load1(int j, float &key, int &idx) const
    {
        if (j >= cols) {
            key = INFINITY;
            idx = kEmptyIdx;
            return;
        }
        finish(raw1(j), j, key, idx);
    }

    // Columns j..j+3 (j a multiple of 4).
    __device__ __forceinline__ void load4(int j, float (&key)[4], int (&idx)[4]) const
    {
        if (!Vec || j + 4 > cols) {
#pragma unroll
            for (int u = 0; u < 4; ++u) load1(j + u, key[u], idx[u]);
            return;
        }
        float s[4];
        raw4(j, s);
#pragma unroll
        for (int u = 0; u < 4; ++u) finish(s[u], j + u, key[u], idx[u]);
    }

    // The keys alone of columns j..j+3 (j a multiple of 4; +inf past the
    // row): index() gives a column's index later, so that only the
    // candidates read in_idx.
    __device__ __forceinline__ void keys4(int j, float (&key)[4]) const
    {
        if (!Vec || j + 4 > cols) {
#pragma unroll
            for (int u = 0; u < 4; ++u) key[u] = j + u < cols ? key_of(raw1(j + u), j + u) : INFINITY;
            return;
        }
        float s[4];
        raw4(j, s);
#pragma unroll
        for (int u = 0; u < 4; ++u) key[u] = key_of(s[u], j + u);
    }

    // The index of column j, whose key keys4 gave: kEmptyIdx past the row,
    // and for an empty slot of an earlier pass, whose key becomes +inf.
    __device__ __forceinline__ int index(int j, float &key) const
    {
        if (j >= cols) return kEmptyIdx;  // its key is +inf already
        const int idx = in_idx ? in_idx[j] : idx_base + j;
        if (idx < 0) {
            key = INFINITY;
            return kEmptyIdx;
        }
        return idx;
    }

    // The row's bound, or (+inf, kEmptyIdx).
    __device__ __forceinline__ void bound(float &key, int &idx) const
    {
        key = INFINITY;
        idx = kEmptyIdx;
        if (job.bound_key) {
            key = job.bound_key[(long long)row * job.bound_ld];
            idx = job.bound_idx[(long long)row * job.bound_ld];
            if (idx < 0) {
                key = INFINITY;
                idx = kEmptyIdx;
            }
        }
    }
};

template <int K>
struct ThreadQueueLength {
    static constexpr int value = K <= 32 ? 2 : K <= 128 ? 3 : K <= 256 ? 4 : 8;
};

// Odd: the odd-size networks (any K that is a multiple of 32, thread queues
// sorted as they are); otherwise bitonic ones (K a power of two, thread
// queues sorted as a power of two).
template <int K, bool Odd = false>
struct WarpSelect {
    static_assert(K >= 32 && K % 32 == 0, "the warp queue is whole registers");
    static_assert(Odd || (K & (K - 1)) == 0, "bitonic networks take powers of two");
    static constexpr int N = K / 32;
    static constexpr int T = ThreadQueueLength<K>::value;
    static constexpr int TP = Odd ? T : T <= 2 ? 2 : T <= 4 ? 4 : 8;

    float wk[N];
    int wv[N];
    float tk[T];
    int tv[T];
    float kth_k;  // min(k-th of the warp queue, bound): what a pair must beat
    int kth_v;
    float bound_k;
    int bound_v;
    int k;

    __device__ __forceinline__ void init(int k_, float bk, int bv)
    {
        k = k_;
#pragma unroll
        for (int r = 0; r < N; ++r) {
            wk[r] = INFINITY;
            wv[r] = kEmptyIdx;
        }
#pragma unroll
        for (int t = 0; t < T; ++t) {
            tk[t] = INFINITY;
            tv[t] = kEmptyIdx;
        }
        bound_k = kth_k = bk;
        bound_v = kth_v = bv;
    }

    // Lane-local: offer one pair.
    __device__ __forceinline__ void add(float key, int idx)
    {
        if (kv_less(key, idx, tk[0], tv[0]) && kv_less(key, idx, kth_k, kth_v)) {
            tk[0] = key;
            tv[0] = idx;
#pragma unroll
            for (int t = 0; t + 1 < T; ++t) cas_regs(tk[t], tv[t], tk[t + 1], tv[t + 1], false);
        }
    }

    // Warp-wide: is some lane's thread queue full of pairs below the k-th?
    __device__ __forceinline__ bool need_merge() const
    {
        return __any_sync(kFullMask, kv_less(tk[0], tv[0], kth_k, kth_v));
    }

    // Warp-wide: fold a sorted run of 32 * M pairs (M slots) into the warp queue.
    template <int M>
    __device__ __forceinline__ void merge_sorted(const float (&sk)[M], const int (&sv)[M])
    {
        // Against the warp queue's tail, the run reversed: elementwise minima of
        // an ascending and a descending sequence are the K smallest of both,
        // and form a bitonic sequence (the first stage of MERGE-ODD, keeping
        // only the lower half).
        constexpr int P = M < N ? M : N;
        const int mirror = 31 - lane_id();
#pragma unroll
        for (int r = N - P; r < N; ++r) {
            float ok = __shfl_sync(kFullMask, sk[N - 1 - r], mirror);
            int ov = __shfl_sync(kFullMask, sv[N - 1 - r], mirror);
            if (kv_less(ok, ov, wk[r], wv[r])) {
                wk[r] = ok;
                wv[r] = ov;
            }
        }
        sort_bitonic_queue();
        update_kth();
    }

    // Warp-wide: fold a sorted run of K pairs in shared memory (element e at
    // sk[e], sv[e]; another warp's queue) into the warp queue.
    __device__ __forceinline__ void merge_sorted_shared(const float *sk, const int *sv)
    {
        const int mirror = 31 - lane_id();
#pragma unroll
        for (int r = 0; r < N; ++r) {
            const float ok = sk[(N - 1 - r) * 32 + mirror];
            const int ov = sv[(N - 1 - r) * 32 + mirror];
            if (kv_less(ok, ov, wk[r], wv[r])) {
                wk[r] = ok;
                wv[r] = ov;
            }
        }
        sort_bitonic_queue();
        update_kth();
    }

    // The warp queue holds a bitonic sequence (ascending, then descending):
    // sort it.  Odd: MERGE-ODD-CONTINUE of a left array.
    __device__ __forceinline__ void sort_bitonic_queue()
    {
        if constexpr (Odd) {
            RegNet<N> net{wk, wv};
            odd::merge_continue<0, N, true>(net);
        } else {
            warp_bitonic_merge<N>(wk, wv);
        }
    }

    // A bound from elsewhere (another warp's k-th): pairs above it can be
    // dropped at once.
    __device__ __forceinline__ void tighten(float key, int idx)
    {
        if (kv_less(key, idx, bound_k, bound_v)) {
            bound_k = key;
            bound_v = idx;
        }
        if (kv_less(key, idx, kth_k, kth_v)) {
            kth_k = key;
            kth_v = idx;
        }
    }

    // Out of line, which keeps the kernels that call it small (the IVF-PQ
    // scan's table by sub-quantizer), but puts the queue in local memory
    // around the call; merge_inline keeps it in
    // registers, for kernels where each add would otherwise go to memory.
    __device__ __noinline__ void merge() { merge_inline(); }

    __device__ __forceinline__ void merge_inline()
    {
        if constexpr (Odd) {
            RegNet<T> net{tk, tv};
            odd::sort<0, T>(net);
            merge_sorted<T>(tk, tv);
        } else {
            float sk[TP];
            int sv[TP];
#pragma unroll
            for (int t = 0; t < TP; ++t) {
                sk[t] = t < T ? tk[t] : INFINITY;
                sv[t] = t < T ? tv[t] : kEmptyIdx;
            }
            warp_bitonic_sort<TP>(sk, sv);
            merge_sorted<TP>(sk, sv);
        }
#pragma unroll
        for (int t = 0; t < T; ++t) {
            tk[t] = INFINITY;
            tv[t] = kEmptyIdx;
        }
    }

    __device__ __forceinline__ void update_kth()
    {
        const int slot = (k - 1) >> 5;
        float key = wk[0];
        int idx = wv[0];
#pragma unroll
        for (int r = 1; r < N; ++r)
            if (r == slot) {
                key = wk[r];
                idx = wv[r];
            }
        key = __shfl_sync(kFullMask, key, (k - 1) & 31);
        idx = __shfl_sync(kFullMask, idx, (k - 1) & 31);
        if (kv_less(key, idx, bound_k, bound_v)) {
            kth_k = key;
            kth_v = idx;
        } else {
            kth_k = bound_k;
            kth_v = bound_v;
        }
    }

    // Write the k smallest, ascending; empty slots get (+inf, -1).
    __device__ __forceinline__ void write(float *keys, int *idx) const
    {
        const int lane = lane_id();
#pragma unroll
        for (int r = 0; r < N; ++r) {
            int e = r * 32 + lane;
            if (e < k) {
                keys[e] = wv[r] == kEmptyIdx ? INFINITY : wk[r];
                idx[e] = wv[r] == kEmptyIdx ? -1 : wv[r];
            }
        }
    }
};

// Each lane of the warp reads 8 columns per step: two groups of 4.
constexpr int kSelectUnroll = 2;

// WarpSelect's warp queue, fed through one buffer per warp: the pairs that
// beat the k-th go to 32 slots in shared memory (a ballot gives each its
// slot); a full buffer is read back one pair per lane, sorted as one register
// of 32 pairs and merged into the warp queue.  All lanes take part in every
// call.
template <int K, bool Odd = false>
struct BufferedWarpSelect {
    WarpSelect<K, Odd> q;  // the warp queue, k-th and bound (its thread queue unused)
    float *slot_k;    // the warp's 32 slots
    int *slot_v;
    int count;        // slots filled: the same in every lane

    __device__ __forceinline__ void init(int k, float bk, int bv, float *sk, int *sv)
    {
        q.init(k, bk, bv);
        slot_k = sk;
        slot_v = sv;
        count = 0;
    }

    __device__ __forceinline__ void flush()
    {
        if (count == 0) return;
        __syncwarp();  // the appends are visible
        const int lane = lane_id();
        float k[1] = {lane < count ? slot_k[lane] : INFINITY};
        int v[1] = {lane < count ? slot_v[lane] : kEmptyIdx};
        __syncwarp();  // read before the next appends
        warp_bitonic_sort<1>(k, v);
        q.template merge_sorted<1>(k, v);
        count = 0;
    }

    // Each lane offers one pair.
    __device__ __forceinline__ void offer(float key, int idx)
    {
        bool take = kv_less(key, idx, q.kth_k, q.kth_v);
        unsigned mask = __ballot_sync(kFullMask, take);
        if (mask == 0) return;
        if (count + __popc(mask) > 32) {
            flush();
            take = kv_less(key, idx, q.kth_k, q.kth_v);  // the k-th may have fallen
            mask = __ballot_sync(kFullMask, take);
        }
        if (take) {
            const int at = count + __popc(mask & ((1u << lane_id()) - 1));
            slot_k[at] = key;
            slot_v[at] = idx;
        }
        count += __popc(mask);
    }
};

// Offers ws the pairs e = e0 + m * step + lane (m = 0, 1, ... while the
// warp's e0 + m * step < total; load(e, key, idx) gives a pair, and must give
// (+inf, kEmptyIdx) for e >= total), in that order, A pairs' loads issued
// before their offers: a loop that offered each pair as it came waited a
// memory latency per pair (a small batch's merges spent most of their time
// so).  The order is the plain loop's, and the result does not depend on it.
template <int A, typename Select, typename Load>
__device__ __forceinline__ void offer_ahead(Select &ws, int e0, int step, int total, Load load)
{
    const int lane = lane_id();
    for (; e0 < total; e0 += A * step) {
        float key[A];
        int idx[A];
#pragma unroll
        for (int i = 0; i < A; ++i) load(e0 + i * step + lane, key[i], idx[i]);
#pragma unroll
        for (int i = 0; i < A; ++i)
            if (e0 + i * step < total) ws.offer(key[i], idx[i]);
    }
}

// Offers ws, a warp of a block of threads, the parts of one row: total
// pairs (part_keys[e], part_idx[e]), an index below 0 being an empty slot;
// the block's warps take every threads-th pair from their first (offer_ahead).
// The parts are read through L2 (__ldcg), never from this SM's L1: other
// blocks of the same kernel may have written them (ivf_small_merge.cuh).
template <int A, typename Select>
__device__ __forceinline__ void offer_parts(Select &ws, const float *part_keys,
                                            const int *part_idx, int total, int threads)
{
    offer_ahead<A>(ws, (int)(threadIdx.x & ~31u), threads, total, [&](int e, float &key, int &idx) {
        const int i = e < total ? __ldcg(part_idx + e) : -1;
        key = i < 0 ? INFINITY : __ldcg(part_keys + e);
        idx = i < 0 ? kEmptyIdx : i;
    });
}

// The end of a block's selection, Warps warps of 32 (every thread calls it):
// each warp's queue (its kk best) goes to list_k[warp], list_v[warp], and
// warp 0 merges them into list_k[0], list_v[0], the kk best of the block in
// order; false in the other warps, whose part is done.
template <int K, int Warps>
__device__ __forceinline__ bool block_merge(BufferedWarpSelect<K> &ws, int kk,
                                            float (*list_k)[K], int (*list_v)[K],
                                            float (*slot_k)[32], int (*slot_v)[32])
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    ws.flush();
    ws.q.write(list_k[warp], list_v[warp]);
    __syncthreads();
    if (warp != 0) return false;
    BufferedWarpSelect<K> m;
    m.init(kk, INFINITY, kEmptyIdx, slot_k[0], slot_v[0]);
    for (int e0 = 0; e0 < Warps * kk; e0 += 32) {
        const int e = e0 + lane;
        const int w = e / kk, i = e - w * kk;
        const int r = e < Warps * kk ? list_v[w][i] : -1;
        m.offer(r < 0 ? INFINITY : list_k[w][i], r < 0 ? kEmptyIdx : r);
    }
    m.flush();
    __syncwarp();
    m.q.write(list_k[0], list_v[0]);
    __syncwarp();
    return true;
}

// WarpSelect over rows: one warp per row, 4 rows per block of 128 threads.
template <int K, typename S, bool Vec>
__global__ void __launch_bounds__(128) warp_select_kernel(const __grid_constant__ SelectJob job)
{
    __shared__ float slot_k[4][32];
    __shared__ int slot_v[4][32];
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= job.rows) return;  // the whole warp leaves together
    const int lane = lane_id(), warp = threadIdx.x >> 5;
    RowReader<S, Vec> rd(job, row);
    float bk;
    int bv;
    rd.bound(bk, bv);
    BufferedWarpSelect<K> ws;
    ws.init(job.k, bk, bv, slot_k[warp], slot_v[warp]);
    for (int j0 = 0; j0 < rd.cols; j0 += 128 * kSelectUnroll) {
        float key[kSelectUnroll][4];
        int idx[kSelectUnroll][4];
        bool any = false;
#pragma unroll
        for (int u = 0; u < kSelectUnroll; ++u) {
            rd.load4(j0 + (u * 32 + lane) * 4, key[u], idx[u]);
#pragma unroll
            for (int e = 0; e < 4; ++e) any |= kv_less(key[u][e], idx[u][e], ws.q.kth_k, ws.q.kth_v);
        }
        if (!__any_sync(kFullMask, any)) continue;
#pragma unroll
        for (int u = 0; u < kSelectUnroll; ++u)
#pragma unroll
            for (int e = 0; e < 4; ++e) ws.offer(key[u][e], idx[u][e]);
    }
    ws.flush();
    const long long out = job.out_rows ? job.out_rows[row] : row;
    ws.q.write(job.out_keys + out * job.out_ld, job.out_idx + out * job.out_ld);
}

// The paper's WarpSelect as a queue for select_step: each offered pair goes
// into its lane's thread queue, and a warp vote after each decides whether
// the thread queues must be merged (odd-size networks).  The interface
// select_step and the block kernel take: init, offer (all lanes, one pair
// each), flush, and the warp queue q; BufferedWarpSelect has the same.
template <int K>
struct QueueWarpSelect {
    WarpSelect<K, true> q;

    __device__ __forceinline__ void init(int k, float bk, int bv, float *, int *)
    {
        q.init(k, bk, bv);
    }

    __device__ __forceinline__ void offer(float key, int idx)
    {
        q.add(key, idx);
        if (q.need_merge()) q.merge_inline();
    }

    __device__ __forceinline__ void flush() { q.merge_inline(); }
};

// float4 loads per lane and step of the queue kernels (select_step).
constexpr int kQueueUnroll = 2;
constexpr int kQueueStep = 32 * 4 * kQueueUnroll;  // columns per warp and step

// One step of a warp over kQueueStep columns from j: lane l reads columns
// j + 4 (32 u + l) .. + 3 for u < kQueueUnroll, and one warp vote on the keys
// alone asks whether any is at or below the k-th (the paper's "compare to
// the thread queue heads", made one vote per step).  Only then are pairs
// offered: in each round every lane offers its next key that was at or below
// the k-th (a lane with none left offers nothing), so a step costs as many
// rounds as the busiest lane has candidates, and the merge networks are
// emitted once (the loop is not unrolled).  A key is picked from the register
// array by a chain of selects, so the array is only indexed by constants.
template <class Q, typename S, bool Vec>
__device__ __forceinline__ void select_step(const RowReader<S, Vec> &rd, Q &sel, int j)
{
    constexpr int kKeys = 4 * kQueueUnroll;
    const int lane = lane_id();
    float key[kKeys];
    unsigned pending = 0;  // bit i: key i was at or below the k-th
#pragma unroll
    for (int u = 0; u < kQueueUnroll; ++u) {
        float four[4];
        rd.keys4(j + (u * 32 + lane) * 4, four);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            key[u * 4 + e] = four[e];
            pending |= (four[e] <= sel.q.kth_k ? 1u : 0u) << (u * 4 + e);
        }
    }
#pragma unroll 1
    while (__any_sync(kFullMask, pending != 0)) {
        float kk = INFINITY;
        int idx = kEmptyIdx;
        if (pending != 0) {
            const int i = __ffs(pending) - 1;
            pending &= pending - 1;
            kk = key[0];
#pragma unroll
            for (int t = 1; t < kKeys; ++t)
                if (i == t) kk = key[t];
            // the k-th may have fallen since the vote: then the pair is
            // offered without its index and refused
            if (kk <= sel.q.kth_k) idx = rd.index(j + ((i >> 2) * 32 + lane) * 4 + (i & 3), kk);
        }
        sel.offer(kk, idx);
    }
}

// The paper's WarpSelect over rows: one warp per row, 4 rows per block of 128
// threads, no shared memory.
template <int K, typename S, bool Vec>
__global__ void __launch_bounds__(128) queue_warp_select_kernel(const __grid_constant__ SelectJob job)
{
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= job.rows) return;  // the whole warp leaves together
    RowReader<S, Vec> rd(job, row);
    float bk;
    int bv;
    rd.bound(bk, bv);
    QueueWarpSelect<K> sel;
    sel.init(job.k, bk, bv, nullptr, nullptr);
    for (int j0 = 0; j0 < rd.cols; j0 += kQueueStep) select_step(rd, sel, j0);
    sel.flush();
    const long long out = job.out_rows ? job.out_rows[row] : row;
    sel.q.write(job.out_keys + out * job.out_ld, job.out_idx + out * job.out_ld);
}

}  // namespace sml
