/* dataset_npy.c: numpy .npy files.
 *
 * Layout: "\x93NUMPY", major and minor version, the header length (uint16 in
 * 1.0, uint32 in 2.0 and 3.0), then a Python dict literal such as
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * and the raw array.  The header is parsed by a small recursive-descent
 * reader that accepts exactly this dict (keys in any order, either quote
 * style, Python 2's "3L" integers) and nothing else.  float64 data is
 * converted to float32 a chunk at a time as it is read. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/dataset_formats.h"
#include "core/error.h"
#include "core/file_io.h"

enum { SML_NPY_MAX_HEADER = 1 << 20, SML_NPY_CHUNK = 1 << 20 };

static const char sml_npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

typedef struct sml_npy {
    sml_reader r;
    int64_t rows, cols;
    simil_dtype dtype; /* as returned: float64 files give float32 */
    size_t file_esize; /* element size in the file */
    int from_f64;
    uint64_t data_offset;
} sml_npy;

/* The header text and a cursor into it. */
typedef struct sml_npy_text {
    const char *p, *end;
    char descr[16];
    int fortran;
    int ndim;
    int64_t shape[2];
    unsigned seen; /* bit 0 descr, 1 fortran_order, 2 shape */
} sml_npy_text;

static void sml_npy_skip_space(sml_npy_text *t)
{
    while (t->p < t->end && (*t->p == ' ' || *t->p == '\t' || *t->p == '\n' || *t->p == '\r'))
        t->p++;
}

static int sml_npy_take(sml_npy_text *t, char c)
{
    sml_npy_skip_space(t);
    if (t->p < t->end && *t->p == c) {
        t->p++;
        return 1;
    }
    return 0;
}

static int sml_npy_take_word(sml_npy_text *t, const char *word)
{
    size_t n = strlen(word);
    sml_npy_skip_space(t);
    if ((size_t)(t->end - t->p) < n || memcmp(t->p, word, n) != 0) return 0;
    t->p += n;
    return 1;
}

/* A quoted string without escapes into out (cap bytes with the NUL). */
static const char *sml_npy_string(sml_npy_text *t, char *out, size_t cap)
{
    sml_npy_skip_space(t);
    if (t->p >= t->end || (*t->p != '\'' && *t->p != '"')) return "expected a quoted string";
    char quote = *t->p++;
    size_t n = 0;
    while (t->p < t->end && *t->p != quote) {
        if (*t->p == '\\' || n + 1 >= cap) return "unexpected string";
        out[n++] = *t->p++;
    }
    if (t->p >= t->end) return "unterminated string";
    t->p++;
    out[n] = '\0';
    return NULL;
}

static const char *sml_npy_int(sml_npy_text *t, int64_t *value)
{
    sml_npy_skip_space(t);
    if (t->p >= t->end || *t->p < '0' || *t->p > '9') return "expected a non-negative integer";
    uint64_t v = 0;
    while (t->p < t->end && *t->p >= '0' && *t->p <= '9') {
        unsigned digit = (unsigned)(*t->p++ - '0');
        if (v > ((uint64_t)INT64_MAX - digit) / 10) return "a dimension is too large";
        v = v * 10 + digit;
    }
    if (t->p < t->end && *t->p == 'L') t->p++;
    *value = (int64_t)v;
    return NULL;
}

static const char *sml_npy_shape(sml_npy_text *t)
{
    if (!sml_npy_take(t, '(')) return "'shape' is not a tuple";
    t->ndim = 0;
    while (!sml_npy_take(t, ')')) {
        int64_t v;
        const char *err = sml_npy_int(t, &v);
        if (err != NULL) return err;
        if (t->ndim < 2) t->shape[t->ndim] = v;
        if (t->ndim < 3) t->ndim++;
        if (!sml_npy_take(t, ',')) {
            if (!sml_npy_take(t, ')')) return "bad 'shape' tuple";
            break;
        }
    }
    return NULL;
}

static const char *sml_npy_value(sml_npy_text *t, const char *key)
{
    unsigned bit = strcmp(key, "descr") == 0           ? 1u
                   : strcmp(key, "fortran_order") == 0 ? 2u
                   : strcmp(key, "shape") == 0         ? 4u
                                                       : 0u;
    if (bit == 0) return "unexpected key";
    if (t->seen & bit) return "repeated key";
    t->seen |= bit;
    if (bit == 1) return sml_npy_string(t, t->descr, sizeof t->descr);
    if (bit == 4) return sml_npy_shape(t);
    if (sml_npy_take_word(t, "True"))
        t->fortran = 1;
    else if (sml_npy_take_word(t, "False"))
        t->fortran = 0;
    else
        return "'fortran_order' is not True or False";
    return NULL;
}

static const char *sml_npy_dict(sml_npy_text *t)
{
    if (!sml_npy_take(t, '{')) return "it does not start with '{'";
    while (!sml_npy_take(t, '}')) {
        char key[32];
        const char *err = sml_npy_string(t, key, sizeof key);
        if (err != NULL) return err;
        if (!sml_npy_take(t, ':')) return "expected ':'";
        if ((err = sml_npy_value(t, key)) != NULL) return err;
        if (!sml_npy_take(t, ',')) {
            if (!sml_npy_take(t, '}')) return "expected ',' or '}'";
            break;
        }
    }
    sml_npy_skip_space(t);
    if (t->p != t->end) return "unexpected text after the dict";
    if (t->seen != 7) return "a key is missing (it needs 'descr', 'fortran_order' and 'shape')";
    return NULL;
}

static simil_status sml_npy_bad_header(const sml_npy *f, const char *why, const char *text,
                                       size_t len)
{
    char shown[81];
    size_t n = len < sizeof shown - 1 ? len : sizeof shown - 1;
    for (size_t i = 0; i < n; i++) shown[i] = (text[i] >= 32 && text[i] < 127) ? text[i] : '?';
    shown[n] = '\0';
    return sml_error(SIMIL_ERR_CORRUPT, "'%s': npy header is not valid: %s (header: %s%s)",
                     f->r.path, why, shown, len > n ? "..." : "");
}

/* descr to dtype; SIMIL_ERR_CORRUPT with a reason for what simil does not read. */
static simil_status sml_npy_dtype(sml_npy *f, const char *descr)
{
    static const struct {
        const char *descr;
        simil_dtype dtype;
        size_t esize;
    } known[] = {{"<f4", SIMIL_DTYPE_FLOAT32, 4}, {"<f8", SIMIL_DTYPE_FLOAT32, 8},
                 {"|u1", SIMIL_DTYPE_UINT8, 1},   {"<u1", SIMIL_DTYPE_UINT8, 1},
                 {">u1", SIMIL_DTYPE_UINT8, 1},   {"<i4", SIMIL_DTYPE_INT32, 4},
                 {"<i8", SIMIL_DTYPE_INT64, 8}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (strcmp(descr, known[i].descr) != 0) continue;
        f->dtype = known[i].dtype;
        f->file_esize = known[i].esize;
        f->from_f64 = known[i].esize == 8 && known[i].dtype == SIMIL_DTYPE_FLOAT32;
        return SIMIL_OK;
    }
    SML_RETURN_IF(descr[0] == '>', SIMIL_ERR_CORRUPT,
                  "'%s' holds big-endian data ('%s'), which simil does not read; save it "
                  "little-endian (arr.astype(arr.dtype.newbyteorder('<')))",
                  f->r.path, descr);
    return sml_error(SIMIL_ERR_CORRUPT,
                     "'%s' holds dtype '%s', which simil does not read; it reads <f4, <f8 (as "
                     "float32), |u1, <i4 and <i8",
                     f->r.path, descr);
}

/* Fill f's shape and types from the parsed dict. */
static simil_status sml_npy_apply(sml_npy *f, const sml_npy_text *t)
{
    SML_TRY(sml_npy_dtype(f, t->descr));
    SML_RETURN_IF(t->ndim < 1 || t->ndim > 2, SIMIL_ERR_CORRUPT,
                  "'%s' holds a %s-dimensional array; simil reads 1-d and 2-d arrays", f->r.path,
                  t->ndim == 0 ? "0" : "3 or more");
    f->rows = t->ndim == 1 ? 1 : t->shape[0];
    f->cols = t->ndim == 1 ? t->shape[0] : t->shape[1];
    SML_RETURN_IF(t->fortran && f->rows > 1 && f->cols > 1, SIMIL_ERR_CORRUPT,
                  "'%s' is stored in Fortran order, which simil does not read; save "
                  "np.ascontiguousarray(arr) instead",
                  f->r.path);
    return SIMIL_OK;
}

static simil_status sml_npy_header(sml_npy *f, uint32_t len)
{
    char *text;
    SML_TRY(sml_alloc((void **)&text, len + 1, 1, "an npy header"));
    simil_status s = sml_reader_read(&f->r, text, len);
    if (s == SIMIL_OK) {
        sml_npy_text t = {.p = text, .end = text + len};
        const char *err = sml_npy_dict(&t);
        s = err != NULL ? sml_npy_bad_header(f, err, text, len) : sml_npy_apply(f, &t);
    }
    sml_free(text);
    return s;
}

/* Magic, version and header length. */
static simil_status sml_npy_prefix(sml_npy *f, uint32_t *len)
{
    unsigned char pre[8];
    SML_RETURN_IF(f->r.size < sizeof pre, SIMIL_ERR_CORRUPT,
                  "'%s' is not an npy file: it has only %llu bytes", f->r.path,
                  (unsigned long long)f->r.size);
    SML_TRY(sml_reader_read(&f->r, pre, sizeof pre));
    SML_RETURN_IF(memcmp(pre, sml_npy_magic, 6) != 0, SIMIL_ERR_CORRUPT,
                  "'%s' is not an npy file: it does not start with \\x93NUMPY", f->r.path);
    SML_RETURN_IF(pre[6] < 1 || pre[6] > 3, SIMIL_ERR_CORRUPT,
                  "'%s' has npy format version %d.%d; simil reads 1.0, 2.0 and 3.0", f->r.path,
                  pre[6], pre[7]);
    unsigned char raw[4] = {0};
    SML_TRY(sml_reader_read(&f->r, raw, pre[6] == 1 ? 2 : 4));
    *len =
        (uint32_t)raw[0] | (uint32_t)raw[1] << 8 | (uint32_t)raw[2] << 16 | (uint32_t)raw[3] << 24;
    uint64_t remain = f->r.size - f->r.offset;
    SML_RETURN_IF(*len > remain, SIMIL_ERR_CORRUPT,
                  "'%s' is truncated: the npy header needs %u bytes, %llu remain", f->r.path,
                  (unsigned)*len, (unsigned long long)remain);
    SML_RETURN_IF(*len > SML_NPY_MAX_HEADER, SIMIL_ERR_CORRUPT,
                  "'%s': npy header is not valid: it claims %u bytes", f->r.path, (unsigned)*len);
    return SIMIL_OK;
}

static simil_status sml_npy_parse(sml_npy *f)
{
    uint32_t len = 0;
    SML_TRY(sml_npy_prefix(f, &len));
    SML_TRY(sml_npy_header(f, len));
    f->data_offset = f->r.offset;
    size_t bytes;
    SML_TRY(sml_dataset_bytes(f->r.path, f->rows, f->cols, f->file_esize, &bytes));
    uint64_t remain = f->r.size - f->data_offset;
    SML_RETURN_IF(bytes > remain, SIMIL_ERR_CORRUPT,
                  "'%s' is truncated: its shape (%" PRId64 ", %" PRId64 ") needs %zu bytes of "
                  "data, %llu remain",
                  f->r.path, f->rows, f->cols, bytes, (unsigned long long)remain);
    SML_RETURN_IF(bytes < remain, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: %llu bytes follow the %zu bytes of data its shape needs",
                  f->r.path, (unsigned long long)(remain - bytes), bytes);
    return SIMIL_OK;
}

static simil_status sml_npy_open(sml_npy *f, const char *path)
{
    memset(f, 0, sizeof *f);
    SML_TRY(sml_reader_open(&f->r, path));
    simil_status s = sml_npy_parse(f);
    if (s != SIMIL_OK) sml_reader_close(&f->r);
    return s;
}

simil_status sml_npy_info(const char *path, int64_t *rows, int64_t *cols, simil_dtype *dtype)
{
    sml_npy f;
    SML_TRY(sml_npy_open(&f, path));
    sml_reader_close(&f.r);
    *rows = f.rows;
    *cols = f.cols;
    *dtype = f.dtype;
    return SIMIL_OK;
}

static simil_status sml_npy_read_f64(sml_npy *f, size_t n, float *dst)
{
    double *chunk;
    size_t per = n < SML_NPY_CHUNK ? n : SML_NPY_CHUNK;
    SML_TRY(sml_alloc((void **)&chunk, per, sizeof *chunk, "an npy read buffer"));
    simil_status s = SIMIL_OK;
    for (size_t done = 0; s == SIMIL_OK && done < n; done += per) {
        size_t k = n - done < per ? n - done : per;
        s = sml_reader_read(&f->r, chunk, k * sizeof *chunk);
        for (size_t i = 0; s == SIMIL_OK && i < k; i++) dst[done + i] = (float)chunk[i];
    }
    sml_free(chunk);
    return s;
}

simil_status sml_npy_read(const char *path, int64_t first, int64_t count, simil_matrix *out)
{
    sml_npy f;
    SML_TRY(sml_npy_open(&f, path));
    simil_status s = sml_dataset_range(path, f.rows, first, &count);
    if (s == SIMIL_OK) s = sml_dataset_alloc(out, count, f.cols, f.dtype);
    size_t n = (size_t)count * (size_t)f.cols;
    uint64_t row_bytes = (uint64_t)f.cols * f.file_esize;
    if (s == SIMIL_OK && n > 0)
        s = sml_reader_seek(&f.r, f.data_offset + (uint64_t)first * row_bytes);
    if (s == SIMIL_OK && n > 0)
        s = f.from_f64 ? sml_npy_read_f64(&f, n, out->data)
                       : sml_reader_read(&f.r, out->data, n * f.file_esize);
    if (s != SIMIL_OK) simil_matrix_free(out);
    sml_reader_close(&f.r);
    return s;
}

static const char *sml_npy_descr(simil_dtype dtype)
{
    switch (dtype) {
    case SIMIL_DTYPE_FLOAT32: return "<f4";
    case SIMIL_DTYPE_UINT8: return "|u1";
    case SIMIL_DTYPE_INT32: return "<i4";
    case SIMIL_DTYPE_INT64: return "<i8";
    }
    return "";
}

/* A version 1.0 header padded with spaces and a final newline so that the data
 * starts at a multiple of 64 bytes, as numpy writes it. */
static size_t sml_npy_make_header(const simil_matrix *m, char out[256])
{
    char dict[192];
    int n =
        snprintf(dict, sizeof dict,
                 "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRId64 ", %" PRId64 "), }",
                 sml_npy_descr(m->dtype), m->rows, m->cols);
    size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
    size_t len = total - 10;
    memcpy(out, sml_npy_magic, 6);
    out[6] = 1;
    out[7] = 0;
    out[8] = (char)(len & 0xff);
    out[9] = (char)(len >> 8);
    memcpy(out + 10, dict, (size_t)n);
    memset(out + 10 + n, ' ', len - (size_t)n - 1);
    out[total - 1] = '\n';
    return total;
}

simil_status sml_npy_write(const char *path, const simil_matrix *m)
{
    char header[256];
    size_t header_bytes = sml_npy_make_header(m, header);
    size_t data_bytes = (size_t)m->rows * (size_t)m->cols * simil_dtype_size(m->dtype);
    sml_writer *w;
    SML_TRY(sml_writer_open(&w, path));
    simil_status s = sml_writer_write(w, header, header_bytes);
    if (s == SIMIL_OK) s = sml_writer_write(w, m->data, data_bytes);
    if (s != SIMIL_OK) {
        sml_writer_abort(w);
        return s;
    }
    return sml_writer_commit(w);
}
