/* test_fault_injection.c: every host allocation on the Flat CPU paths, made
 * to fail in turn (src/core/alloc.h, sml_alloc_fail_at).
 *
 * For each operation and each N = 1, 2, ... the test prepares the operation
 * with injection off, makes the N-th allocation fail (once, then again in
 * sticky mode, where every later one fails too), runs it, and checks:
 *   - it returns SIMIL_ERR_OUT_OF_MEMORY with a message, or succeeds only when
 *     fewer than N allocations were made (then N is past the last one: stop);
 *   - what it worked on is as it was: the index searches with its old results
 *     (compared bit for bit with results taken before), a file it was writing
 *     over is unchanged and no temporary file is left, an output matrix or
 *     index pointer is zeroed;
 *   - nothing leaks: every fixture is freed, and the ASan/LSan build checks
 *     at exit.
 * Allocations outside sml_alloc (libc's FILE buffers, zlib, HDF5, OpenBLAS,
 * libgomp) are not covered.  The number of points per operation is printed:
 * docs/reliability.md quotes them.  The driver (sml_fi_run, tests/util) is
 * shared with tests/cuda/test_cuda_fault_injection.c, which does the same for
 * GPU allocations. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/alloc.h"
#include "util/test_util.h"

#if defined(SIMIL_HAVE_HDF5)
#include <hdf5.h>
#endif

enum { DIM = 24, NBASE = 500, NMORE = 300, NQ_DIRECT = 5, NQ_GEMM = 40, K = 10 };

static float base[(NBASE + NMORE) * DIM];
static float queries[NQ_GEMM * DIM];

/* The driver is sml_fi_run (tests/util), on host allocations. */
static sml_fi_driver driver = {.fail_at = sml_alloc_fail_at};

static void fi_both(const sml_fi_case *c, void *ctx) { sml_fi_both(&driver, c, ctx); }

/* Files in the test folder whose name contains ".tmp-": left-over writers. */
static int temp_files_left(void)
{
    DIR *d = opendir(sml_test_tmpdir());
    assert_non_null(d);
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) count += strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return count;
}

/* ---- index fixtures ---- */

typedef struct index_ctx {
    simil_metric metric;
    simil_index *index;   /* holds base[0, NBASE) with ids 0.. */
    simil_index *created; /* what create / load produced */
    int64_t nq;
    float d[NQ_GEMM * K], ref_d[NQ_GEMM * K];
    int64_t l[NQ_GEMM * K], ref_l[NQ_GEMM * K];
    /* both batches (NQ_DIRECT, NQ_GEMM queries) on base[0, NBASE), taken once */
    float before_d[2][NQ_GEMM * K];
    int64_t before_l[2][NQ_GEMM * K];
    const char *path;
} index_ctx;

static void make_index(index_ctx *c)
{
    SML_ASSERT_OK(simil_index_create(&c->index, DIM, "Flat", c->metric, "cpu"));
    SML_ASSERT_OK(simil_index_add(c->index, NBASE, base, NULL));
}

/* The index answers both query batches exactly as it did before. */
static void check_unchanged(index_ctx *c)
{
    assert_int_equal(simil_index_size(c->index), NBASE);
    const int64_t nqs[2] = {NQ_DIRECT, NQ_GEMM};
    for (int b = 0; b < 2; b++) {
        float d[NQ_GEMM * K];
        int64_t l[NQ_GEMM * K];
        SML_ASSERT_OK(simil_index_search(c->index, nqs[b], queries, K, NULL, d, l));
        assert_memory_equal(l, c->before_l[b], sizeof(int64_t) * (size_t)(nqs[b] * K));
        assert_memory_equal(d, c->before_d[b], sizeof(float) * (size_t)(nqs[b] * K));
    }
}

static void ix_prepare(void *p) { make_index(p); }

static void ix_finish(void *p)
{
    index_ctx *c = p;
    simil_index_destroy(c->index);
    simil_index_destroy(c->created);
    c->index = c->created = NULL;
}

static void ix_check_unchanged(void *p) { check_unchanged(p); }

static simil_status op_create(void *p)
{
    index_ctx *c = p;
    return simil_index_create(&c->created, DIM, "Flat", c->metric, "cpu");
}

static void check_created_null(void *p) { assert_null(((index_ctx *)p)->created); }

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
}

static simil_status op_search(void *p)
{
    index_ctx *c = p;
    return simil_index_search(c->index, c->nq, queries, K, NULL, c->d, c->l);
}

static void search_prepare(void *p)
{
    index_ctx *c = p;
    make_index(c);
    SML_ASSERT_OK(simil_index_search(c->index, c->nq, queries, K, NULL, c->ref_d, c->ref_l));
}

static void check_same_results(void *p)
{
    index_ctx *c = p;
    assert_memory_equal(c->l, c->ref_l, sizeof(int64_t) * (size_t)(c->nq * K));
    assert_memory_equal(c->d, c->ref_d, sizeof(float) * (size_t)(c->nq * K));
}

static simil_status op_remove(void *p)
{
    index_ctx *c = p;
    int64_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = 3 * i;
    int64_t removed = -1;
    simil_status s = simil_index_remove(c->index, 100, ids, &removed);
    if (s != SIMIL_OK) assert_int_equal(removed, 0);
    return s;
}

static void check_removed(void *p)
{
    index_ctx *c = p;
    assert_int_equal(simil_index_size(c->index), NBASE - 100);
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

/* Save over an older file holding the first 200 vectors. */
static void save_prepare(void *p)
{
    index_ctx *c = p;
    simil_index *old;
    SML_ASSERT_OK(simil_index_create(&old, DIM, "Flat", c->metric, "cpu"));
    SML_ASSERT_OK(simil_index_add(old, 200, base, NULL));
    SML_ASSERT_OK(simil_index_save(old, c->path));
    simil_index_destroy(old);
    make_index(c);
}

static simil_status op_save(void *p)
{
    index_ctx *c = p;
    return simil_index_save(c->index, c->path);
}

static void check_file_holds(index_ctx *c, int64_t n)
{
    simil_index *loaded;
    SML_ASSERT_OK(simil_index_load(&loaded, c->path, "cpu"));
    assert_int_equal(simil_index_size(loaded), n);
    simil_index_destroy(loaded);
    assert_int_equal(temp_files_left(), 0);
}

static void check_old_file(void *p) { check_file_holds(p, 200); }
static void check_new_file(void *p) { check_file_holds(p, NBASE); }

static simil_status op_load(void *p)
{
    index_ctx *c = p;
    return simil_index_load(&c->created, c->path, "cpu");
}

static void load_prepare(void *p)
{
    index_ctx *c = p;
    make_index(c);
    SML_ASSERT_OK(simil_index_save(c->index, c->path));
}

static void check_loaded(void *p)
{
    index_ctx *c = p;
    assert_int_equal(simil_index_size(c->created), NBASE);
    float d[NQ_GEMM * K], ref_d[NQ_GEMM * K];
    int64_t l[NQ_GEMM * K], ref_l[NQ_GEMM * K];
    SML_ASSERT_OK(simil_index_search(c->created, NQ_GEMM, queries, K, NULL, d, l));
    SML_ASSERT_OK(simil_index_search(c->index, NQ_GEMM, queries, K, NULL, ref_d, ref_l));
    assert_memory_equal(l, ref_l, sizeof l);
    assert_memory_equal(d, ref_d, sizeof d);
}

static void test_index_paths(void **state)
{
    (void)state;
    const simil_metric metrics[3] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};
    const sml_fi_case cases[] = {
        {"create", NULL, op_create, check_created_null, NULL, ix_finish},
        {"add with ids (grows the arrays)", ix_prepare, op_add_ids, ix_check_unchanged,
         check_added, ix_finish},
        {"add with sequential ids", ix_prepare, op_add_sequential, ix_check_unchanged,
         check_added, ix_finish},
        {"remove 100 of 500", ix_prepare, op_remove, check_remove_failed, check_removed,
         ix_finish},
        {"save over an older file", save_prepare, op_save, check_old_file, check_new_file,
         ix_finish},
        {"load", load_prepare, op_load, check_created_null, check_loaded, ix_finish},
    };
    for (int m = 0; m < 3; m++) {
        printf("metric %s, dim %d, %d vectors:\n", simil_metric_name(metrics[m]), DIM, NBASE);
        index_ctx c = {.metric = metrics[m], .path = sml_test_path("fi.sidx")};
        make_index(&c);
        SML_ASSERT_OK(simil_index_search(c.index, NQ_DIRECT, queries, K, NULL, c.before_d[0],
                                         c.before_l[0]));
        SML_ASSERT_OK(simil_index_search(c.index, NQ_GEMM, queries, K, NULL, c.before_d[1],
                                         c.before_l[1]));
        simil_index_destroy(c.index);
        c.index = NULL;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) fi_both(&cases[i], &c);
        const int64_t nqs[2] = {NQ_DIRECT, NQ_GEMM};
        for (int b = 0; b < 2; b++) {
            char name[64];
            snprintf(name, sizeof name, "search nq=%lld k=%d (%s path)", (long long)nqs[b], K,
                     b == 0 ? "direct" : "GEMM");
            sml_fi_case s = {name,    search_prepare,     op_search, ix_check_unchanged,
                             check_same_results, ix_finish};
            c.nq = nqs[b];
            fi_both(&s, &c);
        }
    }
}

/* ---- dataset files ---- */

typedef struct data_ctx {
    const char *path;    /* the file read, or written over */
    simil_matrix m;      /* what the write writes, or the read's output */
    simil_matrix expect; /* what the read must give */
    int as_float;
    unsigned char *old;  /* the file's bytes before a write */
    size_t old_size;
} data_ctx;

static unsigned char *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = sml_test_malloc((size_t)n + 1);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return p;
}

static simil_status op_read(void *p)
{
    data_ctx *c = p;
    return c->as_float ? simil_matrix_read_float(c->path, 0, -1, &c->m)
                       : simil_matrix_read(c->path, 0, -1, &c->m);
}

static void check_read_zeroed(void *p)
{
    data_ctx *c = p;
    assert_null(c->m.data);
    assert_int_equal(c->m.rows, 0);
    assert_int_equal(c->m.cols, 0);
}

static void check_read_ok(void *p)
{
    data_ctx *c = p;
    assert_int_equal(c->m.rows, c->expect.rows);
    assert_int_equal(c->m.cols, c->expect.cols);
    assert_int_equal(c->m.dtype, c->expect.dtype);
    size_t bytes = (size_t)c->m.rows * (size_t)c->m.cols * simil_dtype_size(c->m.dtype);
    assert_memory_equal(c->m.data, c->expect.data, bytes);
}

static void read_finish(void *p) { simil_matrix_free(&((data_ctx *)p)->m); }

static simil_status op_write(void *p)
{
    data_ctx *c = p;
    return simil_matrix_write(c->path, &c->m);
}

static void check_write_failed(void *p)
{
    data_ctx *c = p;
    size_t size;
    unsigned char *now = slurp(c->path, &size);
    assert_int_equal(size, c->old_size);
    assert_memory_equal(now, c->old, size);
    free(now);
    assert_int_equal(temp_files_left(), 0);
}

static void check_write_ok(void *p)
{
    data_ctx *c = p;
    simil_matrix back;
    SML_ASSERT_OK(simil_matrix_read(c->path, 0, -1, &back));
    assert_int_equal(back.rows, c->m.rows);
    assert_int_equal(back.cols, c->m.cols);
    simil_matrix_free(&back);
    assert_int_equal(temp_files_left(), 0);
}

/* The old file to write over: one row of the same format. */
static void write_prepare(void *p)
{
    data_ctx *c = p;
    simil_matrix one = c->m;
    one.rows = 1;
    if (one.dtype == SIMIL_DTYPE_INT64) one.dtype = SIMIL_DTYPE_INT32; /* see fill_matrix */
    SML_ASSERT_OK(simil_matrix_write(c->path, &one));
    free(c->old);
    c->old = slurp(c->path, &c->old_size);
}

/* rows x cols of dtype with small values (int64 ones fit in int32). */
static void fill_matrix(simil_matrix *m, int64_t rows, int64_t cols, simil_dtype dtype)
{
    m->rows = rows;
    m->cols = cols;
    m->dtype = dtype;
    size_t n = (size_t)(rows * cols);
    m->data = sml_test_malloc(n * simil_dtype_size(dtype));
    for (size_t i = 0; i < n; i++) {
        switch (dtype) {
        case SIMIL_DTYPE_FLOAT32: ((float *)m->data)[i] = (float)i / 7.0f; break;
        case SIMIL_DTYPE_UINT8: ((uint8_t *)m->data)[i] = (uint8_t)(i * 13); break;
        case SIMIL_DTYPE_INT32: ((int32_t *)m->data)[i] = (int32_t)i - 50; break;
        case SIMIL_DTYPE_INT64: ((int64_t *)m->data)[i] = (int64_t)i * 3; break;
        }
    }
}

static void write_gz(const char *path, const void *data, size_t size)
{
    gzFile gz = gzopen(path, "wb");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, data, (unsigned)size), (int)size);
    assert_int_equal(gzclose(gz), Z_OK);
}

static void write_raw(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, size, f), size);
    fclose(f);
}

static void test_dataset_writes(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        simil_dtype dtype;
    } writes[] = {{"w.fvecs", SIMIL_DTYPE_FLOAT32}, {"w.bvecs", SIMIL_DTYPE_UINT8},
                  {"w.ivecs", SIMIL_DTYPE_INT32},   {"w64.ivecs", SIMIL_DTYPE_INT64},
                  {"w.npy", SIMIL_DTYPE_FLOAT32},   {"wu8.npy", SIMIL_DTYPE_UINT8}};
    printf("dataset writes over an existing file (300 x 17):\n");
    for (size_t i = 0; i < sizeof writes / sizeof writes[0]; i++) {
        data_ctx c = {.path = sml_test_path(writes[i].name)};
        fill_matrix(&c.m, 300, 17, writes[i].dtype);
        char name[64];
        snprintf(name, sizeof name, "write %s (%s)", writes[i].name,
                 writes[i].dtype == SIMIL_DTYPE_INT64 ? "int64 narrowed" : "same type");
        sml_fi_case fc = {name, write_prepare, op_write, check_write_failed, check_write_ok, NULL};
        fi_both(&fc, &c);
        free(c.m.data);
        free(c.old);
    }
}

static void test_dataset_reads(void **state)
{
    (void)state;
    enum { R = 300, C = 17 };
    printf("dataset reads (%d x %d):\n", R, C);
    /* every format written first, by simil where it writes it */
    simil_matrix f32, u8, i32;
    fill_matrix(&f32, R, C, SIMIL_DTYPE_FLOAT32);
    fill_matrix(&u8, R, C, SIMIL_DTYPE_UINT8);
    fill_matrix(&i32, R, C, SIMIL_DTYPE_INT32);
    SML_ASSERT_OK(simil_matrix_write(sml_test_path("r.fvecs"), &f32));
    SML_ASSERT_OK(simil_matrix_write(sml_test_path("r.bvecs"), &u8));
    SML_ASSERT_OK(simil_matrix_write(sml_test_path("r.ivecs"), &i32));
    SML_ASSERT_OK(simil_matrix_write(sml_test_path("r.npy"), &f32));
    /* float64 npy, read as float32 a chunk at a time */
    {
        char head[128];
        int n = snprintf(head, sizeof head,
                         "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d), }", R, C);
        memset(head + n, ' ', sizeof head - 10 - (size_t)n);
        head[sizeof head - 10 - 1] = '\n';
        unsigned char *file = sml_test_malloc(128 + (size_t)(R * C) * 8);
        memcpy(file, "\x93NUMPY\x01\x00", 8);
        file[8] = 128 - 10;
        file[9] = 0;
        memcpy(file + 10, head, 118);
        for (int i = 0; i < R * C; i++) {
            double v = ((float *)f32.data)[i];
            memcpy(file + 128 + 8 * i, &v, 8);
        }
        write_raw(sml_test_path("r64.npy"), file, 128 + (size_t)(R * C) * 8);
        free(file);
    }
    /* idx: 00 00 08 03, big-endian R, 1, C, bytes */
    {
        size_t size = 16 + (size_t)(R * C);
        unsigned char *file = sml_test_malloc(size);
        const unsigned char head[16] = {0, 0, 8, 3, 0, 0, R >> 8, R & 0xff, 0, 0, 0, 1, 0, 0, 0, C};
        memcpy(file, head, 16);
        memcpy(file + 16, u8.data, (size_t)(R * C));
        write_raw(sml_test_path("r-idx3-ubyte"), file, size);
        write_gz(sml_test_path("r-idx3-ubyte.gz"), file, size);
        free(file);
    }
#if defined(SIMIL_HAVE_HDF5)
    {
        hsize_t dims[2] = {R, C};
        hid_t file = H5Fcreate(sml_test_path("r.hdf5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        hid_t space = H5Screate_simple(2, dims, NULL);
        hid_t set = H5Dcreate2(file, "train", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT);
        assert_true(file >= 0 && set >= 0);
        assert_true(H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, f32.data) >= 0);
        H5Dclose(set);
        H5Sclose(space);
        H5Fclose(file);
    }
#endif
    simil_matrix u8f;
    fill_matrix(&u8f, R, C, SIMIL_DTYPE_FLOAT32);
    for (int i = 0; i < R * C; i++) ((float *)u8f.data)[i] = ((uint8_t *)u8.data)[i];
    const struct {
        const char *name;
        const simil_matrix *expect;
        int as_float;
    } reads[] = {
        {"r.fvecs", &f32, 0},       {"r.bvecs", &u8, 0},         {"r.ivecs", &i32, 0},
        {"r.npy", &f32, 0},         {"r64.npy", &f32, 0},        {"r-idx3-ubyte", &u8, 0},
        {"r-idx3-ubyte.gz", &u8, 0}, {"r.bvecs", &u8f, 1},       {"r-idx3-ubyte.gz", &u8f, 1},
#if defined(SIMIL_HAVE_HDF5)
        {"r.hdf5:train", &f32, 0},
#endif
    };
    for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++) {
        data_ctx c = {.path = sml_test_path(reads[i].name), .expect = *reads[i].expect,
                      .as_float = reads[i].as_float};
        char name[64];
        snprintf(name, sizeof name, "%s %s", reads[i].as_float ? "read_float" : "read",
                 reads[i].name);
        sml_fi_case fc = {name, NULL, op_read, check_read_zeroed, check_read_ok, read_finish};
        fi_both(&fc, &c);
    }
    free(u8f.data);
    free(f32.data);
    free(u8.data);
    free(i32.data);
}

/* ---- simil_select_k on host memory ---- */

typedef struct select_ctx {
    int64_t rows, cols, k;
    int largest;
    const float *values;
    float *out_v, *ref_v;
    int64_t *out_i, *ref_i;
} select_ctx;

static simil_status op_select(void *p)
{
    select_ctx *c = p;
    return simil_select_k(c->rows, c->cols, c->values, c->k, c->largest, c->out_v, c->out_i);
}

static void check_select_ok(void *p)
{
    select_ctx *c = p;
    assert_memory_equal(c->out_i, c->ref_i, sizeof(int64_t) * (size_t)(c->rows * c->k));
    assert_memory_equal(c->out_v, c->ref_v, sizeof(float) * (size_t)(c->rows * c->k));
}

static void test_select_k(void **state)
{
    (void)state;
    enum { ROWS = 64, COLS = 3000 };
    float *values = sml_test_malloc(sizeof(float) * ROWS * COLS);
    sml_test_fill_uniform(values, ROWS * COLS, 42, -1, 1);
    values[5] = NAN;
    printf("simil_select_k (%d x %d, host):\n", ROWS, COLS);
    const int64_t ks[3] = {1, 100, COLS + 7};
    for (int i = 0; i < 3; i++) {
        select_ctx c = {ROWS, COLS, ks[i], i == 1, values, NULL, NULL, NULL, NULL};
        size_t slots = (size_t)(ROWS * ks[i]);
        c.out_v = sml_test_malloc(slots * sizeof(float));
        c.ref_v = sml_test_malloc(slots * sizeof(float));
        c.out_i = sml_test_malloc(slots * sizeof(int64_t));
        c.ref_i = sml_test_malloc(slots * sizeof(int64_t));
        SML_ASSERT_OK(simil_select_k(ROWS, COLS, values, ks[i], c.largest, c.ref_v, c.ref_i));
        char name[64];
        snprintf(name, sizeof name, "select_k k=%lld %s", (long long)ks[i],
                 c.largest ? "largest" : "smallest");
        sml_fi_case fc = {name, NULL, op_select, NULL, check_select_ok, NULL};
        fi_both(&fc, &c);
        free(c.out_v);
        free(c.ref_v);
        free(c.out_i);
        free(c.ref_i);
    }
    free(values);
}

/* ---- sources: the streamed add and the streamed exact search ---- */

typedef struct stream_ctx {
    const char *desc;
    simil_index *index;  /* trained, holds base[0, NBASE) */
    simil_source *more;  /* base[NBASE, NBASE + NMORE) */
    float before_d[NQ_GEMM * K], d[NQ_GEMM * K];
    int64_t before_l[NQ_GEMM * K], l[NQ_GEMM * K];
} stream_ctx;

static void stream_prepare(void *p)
{
    stream_ctx *c = p;
    SML_ASSERT_OK(simil_index_create(&c->index, DIM, c->desc, SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_train(c->index, NBASE, base));
    SML_ASSERT_OK(simil_index_add(c->index, NBASE, base, NULL));
    SML_ASSERT_OK(simil_source_from_memory(&c->more, NMORE, DIM, base + NBASE * DIM));
}

static void stream_finish(void *p)
{
    stream_ctx *c = p;
    simil_index_destroy(c->index);
    simil_source_close(c->more);
    c->index = NULL;
    c->more = NULL;
}

static simil_status op_add_source(void *p)
{
    stream_ctx *c = p;
    simil_stream_params params;
    simil_stream_params_init(&params);
    params.chunk_rows = 70;  /* five chunks: fails after some are in */
    return simil_index_add_source(c->index, c->more, &params);
}

static void check_stream_unchanged(void *p)
{
    stream_ctx *c = p;
    assert_int_equal(simil_index_size(c->index), NBASE);
    simil_search_params *sp;
    SML_ASSERT_OK(simil_search_params_create(&sp));
    SML_ASSERT_OK(simil_search_params_set_int(sp, "nprobe", 8));
    SML_ASSERT_OK(simil_index_search(c->index, NQ_GEMM, queries, K, sp, c->d, c->l));
    simil_search_params_destroy(sp);
    assert_memory_equal(c->l, c->before_l, sizeof c->l);
    assert_memory_equal(c->d, c->before_d, sizeof c->d);
}

static void check_stream_added(void *p)
{
    stream_ctx *c = p;
    assert_int_equal(simil_index_size(c->index), NBASE + NMORE);
    float v[DIM];
    SML_ASSERT_OK(simil_index_reconstruct(c->index, NBASE + NMORE - 1, v));
}

static simil_status op_source_search(void *p)
{
    stream_ctx *c = p;
    simil_stream_params params;
    simil_stream_params_init(&params);
    params.chunk_rows = 70;
    params.device = "cpu";
    return simil_source_search(c->more, SIMIL_METRIC_L2, NQ_GEMM, queries, K, &params, c->d,
                               c->l, NULL);
}

static void check_source_search(void *p)
{
    stream_ctx *c = p;
    sml_test_check_knn("source search", base + NBASE * DIM, NMORE, queries, NQ_GEMM, DIM, K,
                       SIMIL_METRIC_L2, c->d, c->l, 1e-4);
}

static void test_stream_paths(void **state)
{
    (void)state;
    /* IVF-PQ places its rows last and truncates its lists on failure, which
     * cannot fail; other types take back rows with simil_index_remove, which
     * allocates: that holds when one allocation fails, not when all do */
    const char *descs[] = {"IVF8,PQ4x4", "Flat", "IVF8,Flat"};
    sml_fi_driver once = {.fail_at = sml_alloc_fail_at, .once_only = 1};
    for (int t = 0; t < 3; t++) {
        stream_ctx c = {.desc = descs[t]};
        stream_prepare(&c);
        simil_search_params *sp;
        SML_ASSERT_OK(simil_search_params_create(&sp));
        SML_ASSERT_OK(simil_search_params_set_int(sp, "nprobe", 8));
        SML_ASSERT_OK(simil_index_search(c.index, NQ_GEMM, queries, K, sp, c.before_d,
                                         c.before_l));
        simil_search_params_destroy(sp);
        stream_finish(&c);
        char name[96];
        snprintf(name, sizeof name, "add_source %s, 5 chunks", descs[t]);
        const sml_fi_case add = {name, stream_prepare, op_add_source, check_stream_unchanged,
                                 check_stream_added, stream_finish};
        if (t == 0)
            fi_both(&add, &c);
        else
            sml_fi_both(&once, &add, &c);
    }
    stream_ctx c = {.desc = "Flat"};
    const sml_fi_case search = {"source_search, 5 chunks", stream_prepare, op_source_search,
                                NULL, check_source_search, stream_finish};
    fi_both(&search, &c);
}

static void test_total(void **state)
{
    (void)state;
    printf("total: %lld allocation points, each failed alone and then sticky\n",
           (long long)driver.total_points);
    assert_true(driver.total_points > 0);
}

int main(void)
{
    sml_test_fill_uniform(base, (NBASE + NMORE) * DIM, 7, -1, 1);
    sml_test_fill_uniform(queries, NQ_GEMM * DIM, 8, -1, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_paths),   cmocka_unit_test(test_dataset_writes),
        cmocka_unit_test(test_dataset_reads), cmocka_unit_test(test_select_k),
        cmocka_unit_test(test_stream_paths),  cmocka_unit_test(test_total),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
