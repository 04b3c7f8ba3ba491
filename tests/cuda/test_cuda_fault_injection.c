/* test_cuda_fault_injection.c: every GPU allocation (device memory and pinned
 * host memory) on the GPU paths of Flat, IVF16,Flat, IVF16,PQ8, XFBQ (whose
 * floats are in pinned memory, with an fp16 shadow on the GPU), XFBQ_fp32,
 * IVF16,XFBQ and of simil_select_k, made to fail in turn
 * (src/core/alloc.h, sml_device_alloc_fail_at: the CUDA backend asks it in
 * device_malloc and pinned_malloc, which every cudaMalloc and cudaMallocHost
 * of the library goes through).
 *
 * The driver is test_fault_injection.c's (sml_fi_run, tests/util): for each
 * operation and N = 1, 2, ... the operation is prepared with injection off,
 * GPU allocation N fails (alone, then sticky: N and every later one), and
 *   - the call returns SIMIL_ERR_OUT_OF_MEMORY with a message, or succeeds
 *     only once N is past its last allocation;
 *   - the index is as it was: it answers both query batches (5 queries and
 *     1,100) with exactly the bits it gave before; a failed create or load
 *     leaves *index NULL, a failed remove reports 0 removed;
 *   - a success gives the results taken without injection, bit for bit;
 *   - nothing leaks.  After every attempt, with every index destroyed, the
 *     library holds as many GPU blocks as before (sml_cuda_live_allocations:
 *     exact, whatever their size).  The per-GPU workspace and pinned buffer
 *     are cached while an index holds the GPU, so free device memory is only
 *     comparable with none open: after a warm-up run of each operation (which
 *     loads the kernels and cuBLAS for good), the free bytes that
 *     cudaMemGetInfo reports after all of that operation's attempts may be
 *     below the bytes before by at most 2 MiB (a margin for the driver's own
 *     bookkeeping).  Every prepare loads the index afresh, so each attempt
 *     starts with no workspace and reaches its allocations.
 * Not covered: allocations inside cuBLAS (its handles' workspaces) and the
 * CUDA runtime's own; host allocations are test_fault_injection's.  The
 * number of points per operation is printed: docs/reliability.md quotes
 * them.  SIMIL_TEST_QUICK: each N fails alone only (no sticky pass). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "cuda/cuda_backend.h"
#include "util/test_util.h"

enum {
    DIM = 32,
    NBASE = 1000,
    NMORE = 400,
    NREMOVE = 100,
    NQ_SMALL = 5,
    NQ_LARGE = 1100,
    K = 10
};

static const size_t slack_bytes = (size_t)2 << 20;

static float base[(NBASE + NMORE) * DIM];
static float queries[NQ_LARGE * DIM];
static long long live_base; /* GPU blocks the library holds with nothing open */

/* ---- the driver: GPU allocations, and leak checks ---- */

static void check_no_blocks(const sml_fi_case *c, int64_t n, int sticky, void *ctx)
{
    (void)ctx;
    const long long live = sml_cuda_live_allocations();
    if (live != live_base)
        fail_msg("%s: after allocation %lld failed (sticky=%d) and everything was destroyed, the "
                 "library holds %lld GPU blocks, %lld before",
                 c->name, (long long)n, sticky, live, live_base);
}

static sml_fi_driver driver = {.fail_at = sml_device_alloc_fail_at,
                               .after_each = check_no_blocks};

static size_t free_device_bytes(void)
{
    size_t free_bytes = 0, total = 0;
    /* a sync first: memory freed into a stream-ordered pool (cuBLAS may use
     * one) goes back to the device at synchronization */
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_int_equal(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
    return free_bytes;
}

/* One warm-up run without injection, then every N; free device memory must
 * come back (see the top of the file). */
static void fi_checked(const sml_fi_case *c, void *ctx)
{
    if (c->prepare) c->prepare(ctx);
    SML_ASSERT_OK(c->run(ctx));
    if (c->check_ok) c->check_ok(ctx);
    if (c->finish) c->finish(ctx);
    check_no_blocks(c, 0, 0, ctx);
    const size_t before = free_device_bytes();
    sml_fi_both(&driver, c, ctx);
    const size_t after = free_device_bytes();
    if (after + slack_bytes < before)
        fail_msg("%s: %zu bytes of device memory free before its attempts, %zu after", c->name,
                 before, after);
}

/* Copy host data to GPU memory, and wait until it is there: a copy from
 * pageable memory may return before its DMA ends, and the library reads it on
 * streams that do not wait for the legacy default stream. */
static void upload(void *d, const void *h, size_t bytes)
{
    assert_int_equal(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
}

/* ---- index fixtures ---- */

typedef struct index_type {
    const char *desc;
    simil_metric metric;
} index_type;

typedef struct index_ctx {
    const index_type *type;
    const char *path;     /* the fixture: trained, base[0, NBASE) with ids 0.. */
    simil_index *index;   /* the fixture, loaded by prepare */
    simil_index *created; /* what create or load made */
    int64_t nq;
    int on_device;        /* search: queries and results in GPU memory */
    float *d_queries;     /* GPU memory (cudaMalloc here), NQ_LARGE x DIM */
    float *d_dist;        /* GPU memory, NQ_LARGE x K */
    int64_t *d_labels;
    float dist[NQ_LARGE * K];
    int64_t labels[NQ_LARGE * K];
    /* results taken without injection on the fixture: [0] NQ_SMALL and [1]
     * NQ_LARGE host queries, [2] NQ_LARGE in GPU memory (the exact search
     * may tile those another way); built: NQ_SMALL on the index as first
     * built */
    float before_d[3][NQ_LARGE * K], built_d[NQ_SMALL * K];
    int64_t before_l[3][NQ_LARGE * K], built_l[NQ_SMALL * K];
} index_ctx;

static const int64_t batch_nq[2] = {NQ_SMALL, NQ_LARGE};

static int needs_training(const index_type *t) { return strncmp(t->desc, "IVF", 3) == 0; }

static void search_into(const simil_index *index, int64_t nq, float *d, int64_t *l)
{
    SML_ASSERT_OK(simil_index_search(index, nq, queries, K, NULL, d, l));
}

static void assert_results(const char *what, const index_ctx *c, int64_t nq, const float *d,
                           const int64_t *l, const float *ref_d, const int64_t *ref_l)
{
    const size_t n = (size_t)(nq * K);
    if (memcmp(l, ref_l, n * sizeof *l) != 0 || memcmp(d, ref_d, n * sizeof *d) != 0)
        fail_msg("%s, %s, nq=%lld: results differ from those taken before", c->type->desc, what,
                 (long long)nq);
}

/* The index answers both batches exactly as the fixture did. */
static void check_same_as_before(const index_ctx *c, const simil_index *index, const char *what)
{
    float *d = sml_test_malloc(sizeof(float) * NQ_LARGE * K);
    int64_t *l = sml_test_malloc(sizeof(int64_t) * NQ_LARGE * K);
    for (int b = 0; b < 2; b++) {
        search_into(index, batch_nq[b], d, l);
        assert_results(what, c, batch_nq[b], d, l, c->before_d[b], c->before_l[b]);
    }
    free(d);
    free(l);
}

static void load_fixture(index_ctx *c)
{
    SML_ASSERT_OK(simil_index_load(&c->index, c->path, "gpu"));
}

static void ix_prepare(void *p) { load_fixture(p); }

static void ix_finish(void *p)
{
    index_ctx *c = p;
    simil_index_destroy(c->index);
    simil_index_destroy(c->created);
    c->index = c->created = NULL;
}

static void check_unchanged(void *p)
{
    index_ctx *c = p;
    assert_int_equal(simil_index_size(c->index), NBASE);
    check_same_as_before(c, c->index, "after a failure");
}

/* create, then train on the base (nothing to train for Flat; alpha for XFBQ). */
static simil_status op_create_train(void *p)
{
    index_ctx *c = p;
    simil_status s = simil_index_create(&c->created, DIM, c->type->desc, c->type->metric, "gpu");
    return s != SIMIL_OK ? s : simil_index_train(c->created, NBASE, base);
}

static void check_create_failed(void *p)
{
    index_ctx *c = p;
    if (c->created == NULL) return;
    assert_int_equal(simil_index_size(c->created), 0);
    if (needs_training(c->type)) assert_false(simil_index_is_trained(c->created));
}

/* Trained as the fixture was: filled the same way it gives the same results. */
static void check_trained(void *p)
{
    index_ctx *c = p;
    assert_true(simil_index_is_trained(c->created));
    SML_ASSERT_OK(simil_index_add(c->created, NBASE, base, NULL));
    float d[NQ_SMALL * K];
    int64_t l[NQ_SMALL * K];
    search_into(c->created, NQ_SMALL, d, l);
    assert_results("trained after failures", c, NQ_SMALL, d, l, c->built_d, c->built_l);
}

static simil_status op_add_ids(void *p)
{
    index_ctx *c = p;
    int64_t ids[NMORE];
    for (int i = 0; i < NMORE; i++) ids[i] = 10000 + i;
    return simil_index_add(c->index, NMORE, base + NBASE * DIM, ids);
}

static simil_status op_add_sequential(void *p)
{
    index_ctx *c = p;
    return simil_index_add(c->index, NMORE, base + NBASE * DIM, NULL);
}

static void check_added(void *p)
{
    index_ctx *c = p;
    assert_int_equal(simil_index_size(c->index), NBASE + NMORE);
    float v[DIM];
    SML_ASSERT_OK(simil_index_reconstruct(c->index, 10000 + NMORE - 1, v));
}

static void check_added_sequential(void *p)
{
    index_ctx *c = p;
    assert_int_equal(simil_index_size(c->index), NBASE + NMORE);
    float v[DIM];
    SML_ASSERT_OK(simil_index_reconstruct(c->index, NBASE + NMORE - 1, v));
}

static simil_status op_search(void *p)
{
    index_ctx *c = p;
    if (c->on_device)
        return simil_index_search(c->index, c->nq, c->d_queries, K, NULL, c->d_dist, c->d_labels);
    return simil_index_search(c->index, c->nq, queries, K, NULL, c->dist, c->labels);
}

/* The results of a search with GPU queries and outputs, to the host. */
static void fetch_device_results(index_ctx *c, int64_t nq, float *d, int64_t *l)
{
    const size_t n = (size_t)(nq * K);
    assert_int_equal(cudaMemcpy(d, c->d_dist, n * sizeof(float), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(l, c->d_labels, n * sizeof(int64_t), cudaMemcpyDeviceToHost),
                     cudaSuccess);
}

static void check_searched(void *p)
{
    index_ctx *c = p;
    const int b = c->on_device ? 2 : c->nq == NQ_SMALL ? 0 : 1;
    if (c->on_device) fetch_device_results(c, c->nq, c->dist, c->labels);
    assert_results(c->on_device ? "GPU queries and results" : "host queries", c, c->nq, c->dist,
                   c->labels, c->before_d[b], c->before_l[b]);
}

static simil_status op_remove(void *p)
{
    index_ctx *c = p;
    int64_t ids[NREMOVE];
    for (int i = 0; i < NREMOVE; i++) ids[i] = 3 * i;
    int64_t removed = -1;
    simil_status s = simil_index_remove(c->index, NREMOVE, ids, &removed);
    if (s != SIMIL_OK) assert_int_equal(removed, 0);
    return s;
}

static void check_removed(void *p)
{
    index_ctx *c = p;
    assert_int_equal(simil_index_size(c->index), NBASE - NREMOVE);
    float v[DIM];
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_reconstruct(c->index, 3, v));
}

static void check_remove_failed(void *p)
{
    index_ctx *c = p;
    check_unchanged(c);
    float v[DIM];
    SML_ASSERT_OK(simil_index_reconstruct(c->index, 3, v));
}

static simil_status op_load(void *p)
{
    index_ctx *c = p;
    return simil_index_load(&c->created, c->path, "gpu");
}

static void check_created_null(void *p) { assert_null(((index_ctx *)p)->created); }

static void check_loaded(void *p)
{
    index_ctx *c = p;
    assert_int_equal(simil_index_size(c->created), NBASE);
    check_same_as_before(c, c->created, "loaded");
}

/* The fixture file of one type, and the results taken without injection. */
static void make_fixture(index_ctx *c)
{
    simil_index *built;
    SML_ASSERT_OK(simil_index_create(&built, DIM, c->type->desc, c->type->metric, "gpu"));
    SML_ASSERT_OK(simil_index_train(built, NBASE, base));
    SML_ASSERT_OK(simil_index_add(built, NBASE, base, NULL));
    search_into(built, NQ_SMALL, c->built_d, c->built_l);
    SML_ASSERT_OK(simil_index_save(built, c->path));
    simil_index_destroy(built);
    load_fixture(c);
    for (int b = 0; b < 2; b++) search_into(c->index, batch_nq[b], c->before_d[b], c->before_l[b]);
    SML_ASSERT_OK(simil_index_search(c->index, NQ_LARGE, c->d_queries, K, NULL, c->d_dist,
                                     c->d_labels));
    fetch_device_results(c, NQ_LARGE, c->before_d[2], c->before_l[2]);
    simil_index_destroy(c->index);
    c->index = NULL;
}

static void test_index_paths(void **state)
{
    (void)state;
    static const index_type types[] = {
        {"Flat", SIMIL_METRIC_L2},        {"IVF16,Flat", SIMIL_METRIC_IP},
        {"IVF16,PQ8", SIMIL_METRIC_L2},   {"XFBQ", SIMIL_METRIC_COSINE},
        {"XFBQ_fp32", SIMIL_METRIC_COSINE}, {"IVF16,XFBQ", SIMIL_METRIC_COSINE},
    };
    const sml_fi_case cases[] = {
        {"create and train", NULL, op_create_train, check_create_failed, check_trained,
         ix_finish},
        {"add 400 to 1000, ids given", ix_prepare, op_add_ids, check_unchanged, check_added,
         ix_finish},
        {"add 400 to 1000, sequential ids", ix_prepare, op_add_sequential, check_unchanged,
         check_added_sequential, ix_finish},
        {"remove 100 of 1000", ix_prepare, op_remove, check_remove_failed, check_removed,
         ix_finish},
        {"load onto the GPU", NULL, op_load, check_created_null, check_loaded, ix_finish},
    };
    index_ctx *c = sml_test_malloc(sizeof *c);
    memset(c, 0, sizeof *c);
    const size_t qbytes = sizeof(float) * NQ_LARGE * DIM;
    assert_int_equal(cudaMalloc((void **)&c->d_queries, qbytes), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&c->d_dist, sizeof(float) * NQ_LARGE * K), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&c->d_labels, sizeof(int64_t) * NQ_LARGE * K),
                     cudaSuccess);
    upload(c->d_queries, queries, qbytes);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        char file[32];
        snprintf(file, sizeof file, "fixture-%zu.sidx", t);
        c->type = &types[t];
        c->path = sml_test_path(file);
        printf("%s, %s, dim %d, %d vectors, GPU 0:\n", types[t].desc,
               simil_metric_name(types[t].metric), DIM, NBASE);
        make_fixture(c);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) fi_checked(&cases[i], c);
        static const struct {
            int64_t nq;
            int on_device;
            const char *name;
        } searches[] = {
            {NQ_SMALL, 0, "search nq=5, host memory"},
            {NQ_LARGE, 0, "search nq=1100, host memory"},
            {NQ_LARGE, 1, "search nq=1100, GPU memory"},
        };
        /* flat XFBQ: also on tensor cores (too few rows here to be chosen) */
        const int tensor_too = strncmp(types[t].desc, "XFBQ", 4) == 0;
        for (int tensor = 0; tensor <= tensor_too; tensor++) {
            sml_cuda_xfbq_tensor(tensor ? 1 : -1);
            for (size_t i = 0; i < sizeof searches / sizeof searches[0]; i++) {
                char name[64];
                snprintf(name, sizeof name, "%s%s", searches[i].name,
                         tensor ? ", tensor cores" : "");
                const sml_fi_case s = {name,            ix_prepare,     op_search,
                                       check_unchanged, check_searched, ix_finish};
                c->nq = searches[i].nq;
                c->on_device = searches[i].on_device;
                fi_checked(&s, c);
            }
        }
        sml_cuda_xfbq_tensor(-1);
    }
    cudaFree(c->d_queries);
    cudaFree(c->d_dist);
    cudaFree(c->d_labels);
    free(c);
}

/* ---- simil_select_k on GPU memory ---- */

typedef struct select_ctx {
    int64_t rows, cols, k;
    int largest;
    const float *d_values;
    float *d_out_v;
    int64_t *d_out_i;
    float *ref_v;
    int64_t *ref_i;
} select_ctx;

static simil_status op_select(void *p)
{
    select_ctx *c = p;
    return simil_select_k(c->rows, c->cols, c->d_values, c->k, c->largest, c->d_out_v, c->d_out_i);
}

static void check_selected(void *p)
{
    select_ctx *c = p;
    const size_t n = (size_t)(c->rows * c->k);
    float *v = sml_test_malloc(n * sizeof *v);
    int64_t *i = sml_test_malloc(n * sizeof *i);
    assert_int_equal(cudaMemcpy(v, c->d_out_v, n * sizeof *v, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(i, c->d_out_i, n * sizeof *i, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(i, c->ref_i, n * sizeof *i);
    assert_memory_equal(v, c->ref_v, n * sizeof *v);
    free(v);
    free(i);
}

static void test_select_k(void **state)
{
    (void)state;
    enum { ROWS = 64, COLS = 3000 };
    float *values = sml_test_malloc(sizeof(float) * ROWS * COLS);
    sml_test_fill_uniform(values, ROWS * COLS, 42, -1, 1);
    float *d_values;
    assert_int_equal(cudaMalloc((void **)&d_values, sizeof(float) * ROWS * COLS), cudaSuccess);
    upload(d_values, values, sizeof(float) * ROWS * COLS);
    printf("simil_select_k (%d x %d, GPU memory):\n", ROWS, COLS);
    const int64_t ks[3] = {1, 100, 2500}; /* 2500: radix selection */
    for (int t = 0; t < 3; t++) {
        select_ctx c = {ROWS, COLS, ks[t], t == 1, d_values, NULL, NULL, NULL, NULL};
        const size_t n = (size_t)(ROWS * ks[t]);
        assert_int_equal(cudaMalloc((void **)&c.d_out_v, n * sizeof(float)), cudaSuccess);
        assert_int_equal(cudaMalloc((void **)&c.d_out_i, n * sizeof(int64_t)), cudaSuccess);
        c.ref_v = sml_test_malloc(n * sizeof(float));
        c.ref_i = sml_test_malloc(n * sizeof(int64_t));
        SML_ASSERT_OK(op_select(&c));
        assert_int_equal(cudaMemcpy(c.ref_v, c.d_out_v, n * sizeof(float), cudaMemcpyDeviceToHost),
                         cudaSuccess);
        assert_int_equal(
            cudaMemcpy(c.ref_i, c.d_out_i, n * sizeof(int64_t), cudaMemcpyDeviceToHost),
            cudaSuccess);
        char name[64];
        snprintf(name, sizeof name, "select_k k=%lld %s", (long long)ks[t],
                 c.largest ? "largest" : "smallest");
        const sml_fi_case fc = {name, NULL, op_select, NULL, check_selected, NULL};
        fi_checked(&fc, &c);
        cudaFree(c.d_out_v);
        cudaFree(c.d_out_i);
        free(c.ref_v);
        free(c.ref_i);
    }
    cudaFree(d_values);
    free(values);
}

static void test_total(void **state)
{
    (void)state;
    printf("total: %lld GPU allocation points, each failed alone%s\n",
           (long long)driver.total_points, driver.once_only ? "" : " and then sticky");
    assert_true(driver.total_points > 0);
}

int main(void)
{
    sml_test_require_gpu();
    driver.once_only = sml_test_quick();
    sml_test_fill_uniform(base, (NBASE + NMORE) * DIM, 7, -1, 1);
    sml_test_fill_uniform(queries, NQ_LARGE * DIM, 8, -1, 1);
    live_base = sml_cuda_live_allocations();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_paths),
        cmocka_unit_test(test_select_k),
        cmocka_unit_test(test_total),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
