/* fuzz_common.c: scratch files and status checks for the fuzz targets. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp */
#endif
#include "fuzz_common.h"
#include "index/index_spec.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char sml_fuzz_dir[512];

/* Remove the scratch folder and the files in it (targets make no folders). */
static void sml_fuzz_cleanup(void)
{
    DIR *dir = opendir(sml_fuzz_dir);
    if (dir != NULL) {
        struct dirent *e;
        char path[1024];
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(path, sizeof path, "%s/%s", sml_fuzz_dir, e->d_name);
            unlink(path);
        }
        closedir(dir);
    }
    rmdir(sml_fuzz_dir);
}

static const char *sml_fuzz_scratch(void)
{
    if (sml_fuzz_dir[0]) return sml_fuzz_dir;
    struct stat st;
    const char *base = getenv("TMPDIR");
    if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0)
        base = "/dev/shm";
    snprintf(sml_fuzz_dir, sizeof sml_fuzz_dir, "%s/simil-fuzz-XXXXXX", base ? base : "/tmp");
    if (mkdtemp(sml_fuzz_dir) == NULL) sml_fuzz_fail("cannot create a scratch folder");
    atexit(sml_fuzz_cleanup);
    return sml_fuzz_dir;
}

const char *sml_fuzz_path(const char *name)
{
    static char paths[4][1024];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, sizeof paths[0], "%s/%s", sml_fuzz_scratch(), name);
    return p;
}

const char *sml_fuzz_write_file(const char *name, const void *data, size_t size)
{
    const char *path = sml_fuzz_path(name);
    FILE *f = fopen(path, "wb");
    if (f == NULL) sml_fuzz_fail("cannot create %s", path);
    int bad = size > 0 && fwrite(data, 1, size, f) != size;
    if (fclose(f) != 0 || bad) sml_fuzz_fail("cannot write %s", path);
    return path;
}

void sml_fuzz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("simil fuzz: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void sml_fuzz_expect(const char *what, simil_status status, int count, ...)
{
    va_list ap;
    va_start(ap, count);
    int ok = 0;
    for (int i = 0; i < count; i++) ok |= va_arg(ap, int) == (int)status;
    va_end(ap);
    if (!ok)
        sml_fuzz_fail("%s returned %s (%s), which it must not for any input", what,
                      simil_status_name(status), simil_last_error());
}

uint64_t sml_fuzz_touch(const void *data, size_t size)
{
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int sml_fuzz_status_in(simil_status s, int count, va_list ap)
{
    int ok = s == SIMIL_OK || s == SIMIL_ERR_CORRUPT;
    for (int i = 0; i < count; i++) ok |= va_arg(ap, int) == (int)s;
    return ok;
}

static void sml_fuzz_expect_read(const char *what, const char *path, simil_status s, int count,
                                 va_list ap)
{
    va_list copy;
    va_copy(copy, ap);
    int ok = sml_fuzz_status_in(s, count, copy);
    va_end(copy);
    if (!ok)
        sml_fuzz_fail("%s('%s') returned %s (%s), which it must not for any input", what, path,
                      simil_status_name(s), simil_last_error());
}

static float sml_fuzz_as_float(const simil_matrix *m, size_t i)
{
    switch (m->dtype) {
    case SIMIL_DTYPE_FLOAT32: return ((const float *)m->data)[i];
    case SIMIL_DTYPE_UINT8: return (float)((const uint8_t *)m->data)[i];
    case SIMIL_DTYPE_INT32: return (float)((const int32_t *)m->data)[i];
    case SIMIL_DTYPE_INT64: return (float)((const int64_t *)m->data)[i];
    }
    sml_fuzz_fail("unknown dtype %d", (int)m->dtype);
}

/* Row 1 of m, read again alone through simil_matrix_read_float. */
static void sml_fuzz_check_row1(const char *path, const simil_matrix *m)
{
    simil_matrix one;
    sml_fuzz_expect("read_float of row 1 of a readable file",
                    simil_matrix_read_float(path, 1, 1, &one), 1, SIMIL_OK);
    if (one.rows != 1 || one.cols != m->cols || one.dtype != SIMIL_DTYPE_FLOAT32)
        sml_fuzz_fail("'%s': row 1 alone has shape %lld x %lld", path, (long long)one.rows,
                      (long long)one.cols);
    for (int64_t j = 0; j < m->cols; j++) {
        float want = sml_fuzz_as_float(m, (size_t)(m->cols + j));
        float got = ((const float *)one.data)[j];
        if (memcmp(&want, &got, sizeof want) != 0)
            sml_fuzz_fail("'%s': row 1 column %lld reads %g alone and %g in the whole file", path,
                          (long long)j, got, want);
    }
    simil_matrix_free(&one);
}

static void sml_fuzz_check_roundtrip(const char *roundtrip, const simil_matrix *m)
{
    sml_fuzz_expect("writing a matrix that was read", simil_matrix_write(roundtrip, m), 1,
                    SIMIL_OK);
    simil_matrix back;
    sml_fuzz_expect("reading back a written matrix", simil_matrix_read(roundtrip, 0, -1, &back), 1,
                    SIMIL_OK);
    size_t bytes = (size_t)m->rows * (size_t)m->cols * simil_dtype_size(m->dtype);
    /* an empty texmex file reads as 0 x 0, whatever the columns were */
    int same_shape = back.rows == m->rows && (back.cols == m->cols || bytes == 0);
    if (!same_shape || back.dtype != m->dtype || (bytes > 0 && memcmp(back.data, m->data, bytes)))
        sml_fuzz_fail("'%s' does not read back what was written (%lld x %lld, got %lld x %lld)",
                      roundtrip, (long long)m->rows, (long long)m->cols, (long long)back.rows,
                      (long long)back.cols);
    simil_matrix_free(&back);
}

simil_status sml_fuzz_check_matrix(const char *path, const char *roundtrip, int extra_count, ...)
{
    va_list ap;
    va_start(ap, extra_count);
    int64_t rows = -1, cols = -1;
    simil_dtype dtype = SIMIL_DTYPE_FLOAT32;
    simil_status si = simil_matrix_info(path, &rows, &cols, &dtype);
    sml_fuzz_expect_read("simil_matrix_info", path, si, extra_count, ap);
    simil_matrix m;
    simil_status sr = simil_matrix_read(path, 0, -1, &m);
    sml_fuzz_expect_read("simil_matrix_read", path, sr, extra_count, ap);
    va_end(ap);
    if (sr != SIMIL_OK) {
        if (m.data != NULL || m.rows != 0 || m.cols != 0)
            sml_fuzz_fail("a failed read of '%s' left data in the matrix", path);
    } else {
        if (si != SIMIL_OK) sml_fuzz_fail("'%s': read accepts a file that info refuses", path);
        if (m.rows != rows || m.cols != cols || m.dtype != dtype)
            sml_fuzz_fail("'%s': info says %lld x %lld of type %d, read gives %lld x %lld of %d",
                          path, (long long)rows, (long long)cols, (int)dtype, (long long)m.rows,
                          (long long)m.cols, (int)m.dtype);
        sml_fuzz_touch(m.data, (size_t)m.rows * (size_t)m.cols * simil_dtype_size(m.dtype));
    }
    if (si == SIMIL_OK && rows < INT64_MAX) {
        simil_matrix past;
        sml_fuzz_expect("a read past the last row", simil_matrix_read(path, rows + 1, 1, &past),
                        1, SIMIL_ERR_INVALID_ARGUMENT);
        if (sr == SIMIL_OK && rows >= 2) sml_fuzz_check_row1(path, &m);
    }
    if (sr == SIMIL_OK && roundtrip != NULL) sml_fuzz_check_roundtrip(roundtrip, &m);
    simil_matrix_free(&m);
    return sr;
}

int sml_fuzz_params_too_large(const char *desc, int64_t dim)
{
    const char *strict = getenv("SIMIL_FUZZ_NO_WORKAROUNDS");
    if (strict != NULL && strict[0] == '1') return 0;
    sml_index_spec spec;
    if (sml_index_spec_parse(desc, dim, &spec) != SIMIL_OK) return 0;
    const double limit = (double)(1 << 20); /* floats: 4 MB */
    double floats = (double)spec.ivf_nlist * (double)dim;
    if (spec.encoding == SML_ENCODING_PQ) floats += (double)(1 << spec.pq_bits) * (double)dim;
    /* RR: a dim x dim rotation held by every shard (made by one SVD, which
     * shards of one index share) */
    if (spec.rotate)
        floats += (double)dim * (double)dim * (double)(spec.shards > 1 ? spec.shards : 1);
    return floats > limit || spec.ivf_nlist > limit;
}
