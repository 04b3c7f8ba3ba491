/* dataset.c: the public matrix file API.  Picks the format from the file name,
 * checks arguments, and converts to float32 for simil_matrix_read_float; the
 * formats themselves live in dataset_texmex.c, dataset_npy.c, dataset_idx.c
 * and dataset_hdf5.c, and what they share in dataset_common.c. */
#include <string.h>
#include <strings.h>

#include "core/dataset_formats.h"
#include "core/error.h"

typedef enum sml_format {
    SML_FORMAT_UNKNOWN,
    SML_FORMAT_FVECS,
    SML_FORMAT_BVECS,
    SML_FORMAT_IVECS,
    SML_FORMAT_NPY,
    SML_FORMAT_IDX,
    SML_FORMAT_HDF5
} sml_format;

#define SML_FORMAT_LIST                                                                            \
    ".fvecs, .bvecs, .ivecs, .npy, *idx3-ubyte[.gz] (also idx1) and FILE.hdf5:NAME"

static int sml_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

/* "…idxN-ubyte" or "…idxN-ubyte.gz", N a digit. */
static int sml_is_idx_name(const char *path)
{
    size_t n = strlen(path);
    if (sml_ends_with(path, ".gz")) n -= 3;
    const size_t tail = strlen("idx1-ubyte");
    if (n < tail) return 0;
    const char *t = path + n - tail;
    return strncasecmp(t, "idx", 3) == 0 && t[3] >= '0' && t[3] <= '9' &&
           strncasecmp(t + 4, "-ubyte", 6) == 0;
}

static int sml_is_hdf5_name(const char *path)
{
    return sml_ends_with(path, ".hdf5") || sml_ends_with(path, ".h5") ||
           sml_hdf5_split(path) != NULL;
}

static sml_format sml_dataset_format(const char *path)
{
    if (sml_is_hdf5_name(path)) return SML_FORMAT_HDF5;
    if (sml_ends_with(path, ".fvecs")) return SML_FORMAT_FVECS;
    if (sml_ends_with(path, ".bvecs")) return SML_FORMAT_BVECS;
    if (sml_ends_with(path, ".ivecs")) return SML_FORMAT_IVECS;
    if (sml_ends_with(path, ".npy")) return SML_FORMAT_NPY;
    if (sml_is_idx_name(path)) return SML_FORMAT_IDX;
    return SML_FORMAT_UNKNOWN;
}

static simil_dtype sml_texmex_dtype(sml_format f)
{
    return f == SML_FORMAT_FVECS   ? SIMIL_DTYPE_FLOAT32
           : f == SML_FORMAT_BVECS ? SIMIL_DTYPE_UINT8
                                   : SIMIL_DTYPE_INT32;
}

static simil_status sml_unknown_format(const char *path)
{
    return sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                     "cannot tell the format of '%s' from its name; simil reads " SML_FORMAT_LIST,
                     path);
}

simil_status simil_matrix_info(const char *path, int64_t *rows, int64_t *cols, simil_dtype *dtype)
{
    SML_RETURN_IF(path == NULL, SIMIL_ERR_INVALID_ARGUMENT, "no file name given");
    int64_t r = 0, c = 0;
    simil_dtype t = SIMIL_DTYPE_FLOAT32;
    sml_format f = sml_dataset_format(path);
    switch (f) {
    case SML_FORMAT_FVECS:
    case SML_FORMAT_BVECS:
    case SML_FORMAT_IVECS:
        t = sml_texmex_dtype(f);
        SML_TRY(sml_texmex_info(path, t, &r, &c));
        break;
    case SML_FORMAT_NPY: SML_TRY(sml_npy_info(path, &r, &c, &t)); break;
    case SML_FORMAT_IDX: SML_TRY(sml_idx_info(path, &r, &c, &t)); break;
    case SML_FORMAT_HDF5: SML_TRY(sml_hdf5_info(path, &r, &c, &t)); break;
    case SML_FORMAT_UNKNOWN: return sml_unknown_format(path);
    }
    if (rows != NULL) *rows = r;
    if (cols != NULL) *cols = c;
    if (dtype != NULL) *dtype = t;
    return SIMIL_OK;
}

simil_status simil_matrix_read(const char *path, int64_t first, int64_t count, simil_matrix *out)
{
    SML_RETURN_IF(out == NULL, SIMIL_ERR_INVALID_ARGUMENT, "no output matrix given");
    memset(out, 0, sizeof *out);
    SML_RETURN_IF(path == NULL, SIMIL_ERR_INVALID_ARGUMENT, "no file name given");
    SML_RETURN_IF(first < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "first row %" PRId64 " of '%s' is negative", first, path);
    sml_format f = sml_dataset_format(path);
    switch (f) {
    case SML_FORMAT_FVECS:
    case SML_FORMAT_BVECS:
    case SML_FORMAT_IVECS: return sml_texmex_read(path, sml_texmex_dtype(f), first, count, out);
    case SML_FORMAT_NPY: return sml_npy_read(path, first, count, out);
    case SML_FORMAT_IDX: return sml_idx_read(path, first, count, out);
    case SML_FORMAT_HDF5: return sml_hdf5_read(path, first, count, out);
    case SML_FORMAT_UNKNOWN: break;
    }
    return sml_unknown_format(path);
}

simil_status simil_dataset_metric(const char *path, simil_metric *metric, int *declared)
{
    static const struct {
        const char *name;
        simil_metric metric;
    } names[] = {
        {"euclidean", SIMIL_METRIC_L2}, {"l2", SIMIL_METRIC_L2},
        {"angular", SIMIL_METRIC_COSINE}, {"cosine", SIMIL_METRIC_COSINE},
        {"ip", SIMIL_METRIC_IP}, {"dot", SIMIL_METRIC_IP}, {"inner_product", SIMIL_METRIC_IP},
    };
    SML_RETURN_IF(path == NULL || metric == NULL || declared == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "simil_dataset_metric: NULL argument");
    *declared = 0;
    if (sml_dataset_format(path) != SML_FORMAT_HDF5) return SIMIL_OK;
    char text[64];
    int found = 0;
    SML_TRY(sml_hdf5_attribute(path, "distance", text, sizeof text, &found));
    if (!found) return SIMIL_OK;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(text, names[i].name) == 0) {
            *metric = names[i].metric;
            *declared = 1;
            return SIMIL_OK;
        }
    return sml_error(SIMIL_ERR_UNSUPPORTED,
                     "'%s' declares the distance '%s'; simil searches with euclidean (l2), "
                     "angular (cosine) and inner product",
                     path, text);
}

static void sml_convert_to_float(const simil_matrix *m, float *dst)
{
    size_t n = (size_t)m->rows * (size_t)m->cols;
    switch (m->dtype) {
    case SIMIL_DTYPE_FLOAT32: memcpy(dst, m->data, n * sizeof *dst); break;
    case SIMIL_DTYPE_UINT8:
        for (size_t i = 0; i < n; i++) dst[i] = (float)((const uint8_t *)m->data)[i];
        break;
    case SIMIL_DTYPE_INT32:
        for (size_t i = 0; i < n; i++) dst[i] = (float)((const int32_t *)m->data)[i];
        break;
    case SIMIL_DTYPE_INT64:
        for (size_t i = 0; i < n; i++) dst[i] = (float)((const int64_t *)m->data)[i];
        break;
    }
}

simil_status simil_matrix_read_float(const char *path, int64_t first, int64_t count,
                                     simil_matrix *out)
{
    SML_RETURN_IF(out == NULL, SIMIL_ERR_INVALID_ARGUMENT, "no output matrix given");
    memset(out, 0, sizeof *out);
    simil_matrix raw;
    SML_TRY(simil_matrix_read(path, first, count, &raw));
    if (raw.dtype == SIMIL_DTYPE_FLOAT32) {
        *out = raw;
        return SIMIL_OK;
    }
    simil_status s = sml_dataset_alloc(out, raw.rows, raw.cols, SIMIL_DTYPE_FLOAT32);
    if (s == SIMIL_OK) sml_convert_to_float(&raw, out->data);
    simil_matrix_free(&raw);
    return s;
}

static simil_status sml_check_matrix(const char *path, const simil_matrix *m)
{
    SML_RETURN_IF(m == NULL, SIMIL_ERR_INVALID_ARGUMENT, "no matrix given to write to '%s'", path);
    SML_RETURN_IF(simil_dtype_size(m->dtype) == 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "matrix for '%s' has an unknown dtype %d", path, (int)m->dtype);
    SML_RETURN_IF(m->rows < 0 || m->cols < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "matrix for '%s' has a negative shape %" PRId64 " x %" PRId64, path, m->rows,
                  m->cols);
    size_t bytes = 0;
    if (sml_dataset_bytes(path, m->rows, m->cols, simil_dtype_size(m->dtype), &bytes) != SIMIL_OK)
        return sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                         "matrix for '%s' of %" PRId64 " x %" PRId64 " is too large", path, m->rows,
                         m->cols);
    SML_RETURN_IF(bytes > 0 && m->data == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "matrix for '%s' has no data", path);
    return SIMIL_OK;
}

simil_status simil_matrix_write(const char *path, const simil_matrix *m)
{
    SML_RETURN_IF(path == NULL || path[0] == '\0', SIMIL_ERR_INVALID_ARGUMENT,
                  "no output file name given");
    SML_TRY(sml_check_matrix(path, m));
    sml_format f = sml_dataset_format(path);
    switch (f) {
    case SML_FORMAT_FVECS:
    case SML_FORMAT_BVECS:
    case SML_FORMAT_IVECS: return sml_texmex_write(path, sml_texmex_dtype(f), m);
    case SML_FORMAT_NPY: return sml_npy_write(path, m);
    case SML_FORMAT_IDX:
    case SML_FORMAT_HDF5:
        return sml_error(SIMIL_ERR_UNSUPPORTED,
                         "simil does not write %s files ('%s'); write .npy, .fvecs, .ivecs or "
                         ".bvecs instead",
                         f == SML_FORMAT_IDX ? "idx" : "HDF5", path);
    case SML_FORMAT_UNKNOWN: break;
    }
    return sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                     "cannot tell the format of '%s' from its name; simil writes .fvecs, "
                     ".bvecs, .ivecs and .npy",
                     path);
}
