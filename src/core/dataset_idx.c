/* dataset_idx.c: MNIST / Fashion-MNIST idx files, gzipped or plain.
 *
 * Layout: two zero bytes, a type byte (0x08 = unsigned byte, the only one
 * simil reads), the number of dimensions, each dimension as a big-endian
 * uint32, then the data.  The first dimension is the row count; the others
 * are flattened into columns (28 x 28 images become 784-column rows, idx1
 * labels one column).
 *
 * zlib's gz* functions read plain files as well.  A plain file's size is
 * checked against its header up front.  A gzipped one cannot be, so its
 * buffer grows with the data actually decompressed, up to what the header
 * claims: a corrupt header fails with "truncated" instead of allocating
 * what it claims. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "core/alloc.h"
#include "core/dataset_formats.h"
#include "core/error.h"

enum { SML_IDX_MAX_DIMS = 8, SML_IDX_FIRST_BUFFER = 16 << 20, SML_IDX_SKIP_BUFFER = 1 << 16 };

typedef struct sml_idx {
    gzFile gz;
    const char *path;
    int64_t rows, cols;
    uint64_t data_read; /* bytes of data consumed so far */
} sml_idx;

static simil_status sml_idx_gz_error(const sml_idx *f)
{
    int code;
    const char *msg = gzerror(f->gz, &code);
    if (code == Z_ERRNO)
        return sml_error(SIMIL_ERR_IO, "cannot read '%s': %s", f->path, strerror(errno));
    if (code == Z_MEM_ERROR)
        return sml_error(SIMIL_ERR_OUT_OF_MEMORY, "zlib ran out of memory reading '%s'", f->path);
    return sml_error(SIMIL_ERR_CORRUPT, "'%s' is damaged or truncated (zlib: %s)", f->path, msg);
}

/* Read up to bytes; *got < bytes only at the end of the data. */
static simil_status sml_idx_read_some(sml_idx *f, void *data, size_t bytes, size_t *got)
{
    *got = 0;
    while (*got < bytes) {
        size_t want = bytes - *got < (1u << 30) ? bytes - *got : (1u << 30);
        int n = gzread(f->gz, (char *)data + *got, (unsigned)want);
        if (n < 0) return sml_idx_gz_error(f);
        if (n == 0) {
            int code;
            gzerror(f->gz, &code);
            return code == Z_OK ? SIMIL_OK : sml_idx_gz_error(f);
        }
        *got += (size_t)n;
    }
    return SIMIL_OK;
}

static simil_status sml_idx_truncated(const sml_idx *f)
{
    return sml_error(SIMIL_ERR_CORRUPT,
                     "'%s' is truncated: the header claims %" PRId64 " rows of %" PRId64
                     " bytes, the data ends in row %" PRId64,
                     f->path, f->rows, f->cols,
                     f->cols ? (int64_t)(f->data_read / (uint64_t)f->cols) : 0);
}

static simil_status sml_idx_read_data(sml_idx *f, void *data, size_t bytes)
{
    size_t got;
    SML_TRY(sml_idx_read_some(f, data, bytes, &got));
    f->data_read += got;
    if (got < bytes) return sml_idx_truncated(f);
    return SIMIL_OK;
}

static simil_status sml_idx_read_header(sml_idx *f, unsigned char *head, size_t bytes)
{
    size_t got;
    SML_TRY(sml_idx_read_some(f, head, bytes, &got));
    SML_RETURN_IF(got < bytes, SIMIL_ERR_CORRUPT, "'%s' is truncated: its idx header is cut short",
                  f->path);
    return SIMIL_OK;
}

static const char *sml_idx_type_name(unsigned type)
{
    switch (type) {
    case 0x09: return "signed bytes";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    }
    return NULL;
}

/* Magic, dimensions, shape; for a plain file also the size. */
static simil_status sml_idx_parse(sml_idx *f)
{
    unsigned char head[4], dims[4 * SML_IDX_MAX_DIMS];
    SML_TRY(sml_idx_read_header(f, head, 4));
    const char *other = sml_idx_type_name(head[2]);
    SML_RETURN_IF(head[0] == 0 && head[1] == 0 && other != NULL, SIMIL_ERR_CORRUPT,
                  "'%s' holds idx %s; simil reads only unsigned bytes (type 0x08)", f->path, other);
    SML_RETURN_IF(head[0] != 0 || head[1] != 0 || head[2] != 0x08 || head[3] == 0 ||
                      head[3] > SML_IDX_MAX_DIMS,
                  SIMIL_ERR_CORRUPT, "'%s' is not an idx file: bad magic %02x %02x %02x %02x",
                  f->path, head[0], head[1], head[2], head[3]);
    int ndim = head[3];
    SML_TRY(sml_idx_read_header(f, dims, 4 * (size_t)ndim));
    uint64_t shape[SML_IDX_MAX_DIMS];
    for (int i = 0; i < ndim; i++)
        shape[i] = (uint64_t)dims[4 * i] << 24 | (uint64_t)dims[4 * i + 1] << 16 |
                   (uint64_t)dims[4 * i + 2] << 8 | dims[4 * i + 3];
    uint64_t cols = 1;
    for (int i = 1; i < ndim; i++) {
        SML_RETURN_IF(shape[i] != 0 && cols > (uint64_t)INT64_MAX / shape[i], SIMIL_ERR_CORRUPT,
                      "'%s' claims rows of more than 2^63 bytes", f->path);
        cols *= shape[i];
    }
    f->rows = (int64_t)shape[0];
    f->cols = (int64_t)cols;
    size_t bytes;
    SML_TRY(sml_dataset_bytes(f->path, f->rows, f->cols, 1, &bytes));
    if (!gzdirect(f->gz)) return SIMIL_OK;
    struct stat st;
    SML_RETURN_IF(stat(f->path, &st) != 0, SIMIL_ERR_IO, "cannot stat '%s': %s", f->path,
                  strerror(errno));
    uint64_t remain = (uint64_t)st.st_size - 4 - 4 * (uint64_t)ndim;
    SML_RETURN_IF(bytes > remain, SIMIL_ERR_CORRUPT,
                  "'%s' is truncated: the header claims %" PRId64 " rows of %" PRId64
                  " bytes, %llu bytes of data remain",
                  f->path, f->rows, f->cols, (unsigned long long)remain);
    SML_RETURN_IF(bytes < remain, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: %llu bytes follow the data its header claims", f->path,
                  (unsigned long long)(remain - bytes));
    return SIMIL_OK;
}

static simil_status sml_idx_open(sml_idx *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->path = path;
    errno = 0;
    f->gz = gzopen(path, "rb");
    if (f->gz == NULL)
        return sml_error(errno == 0 ? SIMIL_ERR_OUT_OF_MEMORY : SIMIL_ERR_IO,
                         "cannot open '%s': %s", path,
                         errno == 0 ? "out of memory" : strerror(errno));
    gzbuffer(f->gz, 1 << 18);
    simil_status s = sml_idx_parse(f);
    if (s != SIMIL_OK) {
        gzclose(f->gz);
        f->gz = NULL;
    }
    return s;
}

simil_status sml_idx_info(const char *path, int64_t *rows, int64_t *cols, simil_dtype *dtype)
{
    sml_idx f;
    SML_TRY(sml_idx_open(&f, path));
    gzclose(f.gz);
    *rows = f.rows;
    *cols = f.cols;
    *dtype = SIMIL_DTYPE_UINT8;
    return SIMIL_OK;
}

/* Decompress and drop bytes of data. */
static simil_status sml_idx_skip(sml_idx *f, size_t bytes)
{
    if (bytes == 0) return SIMIL_OK;
    char *scratch;
    SML_TRY(sml_alloc((void **)&scratch, SML_IDX_SKIP_BUFFER, 1, "an idx read buffer"));
    simil_status s = SIMIL_OK;
    while (s == SIMIL_OK && bytes > 0) {
        size_t n = bytes < SML_IDX_SKIP_BUFFER ? bytes : SML_IDX_SKIP_BUFFER;
        s = sml_idx_read_data(f, scratch, n);
        bytes -= n;
    }
    sml_free(scratch);
    return s;
}

/* Read bytes of data into a buffer that grows as the data arrives. */
static simil_status sml_idx_fill(sml_idx *f, size_t bytes, void **out)
{
    size_t cap = gzdirect(f->gz) || bytes < SML_IDX_FIRST_BUFFER ? bytes : SML_IDX_FIRST_BUFFER;
    void *buf;
    SML_TRY(sml_alloc(&buf, cap, 1, "an idx matrix"));
    size_t have = 0;
    simil_status s = SIMIL_OK;
    while (s == SIMIL_OK && have < bytes) {
        if (have == cap) {
            cap = cap > bytes / 2 ? bytes : 2 * cap;
            s = sml_grow(&buf, have, cap, "an idx matrix");
            if (s != SIMIL_OK) break;
        }
        s = sml_idx_read_data(f, (char *)buf + have, cap - have);
        have = cap;
    }
    if (s != SIMIL_OK) {
        sml_free(buf);
        buf = NULL;
    }
    *out = buf;
    return s;
}

/* After the last row: the stream must end here, with a good checksum. */
static simil_status sml_idx_check_end(sml_idx *f)
{
    char extra;
    size_t got;
    SML_TRY(sml_idx_read_some(f, &extra, 1, &got));
    SML_RETURN_IF(got != 0, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: more data follows the %" PRId64 " rows its header claims",
                  f->path, f->rows);
    return SIMIL_OK;
}

simil_status sml_idx_read(const char *path, int64_t first, int64_t count, simil_matrix *out)
{
    sml_idx f;
    SML_TRY(sml_idx_open(&f, path));
    simil_status s = sml_dataset_range(path, f.rows, first, &count);
    if (s == SIMIL_OK) s = sml_idx_skip(&f, (size_t)first * (size_t)f.cols);
    if (s == SIMIL_OK) s = sml_idx_fill(&f, (size_t)count * (size_t)f.cols, &out->data);
    if (s == SIMIL_OK && first + count == f.rows) s = sml_idx_check_end(&f);
    if (s == SIMIL_OK) {
        out->rows = count;
        out->cols = f.cols;
        out->dtype = SIMIL_DTYPE_UINT8;
    } else {
        simil_matrix_free(out);
    }
    gzclose(f.gz);
    return s;
}
