/* dataset_texmex.c: the texmex formats of the INRIA ANN_SIFT sets (.fvecs,
 * .bvecs, .ivecs).  Each row is a little-endian int32 dimension followed by
 * that many float32, uint8 or int32 values.  There is no header: the row count
 * comes from the file size, and every row must repeat the first row's
 * dimension.  Rows are fixed-size, so a range of rows is one seek away. */
#include <string.h>

#include "core/alloc.h"
#include "core/dataset_formats.h"
#include "core/error.h"
#include "core/file_io.h"

enum { SML_TEXMEX_CHUNK = 4 << 20, SML_TEXMEX_DIAGNOSE_ROWS = 1 << 20 };

typedef struct sml_texmex {
    sml_reader r;
    int64_t rows;
    int32_t dim;
    simil_dtype dtype;
    size_t esize;
    uint64_t row_bytes;
} sml_texmex;

static const char *sml_texmex_ext(simil_dtype dtype)
{
    return dtype == SIMIL_DTYPE_FLOAT32 ? ".fvecs"
           : dtype == SIMIL_DTYPE_UINT8 ? ".bvecs"
                                        : ".ivecs";
}

static simil_status sml_texmex_dim_at(sml_texmex *t, int64_t row, int32_t *dim)
{
    SML_TRY(sml_reader_seek(&t->r, (uint64_t)row * t->row_bytes));
    return sml_reader_read(&t->r, dim, 4);
}

/* The file is not a whole number of rows of the first row's size, or its last
 * row has another dimension: find the first row whose dimension differs
 * (scanning a bounded number of rows), else report the file as cut short. */
static simil_status sml_texmex_diagnose(sml_texmex *t, uint64_t remain)
{
    int64_t scan = t->rows < SML_TEXMEX_DIAGNOSE_ROWS ? t->rows : SML_TEXMEX_DIAGNOSE_ROWS;
    for (int64_t i = 1; i <= scan; i++) {
        int32_t d;
        if (i == t->rows && remain < 4) break;
        SML_TRY(sml_texmex_dim_at(t, i, &d));
        SML_RETURN_IF(d != t->dim, SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: row %" PRId64 " has dimension %d, row 0 has %d", t->r.path,
                      i, (int)d, (int)t->dim);
    }
    SML_RETURN_IF(remain == 0, SIMIL_ERR_CORRUPT, "'%s' is damaged: rows have different dimensions",
                  t->r.path);
    return sml_error(SIMIL_ERR_CORRUPT,
                     "'%s' is truncated: row %" PRId64 " needs %llu bytes, %llu remain", t->r.path,
                     t->rows, (unsigned long long)t->row_bytes, (unsigned long long)remain);
}

static simil_status sml_texmex_parse(sml_texmex *t)
{
    const char *path = t->r.path;
    if (t->r.size == 0) return SIMIL_OK;
    SML_RETURN_IF(t->r.size < 4, SIMIL_ERR_CORRUPT,
                  "'%s' is truncated: row 0 needs at least 4 bytes, %llu remain", path,
                  (unsigned long long)t->r.size);
    SML_TRY(sml_reader_read(&t->r, &t->dim, 4));
    SML_RETURN_IF(t->dim <= 0, SIMIL_ERR_CORRUPT,
                  "'%s' is not a valid %s file: row 0 has dimension %d", path,
                  sml_texmex_ext(t->dtype), (int)t->dim);
    t->row_bytes = 4 + (uint64_t)t->dim * t->esize;
    t->rows = (int64_t)(t->r.size / t->row_bytes);
    uint64_t remain = t->r.size % t->row_bytes;
    if (remain != 0) return sml_texmex_diagnose(t, remain);
    int32_t last = t->dim;
    if (t->rows > 1) SML_TRY(sml_texmex_dim_at(t, t->rows - 1, &last));
    return last == t->dim ? SIMIL_OK : sml_texmex_diagnose(t, 0);
}

static simil_status sml_texmex_open(sml_texmex *t, const char *path, simil_dtype dtype)
{
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->esize = simil_dtype_size(dtype);
    SML_TRY(sml_reader_open(&t->r, path));
    simil_status s = sml_texmex_parse(t);
    if (s != SIMIL_OK) sml_reader_close(&t->r);
    return s;
}

simil_status sml_texmex_info(const char *path, simil_dtype file_dtype, int64_t *rows, int64_t *cols)
{
    sml_texmex t;
    SML_TRY(sml_texmex_open(&t, path, file_dtype));
    sml_reader_close(&t.r);
    *rows = t.rows;
    *cols = t.dim;
    return SIMIL_OK;
}

/* Read count rows from first into dst, a chunk of whole rows at a time,
 * checking each row's dimension. */
static simil_status sml_texmex_rows(sml_texmex *t, int64_t first, int64_t count, char *dst)
{
    if (count == 0) return SIMIL_OK;
    size_t payload = t->row_bytes - 4;
    int64_t per_chunk = (int64_t)(SML_TEXMEX_CHUNK / t->row_bytes);
    if (per_chunk < 1) per_chunk = 1;
    if (per_chunk > count) per_chunk = count;
    char *chunk;
    SML_TRY(sml_alloc((void **)&chunk, (size_t)per_chunk, t->row_bytes, "a texmex read buffer"));
    simil_status s = sml_reader_seek(&t->r, (uint64_t)first * t->row_bytes);
    for (int64_t done = 0; s == SIMIL_OK && done < count; done += per_chunk) {
        int64_t n = count - done < per_chunk ? count - done : per_chunk;
        s = sml_reader_read(&t->r, chunk, (size_t)n * t->row_bytes);
        for (int64_t i = 0; s == SIMIL_OK && i < n; i++) {
            const char *row = chunk + (size_t)i * t->row_bytes;
            int32_t d;
            memcpy(&d, row, 4);
            if (d != t->dim)
                s = sml_error(SIMIL_ERR_CORRUPT,
                              "'%s' is damaged: row %" PRId64 " has dimension %d, row 0 has %d",
                              t->r.path, first + done + i, (int)d, (int)t->dim);
            else
                memcpy(dst + (size_t)(done + i) * payload, row + 4, payload);
        }
    }
    sml_free(chunk);
    return s;
}

simil_status sml_texmex_read(const char *path, simil_dtype file_dtype, int64_t first, int64_t count,
                             simil_matrix *out)
{
    sml_texmex t;
    SML_TRY(sml_texmex_open(&t, path, file_dtype));
    simil_status s = sml_dataset_range(path, t.rows, first, &count);
    if (s == SIMIL_OK) s = sml_dataset_alloc(out, count, t.dim, file_dtype);
    if (s == SIMIL_OK) s = sml_texmex_rows(&t, first, count, out->data);
    if (s != SIMIL_OK) simil_matrix_free(out);
    sml_reader_close(&t.r);
    return s;
}

/* int64 rows narrowed into an int32 row buffer, refusing values that do not fit. */
static simil_status sml_texmex_narrow(const char *path, const int64_t *src, int64_t row,
                                      int64_t cols, int32_t *dst)
{
    for (int64_t j = 0; j < cols; j++) {
        SML_RETURN_IF(src[j] < INT32_MIN || src[j] > INT32_MAX, SIMIL_ERR_INVALID_ARGUMENT,
                      "cannot write '%s': value %" PRId64 " at row %" PRId64 ", column %" PRId64
                      " does not fit in the int32 of .ivecs",
                      path, src[j], row, j);
        dst[j] = (int32_t)src[j];
    }
    return SIMIL_OK;
}

static simil_status sml_texmex_write_rows(sml_writer *w, const simil_matrix *m, int32_t *narrow)
{
    int32_t dim = (int32_t)m->cols;
    size_t in_row = (size_t)m->cols * simil_dtype_size(m->dtype);
    size_t out_row = narrow != NULL ? (size_t)m->cols * 4 : in_row;
    for (int64_t i = 0; i < m->rows; i++) {
        const char *row = (const char *)m->data + (size_t)i * in_row;
        if (narrow != NULL) {
            SML_TRY(
                sml_texmex_narrow(sml_writer_path(w), (const int64_t *)row, i, m->cols, narrow));
            row = (const char *)narrow;
        }
        SML_TRY(sml_writer_write(w, &dim, 4));
        SML_TRY(sml_writer_write(w, row, out_row));
    }
    return SIMIL_OK;
}

simil_status sml_texmex_write(const char *path, simil_dtype file_dtype, const simil_matrix *m)
{
    const char *ext = sml_texmex_ext(file_dtype);
    int widen_ok = file_dtype == SIMIL_DTYPE_INT32 && m->dtype == SIMIL_DTYPE_INT64;
    SML_RETURN_IF(
        m->dtype != file_dtype && !widen_ok, SIMIL_ERR_INVALID_ARGUMENT,
        "cannot write '%s': %s holds %s, the matrix is %s (write .npy instead)", path, ext,
        file_dtype == SIMIL_DTYPE_INT32 ? "int32 (or int64 that fits)" : sml_dtype_name(file_dtype),
        sml_dtype_name(m->dtype));
    SML_RETURN_IF(m->rows > 0 && (m->cols < 1 || m->cols > INT32_MAX), SIMIL_ERR_INVALID_ARGUMENT,
                  "cannot write '%s': %s rows need 1 to 2^31-1 columns, the matrix has %" PRId64,
                  path, ext, m->cols);
    int32_t *narrow = NULL;
    if (widen_ok && m->rows > 0)
        SML_TRY(sml_alloc((void **)&narrow, (size_t)m->cols, 4, "an .ivecs row"));
    sml_writer *w;
    simil_status s = sml_writer_open(&w, path);
    if (s == SIMIL_OK) {
        s = sml_texmex_write_rows(w, m, narrow);
        if (s == SIMIL_OK)
            s = sml_writer_commit(w);
        else
            sml_writer_abort(w);
    }
    sml_free(narrow);
    return s;
}
