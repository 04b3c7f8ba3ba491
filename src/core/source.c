/* source.c: sources of rows (simil/stream.h): vector files read by row
 * ranges, the generators of docs/datasets.md, caller memory and caller
 * functions.  A source is a description, not an open file: each read opens
 * what it reads, so that reads from several threads need no lock. */
#include "core/source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/synthetic.h"
#include "core/vectors.h"
#include "simil/dataset.h"

typedef enum sml_source_kind {
    SML_SOURCE_FILE,
    SML_SOURCE_GEN,
    SML_SOURCE_MEMORY,
    SML_SOURCE_CALLBACK
} sml_source_kind;

struct simil_source {
    sml_source_kind kind;
    int64_t rows, dim;
    int64_t offset;        /* row `offset` of the underlying data is row 0 */
    char *name;            /* the spec, or a description */
    char *path;            /* file */
    char gen_kind[16];     /* generator */
    uint64_t seed;
    const float *x;        /* memory */
    simil_source_fn fn;    /* callback */
    void *user;
};

static simil_status sml_source_new(simil_source **out, sml_source_kind kind, int64_t rows,
                                   int64_t dim, const char *name)
{
    *out = NULL;
    simil_source *s;
    SML_TRY(sml_calloc((void **)&s, 1, sizeof *s, "a source"));
    s->kind = kind;
    s->rows = rows;
    s->dim = dim;
    simil_status st = sml_strdup(&s->name, name);
    if (st != SIMIL_OK) {
        sml_free(s);
        return st;
    }
    *out = s;
    return SIMIL_OK;
}

void simil_source_close(simil_source *source)
{
    if (source == NULL) return;
    sml_free(source->name);
    sml_free(source->path);
    sml_free(source);
}

/* A whole decimal number in [min, max] from text up to the next ':' or the
 * end; *end gets where it stopped. */
static int sml_source_number(const char *text, int64_t min, int64_t max, int64_t *out,
                             const char **end)
{
    char *stop;
    if (text[0] < '0' || text[0] > '9') return 0;
    unsigned long long v = strtoull(text, &stop, 10);
    if ((*stop != ':' && *stop != '\0') || v < (unsigned long long)min ||
        v > (unsigned long long)max)
        return 0;
    *out = (int64_t)v;
    *end = stop;
    return 1;
}

/* "gen:KIND:ROWS:DIM:SEED" */
static simil_status sml_source_open_gen(simil_source **out, const char *spec)
{
    const char *kind = spec + 4, *colon = strchr(kind, ':');
    int64_t rows = 0, dim = 0, seed = 0;
    const char *at = colon ? colon + 1 : NULL;
    char name[16] = "";
    int ok = colon != NULL && (size_t)(colon - kind) < sizeof name;
    if (ok) {
        memcpy(name, kind, (size_t)(colon - kind));
        name[colon - kind] = '\0';
    }
    ok = ok && sml_source_number(at, 0, INT64_MAX, &rows, &at) && *at == ':';
    ok = ok && sml_source_number(at + 1, 1, (int64_t)1 << 24, &dim, &at) && *at == ':';
    ok = ok && sml_source_number(at + 1, 0, INT64_MAX, &seed, &at) && *at == '\0';
    SML_RETURN_IF(!ok, SIMIL_ERR_INVALID_ARGUMENT,
                  "'%s' is not a generator source; write gen:KIND:ROWS:DIM:SEED, e.g. "
                  "gen:mix:1000000000:96:11",
                  spec);
    SML_RETURN_IF(sml_gen_kind(name) < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "'%s': unknown generator \"%s\"; the kinds are \"uniform\" and \"mix\"", spec,
                  name);
    SML_TRY(sml_source_new(out, SML_SOURCE_GEN, rows, dim, spec));
    snprintf((*out)->gen_kind, sizeof (*out)->gen_kind, "%s", name);
    (*out)->seed = (uint64_t)seed;
    return SIMIL_OK;
}

simil_status simil_source_open(simil_source **out, const char *spec)
{
    SML_RETURN_IF(out == NULL, SIMIL_ERR_INVALID_ARGUMENT, "source pointer is NULL");
    *out = NULL;
    SML_RETURN_IF(spec == NULL || spec[0] == '\0', SIMIL_ERR_INVALID_ARGUMENT,
                  "no source given: name a vector file or gen:KIND:ROWS:DIM:SEED");
    if (strncmp(spec, "gen:", 4) == 0) return sml_source_open_gen(out, spec);
    int64_t rows, cols;
    SML_TRY(simil_matrix_info(spec, &rows, &cols, NULL));
    SML_RETURN_IF(rows > 0 && cols < 1, SIMIL_ERR_INVALID_ARGUMENT,
                  "'%s' holds rows of %" PRId64 " values; a source needs at least one", spec,
                  cols);
    SML_TRY(sml_source_new(out, SML_SOURCE_FILE, rows, cols, spec));
    simil_status s = sml_strdup(&(*out)->path, spec);
    if (s != SIMIL_OK) {
        simil_source_close(*out);
        *out = NULL;
    }
    return s;
}

static simil_status sml_source_check_shape(int64_t rows, int64_t dim)
{
    SML_RETURN_IF(rows < 0 || dim < 1 || dim > ((int64_t)1 << 24), SIMIL_ERR_INVALID_ARGUMENT,
                  "a source of %" PRId64 " rows of dimension %" PRId64
                  ": rows must be >= 0 and the dimension in [1, 2^24]",
                  rows, dim);
    return SIMIL_OK;
}

simil_status simil_source_from_memory(simil_source **out, int64_t rows, int64_t dim,
                                      const float *x)
{
    SML_RETURN_IF(out == NULL, SIMIL_ERR_INVALID_ARGUMENT, "source pointer is NULL");
    *out = NULL;
    SML_TRY(sml_source_check_shape(rows, dim));
    SML_RETURN_IF(x == NULL && rows > 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "a memory source of %" PRId64 " rows needs their address", rows);
    SML_TRY(sml_source_new(out, SML_SOURCE_MEMORY, rows, dim, "rows in memory"));
    (*out)->x = x;
    return SIMIL_OK;
}

simil_status simil_source_from_callback(simil_source **out, int64_t rows, int64_t dim,
                                        simil_source_fn fn, void *user)
{
    SML_RETURN_IF(out == NULL, SIMIL_ERR_INVALID_ARGUMENT, "source pointer is NULL");
    *out = NULL;
    SML_TRY(sml_source_check_shape(rows, dim));
    SML_RETURN_IF(fn == NULL, SIMIL_ERR_INVALID_ARGUMENT, "a callback source needs a function");
    SML_TRY(sml_source_new(out, SML_SOURCE_CALLBACK, rows, dim, "rows from a callback"));
    (*out)->fn = fn;
    (*out)->user = user;
    return SIMIL_OK;
}

simil_status simil_source_slice(simil_source **out, const simil_source *source, int64_t first,
                                int64_t n)
{
    SML_RETURN_IF(out == NULL || source == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "simil_source_slice: NULL argument");
    *out = NULL;
    SML_RETURN_IF(first < 0 || first > source->rows, SIMIL_ERR_INVALID_ARGUMENT,
                  "slice from row %" PRId64 " of '%s', which has %" PRId64 " rows", first,
                  source->name, source->rows);
    if (n < 0) n = source->rows - first;
    SML_RETURN_IF(n > source->rows - first, SIMIL_ERR_INVALID_ARGUMENT,
                  "slice of rows [%" PRId64 ", %" PRId64 " + %" PRId64 ") of '%s', which has %" PRId64
                  " rows",
                  first, first, n, source->name, source->rows);
    simil_source *s;
    SML_TRY(sml_source_new(&s, source->kind, n, source->dim, source->name));
    s->offset = source->offset + first;
    snprintf(s->gen_kind, sizeof s->gen_kind, "%s", source->gen_kind);
    s->seed = source->seed;
    s->x = source->x;
    s->fn = source->fn;
    s->user = source->user;
    simil_status st = source->path ? sml_strdup(&s->path, source->path) : SIMIL_OK;
    if (st != SIMIL_OK) {
        simil_source_close(s);
        return st;
    }
    *out = s;
    return SIMIL_OK;
}

int64_t simil_source_rows(const simil_source *source) { return source ? source->rows : 0; }
int64_t simil_source_dim(const simil_source *source) { return source ? source->dim : 0; }
const char *simil_source_name(const simil_source *source) { return source ? source->name : ""; }

static simil_status sml_source_read_file(const simil_source *s, int64_t first, int64_t n,
                                         float *out)
{
    simil_matrix m;
    SML_TRY(simil_matrix_read_float(s->path, s->offset + first, n, &m));
    simil_status st = SIMIL_OK;
    if (m.rows != n || m.cols != s->dim)
        st = sml_error(SIMIL_ERR_CORRUPT,
                       "'%s' changed while it was read: rows of %" PRId64 " values, %" PRId64
                       " expected",
                       s->path, m.cols, s->dim);
    else
        sml_copy_parallel(out, m.data, sizeof(float) * (size_t)(n * s->dim));
    simil_matrix_free(&m);
    return st;
}

simil_status simil_source_read(const simil_source *s, int64_t first, int64_t n, float *out)
{
    SML_RETURN_IF(s == NULL, SIMIL_ERR_INVALID_ARGUMENT, "simil_source_read: source is NULL");
    SML_RETURN_IF(first < 0 || n < 0 || first > s->rows || n > s->rows - first,
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "rows [%" PRId64 ", %" PRId64 " + %" PRId64 ") are out of range: '%s' has %" PRId64
                  " rows",
                  first, first, n, s->name, s->rows);
    if (n == 0) return SIMIL_OK;
    SML_RETURN_IF(out == NULL, SIMIL_ERR_INVALID_ARGUMENT, "simil_source_read: out is NULL");
    switch (s->kind) {
    case SML_SOURCE_FILE: return sml_source_read_file(s, first, n, out);
    case SML_SOURCE_GEN:
        return simil_generate(s->gen_kind, s->offset + first, n, s->dim, s->seed, out);
    case SML_SOURCE_MEMORY:
        sml_copy_parallel(out, s->x + (s->offset + first) * s->dim,
                          sizeof(float) * (size_t)(n * s->dim));
        return SIMIL_OK;
    case SML_SOURCE_CALLBACK: {
        simil_status st = s->fn(s->user, s->offset + first, n, out);
        SML_RETURN_IF(st > 0 || st < SIMIL_ERR_REMOTE, SIMIL_ERR_INVALID_ARGUMENT,
                      "a source callback returned %d, which is not a simil_status", (int)st);
        if (st != SIMIL_OK)
            return sml_error_context(st, "reading rows [%" PRId64 ", %" PRId64 ") of a callback",
                                     first, first + n);
        return SIMIL_OK;
    }
    }
    return sml_error(SIMIL_ERR_INTERNAL, "a source of unknown kind %d", (int)s->kind);
}

int sml_source_generator(const simil_source *s, const char **kind, uint64_t *seed,
                         int64_t *offset)
{
    if (s->kind != SML_SOURCE_GEN) return 0;
    *kind = s->gen_kind;
    *seed = s->seed;
    *offset = s->offset;
    return 1;
}

int sml_source_memory(const simil_source *s, const float **rows)
{
    if (s->kind != SML_SOURCE_MEMORY) return 0;
    *rows = s->x + s->offset * s->dim;
    return 1;
}
