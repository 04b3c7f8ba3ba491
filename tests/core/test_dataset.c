/* test_dataset.c: reading and writing matrix files (src/core/dataset*.c).
 *
 * Round trips for every writable format and dtype, with row ranges and
 * simil_matrix_info; conversion to float; npy headers the way numpy writes
 * them (and versions 2.0 / 3.0, float64, Python 2 shapes); idx files written
 * here, plain and gzipped, and the real Fashion-MNIST files when installed;
 * atomic overwrites; argument errors.  Damaged files are in
 * test_dataset_corrupt.c, HDF5 in test_dataset_hdf5.c. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "util/test_util.h"

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static unsigned char *read_bytes(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *data = sml_test_malloc((size_t)n);
    assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return data;
}

/* A rows x cols matrix of dtype with values that differ per element and fit
 * every type (and, for int64, need 64 bits when wide is set). */
static simil_matrix make_matrix(int64_t rows, int64_t cols, simil_dtype dtype, uint64_t seed,
                                int wide)
{
    simil_matrix m = {rows, cols, dtype, NULL};
    size_t n = (size_t)(rows * cols);
    m.data = sml_test_malloc(n * simil_dtype_size(dtype));
    float *u = sml_test_malloc(n * sizeof *u);
    sml_test_fill_uniform(u, (int64_t)n, seed, -1000.0f, 1000.0f);
    for (size_t i = 0; i < n; i++) {
        switch (dtype) {
        case SIMIL_DTYPE_FLOAT32: ((float *)m.data)[i] = u[i]; break;
        case SIMIL_DTYPE_UINT8:
            ((uint8_t *)m.data)[i] = (uint8_t)((int)(u[i] + 1000.0f) % 256);
            break;
        case SIMIL_DTYPE_INT32: ((int32_t *)m.data)[i] = (int32_t)(u[i] * 1000.0f); break;
        case SIMIL_DTYPE_INT64:
            ((int64_t *)m.data)[i] = (int64_t)(u[i] * 1000.0f) * (wide ? (int64_t)1 << 40 : 1);
            break;
        }
    }
    free(u);
    return m;
}

/* out must equal rows [first, first + count) of ref, in ref's dtype. */
static void assert_rows_equal(const simil_matrix *out, const simil_matrix *ref, int64_t first,
                              int64_t count, const char *context)
{
    if (out->rows != count || out->cols != ref->cols || out->dtype != ref->dtype)
        fail_msg("%s: got %lld x %lld dtype %d, expected %lld x %lld dtype %d", context,
                 (long long)out->rows, (long long)out->cols, (int)out->dtype, (long long)count,
                 (long long)ref->cols, (int)ref->dtype);
    size_t row = (size_t)ref->cols * simil_dtype_size(ref->dtype);
    assert_non_null(out->data);
    const char *want = (const char *)ref->data + (size_t)first * row;
    if (count > 0 && memcmp(out->data, want, (size_t)count * row) != 0)
        fail_msg("%s: the data of rows [%lld, +%lld) differ", context, (long long)first,
                 (long long)count);
}

/* Write m to path, then check info, full and ranged reads, and the range errors. */
static void check_round_trip(const char *path, const simil_matrix *m, const simil_matrix *expect)
{
    SML_ASSERT_OK(simil_matrix_write(path, m));
    int64_t rows, cols;
    simil_dtype dtype;
    SML_ASSERT_OK(simil_matrix_info(path, &rows, &cols, &dtype));
    assert_int_equal(rows, expect->rows);
    assert_int_equal(cols, expect->cols);
    assert_int_equal(dtype, expect->dtype);
    int64_t n = expect->rows;
    const int64_t ranges[][2] = {{0, -1}, {0, n}, {0, 1}, {1, 2}, {n / 3, n / 2},
                                 {n - 1, -1}, {n - 1, 1}, {n, -1}, {n, 0}, {0, 0}};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        int64_t first = ranges[i][0], count = ranges[i][1];
        if (first < 0 || first > n || (count > 0 && first + count > n)) continue;
        simil_matrix out;
        char context[600];
        snprintf(context, sizeof context, "%s rows [%lld, +%lld)", path, (long long)first,
                 (long long)count);
        SML_ASSERT_OK(simil_matrix_read(path, first, count, &out));
        assert_rows_equal(&out, expect, first, count < 0 ? n - first : count, context);
        simil_matrix_free(&out);
        assert_null(out.data);
    }
    simil_matrix out;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_read(path, n + 1, -1, &out));
    assert_null(out.data);
    assert_non_null(strstr(simil_last_error(), path));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_read(path, 0, n + 1, &out));
    char count_text[32];
    snprintf(count_text, sizeof count_text, "has %lld rows", (long long)n);
    assert_non_null(strstr(simil_last_error(), count_text));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_read(path, -1, 1, &out));
}

static void test_texmex_round_trips(void **state)
{
    (void)state;
    simil_matrix f = make_matrix(37, 13, SIMIL_DTYPE_FLOAT32, 1, 0);
    simil_matrix b = make_matrix(21, 128, SIMIL_DTYPE_UINT8, 2, 0);
    simil_matrix i = make_matrix(9, 100, SIMIL_DTYPE_INT32, 3, 0);
    simil_matrix one = make_matrix(1, 1, SIMIL_DTYPE_FLOAT32, 4, 0);
    check_round_trip(sml_test_path("a.fvecs"), &f, &f);
    check_round_trip(sml_test_path("a.bvecs"), &b, &b);
    check_round_trip(sml_test_path("a.ivecs"), &i, &i);
    check_round_trip(sml_test_path("one.fvecs"), &one, &one);
    /* row layout: int32 dim, then the row */
    size_t len;
    unsigned char *raw = read_bytes(sml_test_path("a.fvecs"), &len);
    assert_int_equal(len, 37 * (4 + 13 * 4));
    int32_t dim;
    memcpy(&dim, raw + (4 + 13 * 4) * 5, 4);
    assert_int_equal(dim, 13);
    assert_memory_equal(raw + (4 + 13 * 4) * 5 + 4, (float *)f.data + 5 * 13, 13 * 4);
    free(raw);
    free(f.data);
    free(b.data);
    free(i.data);
    free(one.data);
}

static void test_ivecs_from_int64(void **state)
{
    (void)state;
    simil_matrix wide = make_matrix(11, 7, SIMIL_DTYPE_INT64, 5, 0);
    simil_matrix narrow = {11, 7, SIMIL_DTYPE_INT32, sml_test_malloc(77 * 4)};
    for (int k = 0; k < 77; k++) ((int32_t *)narrow.data)[k] = (int32_t)((int64_t *)wide.data)[k];
    ((int64_t *)wide.data)[3] = INT32_MIN;
    ((int32_t *)narrow.data)[3] = INT32_MIN;
    ((int64_t *)wide.data)[4] = INT32_MAX;
    ((int32_t *)narrow.data)[4] = INT32_MAX;
    check_round_trip(sml_test_path("wide.ivecs"), &wide, &narrow);
    free(wide.data);
    free(narrow.data);
}

static void test_empty_files(void **state)
{
    (void)state;
    simil_matrix empty = {0, 5, SIMIL_DTYPE_FLOAT32, NULL};
    const char *fv = sml_test_path("empty.fvecs");
    SML_ASSERT_OK(simil_matrix_write(fv, &empty));
    simil_matrix out;
    SML_ASSERT_OK(simil_matrix_read(fv, 0, -1, &out));
    assert_int_equal(out.rows, 0);
    assert_int_equal(out.cols, 0);
    simil_matrix_free(&out);
    const char *np = sml_test_path("empty.npy");
    SML_ASSERT_OK(simil_matrix_write(np, &empty));
    SML_ASSERT_OK(simil_matrix_read_float(np, 0, -1, &out));
    assert_int_equal(out.rows, 0);
    assert_int_equal(out.cols, 5);
    simil_matrix_free(&out);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_read(np, 0, 1, &out));
}

static void test_npy_round_trips(void **state)
{
    (void)state;
    const simil_dtype types[] = {SIMIL_DTYPE_FLOAT32, SIMIL_DTYPE_UINT8, SIMIL_DTYPE_INT32,
                                 SIMIL_DTYPE_INT64};
    for (int t = 0; t < 4; t++) {
        for (int shape = 0; shape < 3; shape++) {
            int64_t rows = shape == 0 ? 23 : shape == 1 ? 1 : 300;
            int64_t cols = shape == 0 ? 17 : shape == 1 ? 9 : 3;
            simil_matrix m = make_matrix(rows, cols, types[t], 10 + (uint64_t)t, 1);
            char name[64];
            snprintf(name, sizeof name, "m%d_%d.npy", t, shape);
            check_round_trip(sml_test_path(name), &m, &m);
            free(m.data);
        }
    }
}

/* The header is exactly what numpy writes: version 1.0, padded to 64 bytes. */
static void test_npy_header_bytes(void **state)
{
    (void)state;
    simil_matrix m = make_matrix(3, 4, SIMIL_DTYPE_INT64, 6, 0);
    const char *path = sml_test_path("hdr.npy");
    SML_ASSERT_OK(simil_matrix_write(path, &m));
    size_t len;
    unsigned char *raw = read_bytes(path, &len);
    const char dict[] = "{'descr': '<i8', 'fortran_order': False, 'shape': (3, 4), }";
    assert_int_equal(len, 128 + 3 * 4 * 8);
    assert_memory_equal(raw, "\x93NUMPY\x01\x00\x76\x00", 10);
    assert_memory_equal(raw + 10, dict, sizeof dict - 1);
    for (size_t k = 10 + sizeof dict - 1; k < 127; k++) assert_int_equal(raw[k], ' ');
    assert_int_equal(raw[127], '\n');
    assert_memory_equal(raw + 128, m.data, 3 * 4 * 8);
    free(raw);
    free(m.data);
}

/* An npy file with a hand-written header (any version) and raw data. */
static void write_npy(const char *path, int major, const char *dict, const void *data,
                      size_t bytes)
{
    size_t dlen = strlen(dict), pre = major == 1 ? 10 : 12;
    unsigned char *buf = sml_test_malloc(pre + dlen + bytes);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    uint32_t hl = (uint32_t)dlen;
    memcpy(buf + 8, &hl, major == 1 ? 2 : 4);
    memcpy(buf + pre, dict, dlen);
    if (bytes) memcpy(buf + pre + dlen, data, bytes);
    write_bytes(path, buf, pre + dlen + bytes);
    free(buf);
}

static void test_npy_variants(void **state)
{
    (void)state;
    double d[6] = {0.5, -1.25, 1e30, 3.0000001, -0.0, 65504.0};
    const char *p = sml_test_path("f8.npy");
    write_npy(p, 2, "{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"<f8\"}\n", d,
              sizeof d);
    int64_t rows, cols;
    simil_dtype dtype;
    SML_ASSERT_OK(simil_matrix_info(p, &rows, &cols, &dtype));
    assert_true(rows == 2 && cols == 3 && dtype == SIMIL_DTYPE_FLOAT32);
    simil_matrix out;
    SML_ASSERT_OK(simil_matrix_read(p, 1, 1, &out));
    assert_true(out.rows == 1 && out.cols == 3 && out.dtype == SIMIL_DTYPE_FLOAT32);
    for (int j = 0; j < 3; j++) assert_true(((float *)out.data)[j] == (float)d[3 + j]);
    simil_matrix_free(&out);
    /* 1-d: one row; version 3.0; Fortran order is fine for a single row */
    int32_t v[5] = {1, -2, 3, -4, 5};
    p = sml_test_path("v3.npy");
    write_npy(p, 3, "{'descr': '<i4', 'fortran_order': True, 'shape': (5,)}      \n", v, sizeof v);
    SML_ASSERT_OK(simil_matrix_read(p, 0, -1, &out));
    assert_true(out.rows == 1 && out.cols == 5 && out.dtype == SIMIL_DTYPE_INT32);
    assert_memory_equal(out.data, v, sizeof v);
    simil_matrix_free(&out);
}

static void test_read_float(void **state)
{
    (void)state;
    const char *names[] = {"c.bvecs", "c.npy", "c_i4.npy", "c_i8.npy", "c.ivecs", "c.fvecs"};
    const simil_dtype types[] = {SIMIL_DTYPE_UINT8, SIMIL_DTYPE_UINT8, SIMIL_DTYPE_INT32,
                                 SIMIL_DTYPE_INT64, SIMIL_DTYPE_INT32, SIMIL_DTYPE_FLOAT32};
    for (int t = 0; t < 6; t++) {
        simil_matrix m = make_matrix(12, 10, types[t], 20 + (uint64_t)t, 0);
        const char *path = sml_test_path(names[t]);
        SML_ASSERT_OK(simil_matrix_write(path, &m));
        simil_matrix out;
        SML_ASSERT_OK(simil_matrix_read_float(path, 2, 5, &out));
        assert_true(out.rows == 5 && out.cols == 10 && out.dtype == SIMIL_DTYPE_FLOAT32);
        for (int k = 0; k < 50; k++) {
            size_t at = 20 + (size_t)k;
            double want = types[t] == SIMIL_DTYPE_UINT8   ? ((uint8_t *)m.data)[at]
                          : types[t] == SIMIL_DTYPE_INT32 ? ((int32_t *)m.data)[at]
                          : types[t] == SIMIL_DTYPE_INT64 ? (double)((int64_t *)m.data)[at]
                                                          : ((float *)m.data)[at];
            if (((float *)out.data)[k] != (float)want)
                fail_msg("%s element %d: %g, expected %g", path, k, ((float *)out.data)[k], want);
        }
        simil_matrix_free(&out);
        free(m.data);
    }
}

/* An idx file of n images of h x w bytes (or labels when h == 0). */
static unsigned char *make_idx(int n, int h, int w, size_t *len, unsigned char **pixels)
{
    int ndim = h ? 3 : 1;
    size_t head = 4 + 4 * (size_t)ndim, data = (size_t)n * (size_t)(h ? h * w : 1);
    unsigned char *buf = sml_test_malloc(head + data);
    buf[0] = buf[1] = 0;
    buf[2] = 0x08;
    buf[3] = (unsigned char)ndim;
    const int dims[3] = {n, h, w};
    for (int i = 0; i < ndim; i++)
        for (int b = 0; b < 4; b++) buf[4 + 4 * i + b] = (unsigned char)(dims[i] >> (24 - 8 * b));
    for (size_t k = 0; k < data; k++) buf[head + k] = (unsigned char)(k * 7 + k / 13);
    *len = head + data;
    *pixels = buf + head;
    return buf;
}

static void write_gz(const char *path, const void *data, size_t len)
{
    gzFile gz = gzopen(path, "wb");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, data, (unsigned)len), (int)len);
    assert_int_equal(gzclose(gz), Z_OK);
}

static void check_idx(const char *path, int n, int cols, const unsigned char *pixels)
{
    int64_t rows, c;
    simil_dtype dtype;
    SML_ASSERT_OK(simil_matrix_info(path, &rows, &c, &dtype));
    assert_true(rows == n && c == cols && dtype == SIMIL_DTYPE_UINT8);
    simil_matrix ref = {n, cols, SIMIL_DTYPE_UINT8, (void *)pixels}, out;
    const int64_t ranges[][2] = {{0, -1}, {3, 4}, {n - 1, -1}, {n, -1}, {0, 0}};
    for (int i = 0; i < 5; i++) {
        SML_ASSERT_OK(simil_matrix_read(path, ranges[i][0], ranges[i][1], &out));
        int64_t count = ranges[i][1] < 0 ? n - ranges[i][0] : ranges[i][1];
        assert_rows_equal(&out, &ref, ranges[i][0], count, path);
        simil_matrix_free(&out);
    }
    SML_ASSERT_OK(simil_matrix_read_float(path, 2, 1, &out));
    for (int j = 0; j < cols; j++)
        assert_true(((float *)out.data)[j] == (float)pixels[2 * cols + j]);
    simil_matrix_free(&out);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_read(path, 1, n, &out));
}

static void test_idx_written_here(void **state)
{
    (void)state;
    size_t len;
    unsigned char *pixels;
    unsigned char *img = make_idx(10, 4, 5, &len, &pixels);
    write_bytes(sml_test_path("img-idx3-ubyte"), img, len);
    write_gz(sml_test_path("img-idx3-ubyte.gz"), img, len);
    check_idx(sml_test_path("img-idx3-ubyte"), 10, 20, pixels);
    check_idx(sml_test_path("img-idx3-ubyte.gz"), 10, 20, pixels);
    free(img);
    unsigned char *lab = make_idx(300000, 0, 0, &len, &pixels);
    write_gz(sml_test_path("lab-idx1-ubyte.gz"), lab, len);
    write_bytes(sml_test_path("lab.idx1-ubyte"), lab, len);
    check_idx(sml_test_path("lab-idx1-ubyte.gz"), 300000, 1, pixels);
    check_idx(sml_test_path("lab.idx1-ubyte"), 300000, 1, pixels);
    free(lab);
}

static int64_t row_sum(const simil_matrix *m, int64_t r)
{
    int64_t s = 0;
    for (int64_t j = 0; j < m->cols; j++) s += ((uint8_t *)m->data)[r * m->cols + j];
    return s;
}

/* Expected values from Python: gzip.open(f).read(), then sums of the bytes
 * after the 16-byte header (rows of 784), e.g. sum(px[0:784]). */
static void test_fashion_mnist(void **state)
{
    (void)state;
    const char *train = FASHION_DIR "/train-images-idx3-ubyte.gz";
    const char *t10k = FASHION_DIR "/t10k-images-idx3-ubyte.gz";
    FILE *probe = fopen(train, "rb");
    if (probe == NULL) {
        skip();
        return;
    }
    fclose(probe);
    simil_matrix m, part;
    SML_ASSERT_OK(simil_matrix_read(train, 0, -1, &m));
    assert_true(m.rows == 60000 && m.cols == 784 && m.dtype == SIMIL_DTYPE_UINT8);
    assert_int_equal(row_sum(&m, 0), 76247);
    assert_int_equal(row_sum(&m, 1), 84598);
    assert_int_equal(row_sum(&m, 1234), 75588);
    assert_int_equal(row_sum(&m, 59999), 16684);
    int64_t total = 0, max = 0;
    for (size_t k = 0; k < 60000u * 784u; k++) {
        uint8_t v = ((uint8_t *)m.data)[k];
        total += v;
        if (v > max) max = v;
    }
    assert_int_equal(total, 3431114169);
    assert_int_equal(max, 255);
    SML_ASSERT_OK(simil_matrix_read(train, 1234, 2, &part));
    assert_memory_equal(part.data, (uint8_t *)m.data + 1234 * 784, 2 * 784);
    simil_matrix_free(&part);
    simil_matrix_free(&m);
    SML_ASSERT_OK(simil_matrix_read_float(t10k, 0, -1, &m));
    assert_true(m.rows == 10000 && m.cols == 784 && m.dtype == SIMIL_DTYPE_FLOAT32);
    double s0 = 0, s1 = 0;
    for (int j = 0; j < 784; j++) {
        float v = ((float *)m.data)[j];
        assert_true(v >= 0.0f && v <= 255.0f && v == (float)(int)v);
        s0 += v;
        s1 += ((float *)m.data)[784 + j];
    }
    assert_true(s0 == 33456.0 && s1 == 100994.0);
    assert_true(((float *)m.data)[400] == 1.0f);
    simil_matrix_free(&m);
    SML_ASSERT_OK(simil_matrix_read(FASHION_DIR "/train-labels-idx1-ubyte.gz", 0, 5, &m));
    assert_true(m.rows == 5 && m.cols == 1);
    assert_memory_equal(m.data, "\x09\x00\x00\x03\x00", 5);
    simil_matrix_free(&m);
}

/* Every entry of the folder that is not in keep counts as a leftover. */
static int count_leftovers(const char *dir, const char *keep)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && strcmp(e->d_name, keep) != 0) n++;
    closedir(d);
    return n;
}

static void test_atomic_overwrite(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/atomic", sml_test_tmpdir());
    assert_int_equal(mkdir(dir, 0755), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/keep.ivecs", dir);
    simil_matrix old = make_matrix(4, 3, SIMIL_DTYPE_INT32, 30, 0);
    SML_ASSERT_OK(simil_matrix_write(path, &old));
    size_t before_len, after_len;
    unsigned char *before = read_bytes(path, &before_len);
    simil_matrix bad = make_matrix(50, 3, SIMIL_DTYPE_INT64, 31, 0);
    ((int64_t *)bad.data)[49 * 3 + 2] = (int64_t)INT32_MAX + 1;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_write(path, &bad));
    assert_non_null(strstr(simil_last_error(), "2147483648"));
    assert_non_null(strstr(simil_last_error(), "row 49"));
    unsigned char *after = read_bytes(path, &after_len);
    assert_int_equal(before_len, after_len);
    assert_memory_equal(before, after, before_len);
    assert_int_equal(count_leftovers(dir, "keep.ivecs"), 0);
    free(before);
    free(after);
    free(old.data);
    free(bad.data);
}

static void test_arguments(void **state)
{
    (void)state;
    assert_int_equal(simil_dtype_size(SIMIL_DTYPE_FLOAT32), 4);
    assert_int_equal(simil_dtype_size(SIMIL_DTYPE_UINT8), 1);
    assert_int_equal(simil_dtype_size(SIMIL_DTYPE_INT32), 4);
    assert_int_equal(simil_dtype_size(SIMIL_DTYPE_INT64), 8);
    assert_int_equal(simil_dtype_size((simil_dtype)99), 0);
    simil_matrix out, m = make_matrix(2, 3, SIMIL_DTYPE_INT32, 40, 0);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_read("x.txt", 0, -1, &out));
    assert_non_null(strstr(simil_last_error(), ".fvecs"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_info("x.csv", NULL, NULL, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_read(NULL, 0, -1, &out));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_read("a.npy", 0, -1, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_matrix_read(sml_test_path("missing.fvecs"), 0, -1, &out));
    assert_non_null(strstr(simil_last_error(), "missing.fvecs"));
    SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_matrix_read(sml_test_path("missing.npy"), 0, -1, &out));
    SML_ASSERT_STATUS(SIMIL_ERR_IO,
                      simil_matrix_read(sml_test_path("missing-idx3-ubyte.gz"), 0, -1, &out));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_write(sml_test_path("m.fvecs"), &m));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_write(sml_test_path("m.bvecs"), &m));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_write(sml_test_path("m.txt"), &m));
    SML_ASSERT_STATUS(SIMIL_ERR_UNSUPPORTED, simil_matrix_write(sml_test_path("m-idx3-ubyte"), &m));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_write(sml_test_path("m.npy"), NULL));
    simil_matrix neg = {-1, 3, SIMIL_DTYPE_FLOAT32, m.data};
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_write(sml_test_path("n.npy"), &neg));
    simil_matrix nodata = {2, 3, SIMIL_DTYPE_FLOAT32, NULL};
    const char *npy = sml_test_path("n.npy");
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_write(npy, &nodata));
    simil_matrix badtype = {2, 3, (simil_dtype)7, m.data};
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_write(npy, &badtype));
    simil_matrix nocols = {2, 0, SIMIL_DTYPE_INT32, m.data};
    const char *ivecs = sml_test_path("n.ivecs");
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_write(ivecs, &nocols));
    SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_matrix_write(sml_test_path("no/such/dir.npy"), &m));
    simil_matrix_free(NULL);
    simil_matrix_free(&out);
    free(m.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_texmex_round_trips),
        cmocka_unit_test(test_ivecs_from_int64),
        cmocka_unit_test(test_empty_files),
        cmocka_unit_test(test_npy_round_trips),
        cmocka_unit_test(test_npy_header_bytes),
        cmocka_unit_test(test_npy_variants),
        cmocka_unit_test(test_read_float),
        cmocka_unit_test(test_idx_written_here),
        cmocka_unit_test(test_fashion_mnist),
        cmocka_unit_test(test_atomic_overwrite),
        cmocka_unit_test(test_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
