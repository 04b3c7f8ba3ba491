// test_odd_network.cu: the odd-size merging and sorting networks of
// src/cuda/odd_network.cuh (the GPU paper's Algorithms 1 and 2), run on the
// host over plain arrays laid out as the GPU's lane-strided registers.  No
// GPU needed.
//
// The executor here does what warp_sort.cuh's RegNet does with registers and
// shuffles: element e of the array is lane e % 32 of register e / 32, and the
// lower element of each compare-exchange keeps the smaller (key, index) pair.
// By the 0-1 principle a network sorts (merges) every input if it sorts
// (merges) every input of zeros and ones: merges of small runs are checked
// on all sorted 0-1 inputs, and everything on random inputs with ties.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}

#include <algorithm>
#include <utility>
#include <vector>

#include "cuda/odd_network.cuh"

namespace {

struct Pair {
    float key;
    int idx;
};

bool less(const Pair &a, const Pair &b) { return a.key < b.key || (a.key == b.key && a.idx < b.idx); }

struct HostNet {
    std::vector<Pair> e;
    long ops = 0;

    void cas(int lo, int hi)
    {
        assert_true(lo < hi);
        if (less(e[hi], e[lo])) std::swap(e[lo], e[hi]);
        ops++;
    }
    void cas_regs(int a, int b)
    {
        assert_true(a < b);
        for (int l = 0; l < 32; l++) cas(a * 32 + l, b * 32 + l);
    }
    void cas_lanes(int r, int mask)
    {
        assert_true(mask > 0 && mask < 32);
        for (int l = 0; l < 32; l++)
            if (l < (l ^ mask)) cas(r * 32 + l, r * 32 + (l ^ mask));
    }
    void cas_cross(int a, int b)
    {
        assert_true(a < b);
        for (int l = 0; l < 32; l++) cas(a * 32 + 31 - l, b * 32 + l);
    }
};

uint64_t rng_state = 0x9e3779b97f4a7c15ull;

uint64_t next_random()
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Keys from a few values (ties everywhere, ordered by index) or 0-1 keys.
std::vector<Pair> random_pairs(int n, int values)
{
    std::vector<Pair> v(n);
    for (int i = 0; i < n; i++) v[i] = Pair{(float)(next_random() % values), i};
    return v;
}

void sort_pairs(std::vector<Pair>::iterator a, std::vector<Pair>::iterator b)
{
    std::sort(a, b, less);
}

void expect_sorted(const char *what, int n1, int n2, const std::vector<Pair> &got,
                   const std::vector<Pair> &want)
{
    for (size_t i = 0; i < want.size(); i++)
        if (got[i].key != want[i].key || got[i].idx != want[i].idx)
            fail_msg("%s (%d, %d registers): element %zu is (%g, %d), want (%g, %d)", what, n1,
                     n2, i, got[i].key, got[i].idx, want[i].key, want[i].idx);
}

// SORT-ODD over N registers.
template <int N>
void check_sort(int trials)
{
    for (int t = 0; t < trials; t++) {
        HostNet x;
        x.e = random_pairs(32 * N, t % 3 == 0 ? 2 : 1 + (int)(next_random() % 100));
        std::vector<Pair> want = x.e;
        sort_pairs(want.begin(), want.end());
        sml::odd::sort<0, N>(x);
        expect_sorted("sort", N, 0, x.e, want);
    }
}

// Two sorted runs of NL and NR registers, keys from `values`, or 0-1 runs
// with z1 and z2 zeros (values 0).
std::vector<Pair> sorted_runs(int nl, int nr, int values, int z1, int z2)
{
    std::vector<Pair> e;
    if (values > 0) {
        e = random_pairs(32 * (nl + nr), values);
    } else {
        for (int i = 0; i < 32 * nl; i++) e.push_back(Pair{i < z1 ? 0.0f : 1.0f, 2 * i});
        for (int i = 0; i < 32 * nr; i++) e.push_back(Pair{i < z2 ? 0.0f : 1.0f, 2 * i + 1});
    }
    sort_pairs(e.begin(), e.begin() + 32 * nl);
    sort_pairs(e.begin() + 32 * nl, e.end());
    return e;
}

// MERGE-ODD of NL and NR registers; then WarpSelect's merge, which keeps the
// NL * 32 smallest: the first stage with only the left minima kept, then
// MERGE-ODD-CONTINUE of the left run.
template <int NL, int NR>
void check_merge_case(const std::vector<Pair> &runs)
{
    std::vector<Pair> want = runs;
    sort_pairs(want.begin(), want.end());
    HostNet full;
    full.e = runs;
    sml::odd::merge<0, NL, NR>(full);
    expect_sorted("merge", NL, NR, full.e, want);

    HostNet lower;
    lower.e.assign(runs.begin(), runs.begin() + 32 * NL);
    constexpr int M = NL < NR ? NL : NR;
    for (int t = 0; t < M; t++)
        for (int l = 0; l < 32; l++) {
            Pair &w = lower.e[(NL - 1 - t) * 32 + l];
            const Pair &s = runs[32 * NL + t * 32 + 31 - l];
            if (less(s, w)) w = s;
        }
    sml::odd::merge_continue<0, NL, true>(lower);
    want.resize(32 * NL);
    expect_sorted("select merge", NL, NR, lower.e, want);
}

template <int NL, int NR>
void check_merge(int trials, bool every_01)
{
    if (every_01) {
        for (int z1 = 0; z1 <= 32 * NL; z1++)
            for (int z2 = 0; z2 <= 32 * NR; z2++) check_merge_case<NL, NR>(sorted_runs(NL, NR, 0, z1, z2));
    }
    for (int t = 0; t < trials; t++)
        check_merge_case<NL, NR>(sorted_runs(NL, NR, 1 + (int)(next_random() % 200), 0, 0));
}

template <int... Ns>
void check_sorts(std::integer_sequence<int, Ns...>, int trials)
{
    (check_sort<Ns>(trials), ...);
}

// Sorts of every length up to 16 registers, of every warp queue size of
// the instantiation table (select.cuh), and of 28 (a left array of 7 inside).
void test_sort(void **state)
{
    (void)state;
    check_sorts(std::integer_sequence<int, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                     24, 28, 32, 48, 64>{},
                20);
}

template <int NL, int... NRs>
void check_merges_left(std::integer_sequence<int, NRs...>, int trials, bool every_01)
{
    (check_merge<NL, NRs>(trials, every_01), ...);
}

// Merges of runs of 1 to 3 registers on every sorted 0-1 input, and of 1 to
// 5, 7, 11 and 13 registers on random ones (7, 11 and 13 are left arrays
// whose first split leaves a part that is not a power of two).
void test_merge_small_runs(void **state)
{
    (void)state;
    using Small = std::integer_sequence<int, 1, 2, 3>;
    check_merges_left<1>(Small{}, 0, true);
    check_merges_left<2>(Small{}, 0, true);
    check_merges_left<3>(Small{}, 0, true);
    using Runs = std::integer_sequence<int, 1, 2, 3, 4, 5, 7, 11, 13>;
    check_merges_left<1>(Runs{}, 30, false);
    check_merges_left<2>(Runs{}, 30, false);
    check_merges_left<3>(Runs{}, 30, false);
    check_merges_left<4>(Runs{}, 30, false);
    check_merges_left<5>(Runs{}, 30, false);
    check_merges_left<7>(Runs{}, 30, false);
    check_merges_left<11>(Runs{}, 30, false);
    check_merges_left<13>(Runs{}, 30, false);
}

// The merges of WarpSelect's queues: warp queues of every size of the
// instantiation table with thread queues of T = 2, 3, 4 and 8 registers, and
// with another warp queue of the same size (BlockSelect's final merge).
template <int... Ns>
void check_queue_merges(std::integer_sequence<int, Ns...>)
{
    using T = std::integer_sequence<int, 2, 3, 4, 8>;
    (check_merges_left<Ns>(T{}, 20, false), ...);
    (check_merge<Ns, Ns>(20, false), ...);
}

void test_merge_queue_sizes(void **state)
{
    (void)state;
    check_queue_merges(std::integer_sequence<int, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64>{});
}

// Odd sizes cost fewer compare-exchanges than padding to a power of two:
// sorting 3 registers against 4.
void test_odd_sizes_save_work(void **state)
{
    (void)state;
    HostNet three, four;
    three.e = random_pairs(96, 10);
    four.e = random_pairs(128, 10);
    sml::odd::sort<0, 3>(three);
    sml::odd::sort<0, 4>(four);
    assert_true(three.ops < four.ops);
}

}  // namespace

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sort),
        cmocka_unit_test(test_merge_small_runs),
        cmocka_unit_test(test_merge_queue_sizes),
        cmocka_unit_test(test_odd_sizes_save_work),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
