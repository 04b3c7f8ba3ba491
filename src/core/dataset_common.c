/* dataset_common.c: what the format readers (dataset_texmex.c, dataset_npy.c,
 * dataset_idx.c, dataset_hdf5.c) and the dispatcher above them (dataset.c)
 * share: element sizes, range and size checks, and the matrix allocation that
 * simil_matrix_free releases.  Apart from dataset.c so that the readers never
 * call back into the file that calls them. */
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/dataset_formats.h"
#include "core/error.h"

size_t simil_dtype_size(simil_dtype dtype)
{
    switch (dtype) {
    case SIMIL_DTYPE_FLOAT32: return 4;
    case SIMIL_DTYPE_UINT8: return 1;
    case SIMIL_DTYPE_INT32: return 4;
    case SIMIL_DTYPE_INT64: return 8;
    }
    return 0;
}

const char *sml_dtype_name(simil_dtype dtype)
{
    switch (dtype) {
    case SIMIL_DTYPE_FLOAT32: return "float32";
    case SIMIL_DTYPE_UINT8: return "uint8";
    case SIMIL_DTYPE_INT32: return "int32";
    case SIMIL_DTYPE_INT64: return "int64";
    }
    return "an unknown type";
}

const char *sml_hdf5_split(const char *spec)
{
    for (const char *c = strchr(spec, ':'); c != NULL; c = strchr(c + 1, ':')) {
        size_t n = (size_t)(c - spec);
        if ((n >= 5 && strncasecmp(c - 5, ".hdf5", 5) == 0) ||
            (n >= 3 && strncasecmp(c - 3, ".h5", 3) == 0))
            return c;
    }
    return NULL;
}

simil_status sml_dataset_range(const char *path, int64_t rows, int64_t first, int64_t *count)
{
    SML_RETURN_IF(first < 0 || first > rows, SIMIL_ERR_INVALID_ARGUMENT,
                  "first row %" PRId64 " is out of range: '%s' has %" PRId64 " rows", first, path,
                  rows);
    if (*count < 0) *count = rows - first;
    SML_RETURN_IF(*count > rows - first, SIMIL_ERR_INVALID_ARGUMENT,
                  "rows [%" PRId64 ", %" PRId64 " + %" PRId64
                  ") are out of range: '%s' has %" PRId64 " rows",
                  first, first, *count, path, rows);
    return SIMIL_OK;
}

simil_status sml_dataset_bytes(const char *path, int64_t rows, int64_t cols, size_t esize,
                               size_t *bytes)
{
    SML_RETURN_IF(rows < 0 || cols < 0, SIMIL_ERR_CORRUPT,
                  "'%s' has a negative shape (%" PRId64 ", %" PRId64 ")", path, rows, cols);
    uint64_t limit = INT64_MAX < SIZE_MAX ? (uint64_t)INT64_MAX : (uint64_t)SIZE_MAX;
    uint64_t r = (uint64_t)rows, c = (uint64_t)cols;
    int fits = c == 0 || r <= limit / c;
    fits = fits && (r * c == 0 || esize <= limit / (r * c));
    SML_RETURN_IF(!fits, SIMIL_ERR_CORRUPT,
                  "'%s' claims a shape of %" PRId64 " x %" PRId64 " elements of %zu bytes, "
                  "which is too large to be real",
                  path, rows, cols, esize);
    *bytes = (size_t)(r * c * esize);
    return SIMIL_OK;
}

simil_status sml_dataset_alloc(simil_matrix *out, int64_t rows, int64_t cols, simil_dtype dtype)
{
    memset(out, 0, sizeof *out);
    size_t bytes = 0;
    SML_TRY(sml_dataset_bytes("the output matrix", rows, cols, simil_dtype_size(dtype), &bytes));
    SML_TRY(sml_alloc(&out->data, bytes, 1, "a matrix read from a file"));
    out->rows = rows;
    out->cols = cols;
    out->dtype = dtype;
    return SIMIL_OK;
}

void simil_matrix_free(simil_matrix *m)
{
    if (m == NULL) return;
    sml_free(m->data);
    memset(m, 0, sizeof *m);
}
