// odd_network.cuh: the GPU paper's odd-size merging and sorting networks
// (section 4.1, Algorithms 1 and 2), as compile-time recursions that emit
// compare-exchanges.
//
// The arrays are lane-strided: element e of an array of N registers sits in
// lane e % 32 of register e / 32, so lengths are multiples of 32 and N needs
// not be a power of two.  An odd-size network acts as if each array were
// padded to a power of two with dummies that never move (a left array padded
// at its start with -inf, a right array at its end with +inf) and leaves out
// every comparison with a dummy.  As the padding is whole registers, each
// register still holds 32 elements, and inside a register every network is
// the usual power-of-two butterfly.
//
// The recursions call an executor x:
//   x.cas_regs(a, b)      in every lane, registers a < b: a keeps the smaller;
//   x.cas_lanes(r, mask)  register r, lane l against lane l ^ mask: the lower
//                         lane keeps the smaller;
//   x.cas_cross(a, b)     registers a < b, lane 31 - l of a against lane l of
//                         b: a keeps the smaller (the reversed first stage of
//                         a merge of sorted runs).
// Everything ascends: "smaller" is the (key, index) order of warp_sort.cuh.
// warp_sort.cuh's RegNet runs them on registers; tests/cuda/test_odd_network.cu
// runs them on plain arrays on the host.
#pragma once

// The networks are host and device code, and call the executor's methods,
// which are device code (RegNet) or host code (the test's): nv_exec_check_disable
// lets nvcc instantiate each template for the side its executor lives on.
// Forced inlining on the device only (register arrays need it; the host
// test compiles much faster without).
#if defined(__CUDACC__) && defined(__CUDA_ARCH__)
#define SML_NET_CHECK _Pragma("nv_exec_check_disable")
#define SML_NET_FN __host__ __device__ __forceinline__
#define SML_NET_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#define SML_NET_CHECK _Pragma("nv_exec_check_disable")
#define SML_NET_FN __host__ __device__ inline
#define SML_NET_UNROLL
#else
#define SML_NET_CHECK
#define SML_NET_FN inline
#define SML_NET_UNROLL
#endif

namespace sml {
namespace odd {

// The largest power of two below n (n >= 2).
constexpr int pow2_below(int n)
{
    int h = 1;
    while (2 * h < n) h *= 2;
    return h;
}

// MERGE-ODD-CONTINUE over registers [Lo, Lo + N): after the first stage of a
// merge, sorts them.  Left: the array counts as padded at its start.
SML_NET_CHECK
template <int Lo, int N, bool Left, class X>
SML_NET_FN void merge_continue(X &x)
{
    static_assert(N >= 1, "empty array");
    if constexpr (N == 1) {
        SML_NET_UNROLL
        for (int s = 16; s >= 1; s >>= 1) x.cas_lanes(Lo, s);
    } else {
        constexpr int H = pow2_below(N);
        SML_NET_UNROLL
        for (int i = 0; i < N - H; ++i) x.cas_regs(Lo + i, Lo + i + H);
        if constexpr (Left) {
            merge_continue<Lo, N - H, true>(x);
            merge_continue<Lo + N - H, H, false>(x);
        } else {
            merge_continue<Lo, H, true>(x);
            merge_continue<Lo + H, N - H, false>(x);
        }
    }
}

// The first stage of MERGE-ODD between sorted runs [Lo, Lo + NL) and
// [Lo + NL, Lo + NL + NR): element NL*32 - 1 - i of the left run against
// element i of the right one.
SML_NET_CHECK
template <int Lo, int NL, int NR, class X>
SML_NET_FN void merge_first_stage(X &x)
{
    constexpr int M = NL < NR ? NL : NR;
    SML_NET_UNROLL
    for (int t = 0; t < M; ++t) x.cas_cross(Lo + NL - 1 - t, Lo + NL + t);
}

// MERGE-ODD (Algorithm 1): two sorted runs, [Lo, Lo + NL) and the NR
// registers after it, into one sorted run.
SML_NET_CHECK
template <int Lo, int NL, int NR, class X>
SML_NET_FN void merge(X &x)
{
    merge_first_stage<Lo, NL, NR>(x);
    merge_continue<Lo, NL, true>(x);
    merge_continue<Lo + NL, NR, false>(x);
}

// The 32 elements of register R: merges of runs of 1, 2, 4, 8 and 16 lanes,
// each a reversed stage (lane l against lane l ^ (2m - 1)) and butterflies.
SML_NET_CHECK
template <int R, class X>
SML_NET_FN void sort_lanes(X &x)
{
    SML_NET_UNROLL
    for (int m = 1; m < 32; m *= 2) {
        x.cas_lanes(R, 2 * m - 1);
        SML_NET_UNROLL
        for (int s = m / 2; s >= 1; s /= 2) x.cas_lanes(R, s);
    }
}

// SORT-ODD (Algorithm 2) over registers [Lo, Lo + N): sort both halves
// (split at a register), then merge them.
SML_NET_CHECK
template <int Lo, int N, class X>
SML_NET_FN void sort(X &x)
{
    static_assert(N >= 1, "empty array");
    if constexpr (N == 1) {
        sort_lanes<Lo>(x);
    } else {
        constexpr int A = N / 2;
        sort<Lo, A>(x);
        sort<Lo + A, N - A>(x);
        merge<Lo, A, N - A>(x);
    }
}

}  // namespace odd
}  // namespace sml
