/* test_dataset_corrupt.c: damaged matrix files must give SIMIL_ERR_CORRUPT
 * (never a crash, never an allocation sized by a lying header).
 *
 * Every cut length of small texmex, npy and idx files (plain and gzipped);
 * rows of different dimensions; bad npy headers; absurd claimed shapes; single
 * byte changes anywhere in small files; and allocation failures at every
 * point of a read.  Meant to run under AddressSanitizer as well. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/alloc.h"
#include "util/test_util.h"

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (len) assert_int_equal(fwrite(data, 1, len, f), len);
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

static void write_gz(const char *path, const void *data, size_t len)
{
    gzFile gz = gzopen(path, "wb");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, data, (unsigned)len), (int)len);
    assert_int_equal(gzclose(gz), Z_OK);
}

/* Both info and a full read of path must fail with CORRUPT, and the message
 * must name the file. */
static void expect_corrupt(const char *path, const char *context, int check_info)
{
    simil_matrix out;
    simil_status s = simil_matrix_read(path, 0, -1, &out);
    if (s != SIMIL_ERR_CORRUPT)
        fail_msg("%s: read gave %s (%s), expected SIMIL_ERR_CORRUPT", context,
                 simil_status_name(s), simil_last_error());
    assert_null(out.data);
    const char *base = strrchr(path, '/');
    if (strstr(simil_last_error(), base + 1) == NULL)
        fail_msg("%s: message does not name the file: %s", context, simil_last_error());
    if (!check_info) return;
    s = simil_matrix_info(path, NULL, NULL, NULL);
    if (s != SIMIL_ERR_CORRUPT)
        fail_msg("%s: info gave %s (%s), expected SIMIL_ERR_CORRUPT", context,
                 simil_status_name(s), simil_last_error());
}

static void expect_message(const char *path, const char *part)
{
    expect_corrupt(path, path, 1);
    if (strstr(simil_last_error(), part) == NULL)
        fail_msg("%s: message '%s' lacks '%s'", path, simil_last_error(), part);
}

static unsigned char *valid_file(const char *name, simil_dtype dtype, int64_t rows, int64_t cols,
                                 size_t *len)
{
    simil_matrix m = {rows, cols, dtype, sml_test_malloc((size_t)(rows * cols) * 8)};
    for (int64_t k = 0; k < rows * cols * (int64_t)simil_dtype_size(dtype); k++)
        ((unsigned char *)m.data)[k] = (unsigned char)(k * 37 + 11);
    const char *path = sml_test_path(name);
    SML_ASSERT_OK(simil_matrix_write(path, &m));
    free(m.data);
    return read_bytes(path, len);
}

/* Cut a texmex file at every length: whole rows read fine, anything else is
 * CORRUPT. */
static void check_texmex_cuts(const char *name, simil_dtype dtype, size_t row_bytes)
{
    size_t len;
    unsigned char *full = valid_file(name, dtype, 4, 3, &len);
    const char *path = sml_test_path(name);
    for (size_t cut = 0; cut < len; cut++) {
        write_bytes(path, full, cut);
        char context[128];
        snprintf(context, sizeof context, "%s cut at %zu of %zu", name, cut, len);
        if (cut % row_bytes != 0) {
            expect_corrupt(path, context, 1);
            continue;
        }
        simil_matrix out;
        SML_ASSERT_OK(simil_matrix_read(path, 0, -1, &out));
        assert_int_equal(out.rows, (int64_t)(cut / row_bytes));
        simil_matrix_free(&out);
    }
    free(full);
}

static void test_texmex_truncated(void **state)
{
    (void)state;
    check_texmex_cuts("t.fvecs", SIMIL_DTYPE_FLOAT32, 4 + 3 * 4);
    check_texmex_cuts("t.bvecs", SIMIL_DTYPE_UINT8, 4 + 3);
    check_texmex_cuts("t.ivecs", SIMIL_DTYPE_INT32, 4 + 3 * 4);
    /* the message of the spec's example */
    size_t len;
    unsigned char *full = valid_file("msg.fvecs", SIMIL_DTYPE_FLOAT32, 13, 128, &len);
    write_bytes(sml_test_path("msg.fvecs"), full, 12 * 516 + 100);
    expect_message(sml_test_path("msg.fvecs"), "is truncated: row 12 needs 516 bytes, 100 remain");
    free(full);
}

static void put_i32(unsigned char *p, int32_t v) { memcpy(p, &v, 4); }

static void test_texmex_dimensions(void **state)
{
    (void)state;
    /* dims 4,4,4,5,5: the size is not a whole number of 4-d rows */
    unsigned char buf[256] = {0};
    size_t at = 0;
    const int dims[] = {4, 4, 4, 5, 5};
    for (int r = 0; r < 5; r++) {
        put_i32(buf + at, dims[r]);
        at += 4 + 4 * (size_t)dims[r];
    }
    write_bytes(sml_test_path("dims.fvecs"), buf, at);
    expect_message(sml_test_path("dims.fvecs"), "row 3 has dimension 5, row 0 has 4");
    /* dims 2,1,3 as bvecs: 6 + 5 + 7 = 18 bytes, three whole 2-d rows */
    memset(buf, 0, sizeof buf);
    put_i32(buf, 2);
    put_i32(buf + 6, 1);
    put_i32(buf + 11, 3);
    write_bytes(sml_test_path("dims.bvecs"), buf, 18);
    expect_message(sml_test_path("dims.bvecs"), "row 1 has dimension 1, row 0 has 2");
    /* a bad middle row is found by a read that covers it, even if info passes */
    memset(buf, 0, sizeof buf);
    for (int r = 0; r < 4; r++) put_i32(buf + 8 * r, r == 1 ? 3 : 1);
    write_bytes(sml_test_path("mid.ivecs"), buf, 32);
    simil_matrix out;
    SML_ASSERT_OK(simil_matrix_read(sml_test_path("mid.ivecs"), 2, 2, &out));
    simil_matrix_free(&out);
    SML_ASSERT_OK(simil_matrix_info(sml_test_path("mid.ivecs"), NULL, NULL, NULL));
    expect_corrupt(sml_test_path("mid.ivecs"), "mid.ivecs", 0);
    assert_non_null(strstr(simil_last_error(), "row 1 has dimension 3, row 0 has 1"));
    /* zero, negative and absurd dimensions */
    const int32_t bad[] = {0, -1, INT32_MIN, INT32_MAX, 1 << 30};
    for (int k = 0; k < 5; k++) {
        memset(buf, 0, sizeof buf);
        put_i32(buf, bad[k]);
        write_bytes(sml_test_path("bad.fvecs"), buf, 64);
        expect_corrupt(sml_test_path("bad.fvecs"), "absurd dimension", 1);
    }
}

static void test_npy_truncated(void **state)
{
    (void)state;
    size_t len;
    unsigned char *full = valid_file("t.npy", SIMIL_DTYPE_INT32, 3, 5, &len);
    const char *path = sml_test_path("t.npy");
    for (size_t cut = 0; cut < len; cut++) {
        write_bytes(path, full, cut);
        char context[128];
        snprintf(context, sizeof context, "t.npy cut at %zu of %zu", cut, len);
        expect_corrupt(path, context, 1);
    }
    unsigned char *longer = sml_test_malloc(len + 1);
    memcpy(longer, full, len);
    longer[len] = 0;
    write_bytes(path, longer, len + 1);
    expect_corrupt(path, "t.npy with an extra byte", 1);
    free(longer);
    free(full);
}

/* An npy file whose header is dict (version 1.0) followed by data bytes. */
static void write_npy(const char *path, const char *magic, int major, const char *dict,
                      size_t data_bytes)
{
    size_t dlen = strlen(dict), pre = major == 1 ? 10 : 12;
    unsigned char *buf = calloc(1, pre + dlen + data_bytes + 1);
    assert_non_null(buf);
    memcpy(buf, magic, 6);
    buf[6] = (unsigned char)major;
    uint32_t hl = (uint32_t)dlen;
    memcpy(buf + 8, &hl, major == 1 ? 2 : 4);
    memcpy(buf + pre, dict, dlen);
    write_bytes(path, buf, pre + dlen + data_bytes);
    free(buf);
}

static void test_npy_headers(void **state)
{
    (void)state;
    const char *ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n";
    const char *path = sml_test_path("h.npy");
    write_npy(path, "\x93NUMPY", 1, ok, 24);
    SML_ASSERT_OK(simil_matrix_info(path, NULL, NULL, NULL));
    write_npy(path, "\x93NUMPX", 1, ok, 24);
    expect_message(path, "not an npy file");
    write_npy(path, "\x93NUMPY", 4, ok, 24);
    expect_message(path, "version 4.0");
    const struct {
        const char *dict;
        const char *message;
    } bad[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), \n", "npy header is not valid"},
        {"garbage", "npy header is not valid"},
        {"", "npy header is not valid"},
        {"{'descr': '<f4', 'fortran_order': False}", "npy header is not valid"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", "not valid"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", "not valid"},
        {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}", "not valid"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", "not valid"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", "not valid"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", "not valid"},
        {"{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3)}", "not valid"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} x", "not valid"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 1)}",
         "too large"},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3)}", "Fortran order"},
        {"{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3)}", "'<f2'"},
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3)}", "big-endian"},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3)}", "not valid"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': ()}", "0-dimensional"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3)}", "3 or more"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, "
         "4611686018427387904)}",
         "too large"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 1)}",
         "too large"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000)}", "truncated"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2)}", "follow"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        write_npy(path, "\x93NUMPY", 1 + (int)(k % 2), bad[k].dict, 24);
        expect_corrupt(path, bad[k].dict, 1);
        if (strstr(simil_last_error(), bad[k].message) == NULL)
            fail_msg("header %s: message '%s' lacks '%s'", bad[k].dict, simil_last_error(),
                     bad[k].message);
    }
    /* a header length past the end of the file */
    unsigned char pre[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xff, 0xff, 0xff, 0xff};
    write_bytes(path, pre, sizeof pre);
    expect_message(path, "truncated");
}

static unsigned char *make_idx(int ndim, const uint32_t *dims, size_t data, size_t *len)
{
    size_t head = 4 + 4 * (size_t)ndim;
    unsigned char *buf = sml_test_malloc(head + data);
    buf[0] = buf[1] = 0;
    buf[2] = 0x08;
    buf[3] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++)
        for (int b = 0; b < 4; b++) buf[4 + 4 * i + b] = (unsigned char)(dims[i] >> (24 - 8 * b));
    for (size_t k = 0; k < data; k++) buf[head + k] = (unsigned char)(k * 13 + 5);
    *len = head + data;
    return buf;
}

static void test_idx_truncated(void **state)
{
    (void)state;
    const uint32_t dims[3] = {3, 2, 4};
    size_t len, gz_len;
    unsigned char *img = make_idx(3, dims, 24, &len);
    const char *plain = sml_test_path("t-idx3-ubyte");
    const char *gz = sml_test_path("t-idx3-ubyte.gz");
    for (size_t cut = 0; cut < len; cut++) {
        write_bytes(plain, img, cut);
        write_gz(gz, img, cut);
        char context[128];
        snprintf(context, sizeof context, "idx cut at %zu of %zu", cut, len);
        expect_corrupt(plain, context, 1);
        expect_corrupt(gz, context, cut < 16);
    }
    write_gz(gz, img, len);
    unsigned char *packed = read_bytes(gz, &gz_len);
    for (size_t cut = 0; cut < gz_len; cut++) {
        write_bytes(gz, packed, cut);
        char context[128];
        snprintf(context, sizeof context, "idx.gz cut at %zu of %zu compressed", cut, gz_len);
        expect_corrupt(gz, context, 0);
    }
    free(packed);
    free(img);
}

static void test_idx_headers(void **state)
{
    (void)state;
    const char *plain = sml_test_path("h-idx3-ubyte");
    const char *gz = sml_test_path("h-idx3-ubyte.gz");
    const uint32_t huge[3] = {0xffffffffu, 0xffffffffu, 0xffffffffu};
    const uint32_t big[3] = {0x7fffffffu, 28, 28};
    const uint32_t *shapes[] = {huge, big};
    for (int k = 0; k < 2; k++) {
        size_t len;
        unsigned char *img = make_idx(3, shapes[k], 1000, &len);
        write_bytes(plain, img, len);
        write_gz(gz, img, len);
        expect_corrupt(plain, "absurd idx shape", 1);
        expect_corrupt(gz, "absurd idx shape (gz)", 0);
        if (k == 1) {
            simil_matrix out;
            SML_ASSERT_STATUS(SIMIL_ERR_CORRUPT, simil_matrix_read(gz, 1, 1, &out));
        }
        img[2] = 0x0D;
        write_gz(gz, img, len);
        expect_message(gz, "float32");
        img[2] = 0x08;
        img[3] = 0;
        write_bytes(plain, img, len);
        expect_message(plain, "not an idx file");
        img[3] = 3;
        img[0] = 1;
        write_bytes(plain, img, len);
        expect_message(plain, "not an idx file");
        free(img);
    }
    const uint32_t small[2] = {2, 3};
    size_t len;
    unsigned char *img = make_idx(2, small, 7, &len);
    write_gz(gz, img, len);
    expect_corrupt(gz, "idx.gz with an extra byte", 0);
    assert_non_null(strstr(simil_last_error(), "more data follows"));
    free(img);
}

/* Change every byte of a small file to a few values: the reader may accept the
 * result or call it CORRUPT, nothing else (and must not crash).  gz: gzip the
 * changed bytes. */
static void check_byte_changes(const char *name, const unsigned char *file, size_t len, int gz)
{
    const char *path = sml_test_path(name);
    unsigned char *copy = sml_test_malloc(len);
    const unsigned char values[] = {0x00, 0xff, 0x7f, 0x80, 0x01};
    for (size_t at = 0; at < len; at++) {
        for (int v = 0; v < 5; v++) {
            memcpy(copy, file, len);
            copy[at] = copy[at] == values[v] ? (unsigned char)~values[v] : values[v];
            if (gz) write_gz(path, copy, len);
            else write_bytes(path, copy, len);
            simil_matrix out;
            simil_status s = simil_matrix_read(path, 0, -1, &out);
            if (s != SIMIL_OK && s != SIMIL_ERR_CORRUPT)
                fail_msg("%s byte %zu = 0x%02x: %s (%s)", name, at, copy[at], simil_status_name(s),
                         simil_last_error());
            if (s == SIMIL_OK) {
                assert_true(out.rows >= 0 && out.cols >= 0);
                simil_matrix_free(&out);
            }
        }
    }
    free(copy);
}

static void test_byte_changes(void **state)
{
    (void)state;
    size_t len;
    unsigned char *f = valid_file("b.npy", SIMIL_DTYPE_FLOAT32, 2, 3, &len);
    check_byte_changes("b.npy", f, len, 0);
    free(f);
    f = valid_file("b.fvecs", SIMIL_DTYPE_FLOAT32, 3, 2, &len);
    check_byte_changes("b.fvecs", f, len, 0);
    free(f);
    const uint32_t dims[3] = {2, 2, 3};
    f = make_idx(3, dims, 12, &len);
    check_byte_changes("b-idx3-ubyte.gz", f, len, 1);
    check_byte_changes("b-idx3-ubyte", f, len, 0);
    write_gz(sml_test_path("b-idx3-ubyte.gz"), f, len);
    free(f);
    f = read_bytes(sml_test_path("b-idx3-ubyte.gz"), &len);
    check_byte_changes("b-idx3-ubyte.gz", f, len, 0);
    free(f);
}

/* Make the n-th allocation of a read fail, for every n: OUT_OF_MEMORY and no
 * leak, until n is past the last allocation and the read succeeds. */
static void check_alloc_failures(const char *path)
{
    for (int64_t n = 1;; n++) {
        simil_matrix out;
        sml_alloc_fail_at(n, 1);
        simil_status s = simil_matrix_read_float(path, 0, -1, &out);
        sml_alloc_fail_at(0, 0);
        if (s == SIMIL_OK) {
            simil_matrix_free(&out);
            break;
        }
        if (s != SIMIL_ERR_OUT_OF_MEMORY)
            fail_msg("%s, allocation %lld failing: %s (%s)", path, (long long)n,
                     simil_status_name(s), simil_last_error());
        assert_null(out.data);
        assert_true(n < 100);
    }
}

static void test_allocation_failures(void **state)
{
    (void)state;
    size_t len;
    free(valid_file("oom.bvecs", SIMIL_DTYPE_UINT8, 5, 4, &len));
    free(valid_file("oom.npy", SIMIL_DTYPE_INT64, 5, 4, &len));
    check_alloc_failures(sml_test_path("oom.bvecs"));
    check_alloc_failures(sml_test_path("oom.npy"));
    const uint32_t dims[3] = {2, 2, 3};
    unsigned char *img = make_idx(3, dims, 12, &len);
    write_gz(sml_test_path("oom-idx3-ubyte.gz"), img, len);
    free(img);
    check_alloc_failures(sml_test_path("oom-idx3-ubyte.gz"));
    simil_matrix m = {3, 2, SIMIL_DTYPE_INT64, (int64_t[6]){1, 2, 3, 4, 5, 6}};
    for (int64_t n = 1; n < 100; n++) {
        sml_alloc_fail_at(n, 1);
        simil_status s = simil_matrix_write(sml_test_path("oom.ivecs"), &m);
        sml_alloc_fail_at(0, 0);
        if (s == SIMIL_OK) break;
        SML_ASSERT_STATUS(SIMIL_ERR_OUT_OF_MEMORY, s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_texmex_truncated),
        cmocka_unit_test(test_texmex_dimensions),
        cmocka_unit_test(test_npy_truncated),
        cmocka_unit_test(test_npy_headers),
        cmocka_unit_test(test_idx_truncated),
        cmocka_unit_test(test_idx_headers),
        cmocka_unit_test(test_byte_changes),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
