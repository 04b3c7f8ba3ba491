/* search_params.c: the settings of a search (simil/search_params.h).
 *
 * sml_params below is the one list of settings: each row gives a setting's
 * name, type, range, default, the index types that read it, its help line,
 * and where its value lives in struct simil_search_params (index_internal.h),
 * whose fields the index types read directly.  Everything else (parsing,
 * checks, error messages, the defaults, the help of the CLI and of Python)
 * comes from the rows.  A new setting is a field there and a row here (and,
 * if no SML_USES_* bit says which indexes read it, a new bit).  A setting that
 * is neither a number nor a name (a list of allowed ids, say) needs its own
 * typed setter beside simil_search_params_set_int, and a type here.
 *
 * Values are checked when they are set, so a search trusts the handle. */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/error.h"
#include "index/index_internal.h"

/* Which index types read a setting (sml_index_uses). */
enum {
    SML_USES_ALL = 1,
    SML_USES_IVF = 2,     /* an inverted file: IVFn,... */
    SML_USES_PQ = 4,      /* ...,PQm */
    SML_USES_XFBQ = 8,    /* XFBQ and IVFn,XFBQ */
    SML_USES_REFINE = 16  /* ...,Refine */
};

typedef enum sml_store { SML_STORE_I64, SML_STORE_INT, SML_STORE_FLOAT } sml_store;

typedef struct sml_param_row {
    simil_search_param_info info;  /* default_value and range: filled in from the rest */
    double min, max;               /* int and float settings */
    double def;                    /* the default; enum: its index in info.choices */
    size_t offset;                 /* of the value in struct simil_search_params */
    sml_store store;
    unsigned uses;
    char def_text[32];
    char range_text[96];
} sml_param_row;

#define SML_AT(field)                                                                    \
    .offset = offsetof(simil_search_params, field),                                      \
    .store = _Generic(((simil_search_params *)0)->field, int64_t: SML_STORE_I64,         \
                      int: SML_STORE_INT, float: SML_STORE_FLOAT)

/* Indexed by sml_lut_precision. */
static const char *const sml_lut_names[] = {"auto", "fp32", "fp16", NULL};

/* Indexed by sml_extra_of. */
static const char *const sml_extra_of_names[] = {"range", "spread", NULL};

static sml_param_row sml_params[] = {
    {.info = {.name = "nprobe", .type = SIMIL_PARAM_INT, .index_types = "IVF indexes",
              .help = "inverted lists each query visits: more finds more true neighbours, "
                      "slower"},
     .min = 1, .max = 1 << 30, .def = 1, SML_AT(nprobe), .uses = SML_USES_IVF},
    {.info = {.name = "threads", .type = SIMIL_PARAM_INT, .index_types = "every index",
              .help = "CPU threads for this search; 0: all available"},
     .min = 0, .max = 4096, .def = 0, SML_AT(threads), .uses = SML_USES_ALL},
    {.info = {.name = "refine_factor", .type = SIMIL_PARAM_INT,
              .index_types = "...,Refine indexes",
              .help = "re-rank k x this many candidates of the inner index with the exact "
                      "vectors"},
     .min = 1, .max = INT32_MAX, .def = 4, SML_AT(refine_factor), .uses = SML_USES_REFINE},
    {.info = {.name = "extra_distance", .type = SIMIL_PARAM_FLOAT, .index_types = "XFBQ indexes",
              .help = "widen the re-ranked candidates by this fraction of what extra_of "
                      "names"},
     .min = 0, .max = 1, .def = 0.05, SML_AT(extra_distance), .uses = SML_USES_XFBQ},
    {.info = {.name = "extra_of", .type = SIMIL_PARAM_ENUM, .index_types = "XFBQ indexes",
              .help = "extra_distance is a fraction of: range, the code distances' full "
                      "range; spread, each query's median minus smallest code distance",
              .choices = sml_extra_of_names},
     .def = SML_EXTRA_OF_RANGE, SML_AT(extra_of), .uses = SML_USES_XFBQ},
    {.info = {.name = "lut", .type = SIMIL_PARAM_ENUM, .index_types = "IVF-PQ on a GPU",
              .help = "precision of the lookup tables in GPU shared memory; auto: fp32 where "
                      "they fit",
              .choices = sml_lut_names},
     .def = SML_LUT_AUTO, SML_AT(lut), .uses = SML_USES_PQ},
    {.info = {.name = "precomputed_tables", .type = SIMIL_PARAM_INT,
              .index_types = "IVF-PQ with L2",
              .help = "1: one table per query, with each vector's term stored at add time; 0: "
                      "one table per (query, list) from the residual"},
     .min = 0, .max = 1, .def = 1, SML_AT(precomputed_tables), .uses = SML_USES_PQ},
};
enum { SML_NPARAMS = (int)(sizeof sml_params / sizeof sml_params[0]) };
_Static_assert(SML_NPARAMS <= 32, "simil_search_params.given holds a bit per setting");

static simil_search_params sml_defaults;
static pthread_once_t sml_params_once = PTHREAD_ONCE_INIT;

static void sml_store_value(const sml_param_row *row, simil_search_params *p, double v)
{
    char *at = (char *)p + row->offset;
    switch (row->store) {
    case SML_STORE_I64: *(int64_t *)(void *)at = (int64_t)v; break;
    case SML_STORE_INT: *(int *)(void *)at = (int)v; break;
    case SML_STORE_FLOAT: *(float *)(void *)at = (float)v; break;
    }
}

static double sml_load_value(const sml_param_row *row, const simil_search_params *p)
{
    const char *at = (const char *)p + row->offset;
    switch (row->store) {
    case SML_STORE_I64: return (double)*(const int64_t *)(const void *)at;
    case SML_STORE_INT: return *(const int *)(const void *)at;
    case SML_STORE_FLOAT: return *(const float *)(const void *)at;
    }
    return 0;
}

/* "auto, fp32 or fp16" */
static void sml_choice_list(const char *const *choices, char *out, size_t size)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; choices[i] && len < size; i++)
        len += (size_t)snprintf(out + len, size - len, "%s%s",
                                i == 0 ? "" : choices[i + 1] ? ", " : " or ", choices[i]);
}

/* The texts of each row, and the defaults, from the rows' numbers. */
static void sml_params_setup(void)
{
    for (int i = 0; i < SML_NPARAMS; i++) {
        sml_param_row *row = &sml_params[i];
        switch (row->info.type) {
        case SIMIL_PARAM_INT:
            snprintf(row->def_text, sizeof row->def_text, "%.0f", row->def);
            snprintf(row->range_text, sizeof row->range_text, "%.0f to %.0f", row->min,
                     row->max);
            break;
        case SIMIL_PARAM_FLOAT:
            snprintf(row->def_text, sizeof row->def_text, "%g", row->def);
            snprintf(row->range_text, sizeof row->range_text, "%g to %g", row->min, row->max);
            break;
        case SIMIL_PARAM_ENUM:
            snprintf(row->def_text, sizeof row->def_text, "%s",
                     row->info.choices[(int)row->def]);
            sml_choice_list(row->info.choices, row->range_text, sizeof row->range_text);
            break;
        }
        row->info.default_value = row->def_text;
        row->info.range = row->range_text;
        sml_store_value(row, &sml_defaults, row->def);
    }
}

static void sml_params_ready(void) { pthread_once(&sml_params_once, sml_params_setup); }

const simil_search_params *sml_search_defaults(void)
{
    sml_params_ready();
    return &sml_defaults;
}

int sml_search_params_equal(const simil_search_params *a, const simil_search_params *b)
{
    /* the same filter handle, or none: a batch is searched with one filter */
    if (a->allow != b->allow) return 0;
    for (int i = 0; i < SML_NPARAMS; i++)
        if (sml_load_value(&sml_params[i], a) != sml_load_value(&sml_params[i], b)) return 0;
    return 1;
}

static simil_status sml_unknown_param(const char *name)
{
    char names[256];
    size_t len = 0;
    for (int i = 0; i < SML_NPARAMS && len < sizeof names; i++)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s",
                                i == 0 ? "" : i + 1 < SML_NPARAMS ? ", " : " and ",
                                sml_params[i].info.name);
    return sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                     "unknown search parameter '%s'; the search parameters are %s", name,
                     names);
}

/* The row of name, or NULL after setting the error. */
static const sml_param_row *sml_param_row_of(const char *name)
{
    sml_params_ready();
    if (name == NULL) {
        sml_error(SIMIL_ERR_INVALID_ARGUMENT, "search parameter name is NULL");
        return NULL;
    }
    for (int i = 0; i < SML_NPARAMS; i++)
        if (strcmp(sml_params[i].info.name, name) == 0) return &sml_params[i];
    sml_unknown_param(name);
    return NULL;
}

static const char *sml_kind_text(simil_param_type type)
{
    return type == SIMIL_PARAM_INT ? "an integer" : type == SIMIL_PARAM_FLOAT ? "a number" : "one of";
}

/* Check v against the row's range and store it. */
static simil_status sml_set_number(const sml_param_row *row, simil_search_params *p, double v,
                                   const char *text)
{
    char shown[64];
    if (text == NULL) {
        snprintf(shown, sizeof shown, row->info.type == SIMIL_PARAM_INT ? "%.0f" : "%g", v);
        text = shown;
    }
    SML_RETURN_IF(!(v >= row->min && v <= row->max), SIMIL_ERR_INVALID_ARGUMENT,
                  "search parameter %s: %s is out of range; it takes %s from %s",
                  row->info.name, text, sml_kind_text(row->info.type), row->range_text);
    sml_store_value(row, p, v);
    p->given |= 1u << (row - sml_params);
    return SIMIL_OK;
}

/* Whole decimal text ("-3", "+16"), into *v; 0 if it is not one. */
static int sml_parse_integer(const char *s, double *v)
{
    const char *c = s + (*s == '-' || *s == '+');
    if (!isdigit((unsigned char)*c)) return 0;
    while (isdigit((unsigned char)*c)) c++;
    if (*c != '\0') return 0;
    *v = strtod(s, NULL); /* exact below 2^53, and anything larger is out of every range */
    return 1;
}

static int sml_parse_real(const char *s, double *v)
{
    char *end;
    if (*s == '\0' || isspace((unsigned char)*s)) return 0;
    *v = strtod(s, &end);
    return *end == '\0' && isfinite(*v);
}

static simil_status sml_set_text(const sml_param_row *row, simil_search_params *p,
                                 const char *value)
{
    const simil_search_param_info *in = &row->info;
    SML_RETURN_IF(value == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "search parameter %s: the value is NULL", in->name);
    double v;
    switch (in->type) {
    case SIMIL_PARAM_INT:
        SML_RETURN_IF(!sml_parse_integer(value, &v), SIMIL_ERR_INVALID_ARGUMENT,
                      "search parameter %s: '%s' is not an integer; it takes an integer from %s",
                      in->name, value, row->range_text);
        return sml_set_number(row, p, v, value);
    case SIMIL_PARAM_FLOAT:
        SML_RETURN_IF(!sml_parse_real(value, &v), SIMIL_ERR_INVALID_ARGUMENT,
                      "search parameter %s: '%s' is not a number; it takes a number from %s",
                      in->name, value, row->range_text);
        return sml_set_number(row, p, v, value);
    case SIMIL_PARAM_ENUM:
        for (int i = 0; in->choices[i]; i++)
            if (strcasecmp(in->choices[i], value) == 0) {
                sml_store_value(row, p, i);
                p->given |= 1u << (row - sml_params);
                return SIMIL_OK;
            }
        return sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                         "search parameter %s: '%s' is not one of %s", in->name, value,
                         row->range_text);
    }
    return sml_error(SIMIL_ERR_INTERNAL, "search parameter %s has no type", in->name);
}

/* The row of name for the call fn on params, or SIMIL_ERR_INVALID_ARGUMENT
 * (with its message) when either is missing. */
static simil_status sml_lookup(const simil_search_params *params, const char *name,
                               const char *fn, const sml_param_row **row)
{
    SML_RETURN_IF(params == NULL, SIMIL_ERR_INVALID_ARGUMENT, "%s: params is NULL", fn);
    *row = sml_param_row_of(name);
    return *row != NULL ? SIMIL_OK : SIMIL_ERR_INVALID_ARGUMENT;
}

simil_status simil_search_params_create(simil_search_params **params)
{
    SML_RETURN_IF(params == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "simil_search_params_create: params is NULL");
    *params = NULL;
    simil_search_params *p;
    SML_TRY(sml_alloc((void **)&p, 1, sizeof *p, "search parameters"));
    *p = *sml_search_defaults();
    *params = p;
    return SIMIL_OK;
}

void simil_search_params_destroy(simil_search_params *params)
{
    if (params != NULL) sml_free(params->allow);
    sml_free(params);
}

/* A filter block of `bytes` of data after the struct, 8-aligned; swapped in
 * by sml_allow_commit. */
static simil_status sml_allow_new(size_t bytes, sml_id_filter **f)
{
    SML_TRY(sml_alloc((void **)f, 1, sizeof **f + bytes, "allowed ids"));
    memset(*f, 0, sizeof **f);
    return SIMIL_OK;
}

static void sml_allow_commit(simil_search_params *p, sml_id_filter *f)
{
    static atomic_uint_fast64_t stamps;
    if (f != NULL) f->stamp = atomic_fetch_add(&stamps, 1) + 1;
    sml_free(p->allow);
    p->allow = f;
}

simil_status simil_search_params_allow_bitset(simil_search_params *params, int64_t nbits,
                                              const uint8_t *bitset)
{
    SML_RETURN_IF(params == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "simil_search_params_allow_bitset: params is NULL");
    SML_RETURN_IF(nbits < 0 || nbits > ((int64_t)1 << 46), SIMIL_ERR_INVALID_ARGUMENT,
                  "allowed ids: a bitset of %" PRId64 " bits; it takes 0 to 2^46 bits", nbits);
    SML_RETURN_IF(nbits > 0 && bitset == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "allowed ids: the bitset of %" PRId64 " bits is NULL", nbits);
    const size_t words = (size_t)(nbits + 63) / 64, bytes = (size_t)(nbits + 7) / 8;
    sml_id_filter *f;
    SML_TRY(sml_allow_new(words * sizeof(uint64_t), &f));
    uint64_t *w = (uint64_t *)(void *)(f + 1);
    memset(w, 0, words * sizeof *w);
    /* byte i / 8 holds bit i % 8: little-endian words of the same bits */
    for (size_t i = 0; i < bytes; i++) w[i / 8] |= (uint64_t)bitset[i] << (8 * (i % 8));
    if (nbits % 64 != 0) w[words - 1] &= ((uint64_t)1 << (nbits % 64)) - 1;
    f->bits = w;
    f->nbits = nbits;
    sml_allow_commit(params, f);
    return SIMIL_OK;
}

simil_status simil_search_params_allow_ids(simil_search_params *params, int64_t n,
                                           const int64_t *ids)
{
    SML_RETURN_IF(params == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "simil_search_params_allow_ids: params is NULL");
    SML_RETURN_IF(n < 0 || n > ((int64_t)1 << 40), SIMIL_ERR_INVALID_ARGUMENT,
                  "allowed ids: n=%" PRId64 "; it takes 0 to 2^40 ids", n);
    SML_RETURN_IF(n > 0 && ids == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "allowed ids: the list of %" PRId64 " ids is NULL", n);
    for (int64_t i = 0; i < n; i++) {
        SML_RETURN_IF(ids[i] < 0, SIMIL_ERR_INVALID_ARGUMENT,
                      "allowed ids: id %" PRId64 " (at %" PRId64 ") is negative", ids[i], i);
        SML_RETURN_IF(i > 0 && ids[i] <= ids[i - 1], SIMIL_ERR_INVALID_ARGUMENT,
                      "allowed ids: the list must be ascending without repeats, but id %" PRId64
                      " (at %" PRId64 ") follows %" PRId64,
                      ids[i], i, ids[i - 1]);
    }
    sml_id_filter *f;
    SML_TRY(sml_allow_new((size_t)n * sizeof *ids, &f));
    int64_t *copy = (int64_t *)(void *)(f + 1);
    if (n > 0) memcpy(copy, ids, (size_t)n * sizeof *ids);
    f->ids = copy;
    f->n = n;
    sml_allow_commit(params, f);
    return SIMIL_OK;
}

void simil_search_params_allow_all(simil_search_params *params)
{
    if (params != NULL) sml_allow_commit(params, NULL);
}

int simil_search_params_has_filter(const simil_search_params *params)
{
    return params != NULL && params->allow != NULL;
}

simil_status simil_search_params_set(simil_search_params *params, const char *name,
                                     const char *value)
{
    const sml_param_row *row = NULL; /* set by sml_lookup when it succeeds */
    SML_TRY(sml_lookup(params, name, __func__, &row));
    return sml_set_text(row, params, value);
}

simil_status simil_search_params_parse(simil_search_params *params, const char *settings)
{
    SML_RETURN_IF(params == NULL || settings == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "simil_search_params_parse: params or settings is NULL");
    simil_search_params trial = *params;
    for (const char *s = settings; *s;) {
        size_t len = strcspn(s, ",");
        char item[256];
        SML_RETURN_IF(len >= sizeof item, SIMIL_ERR_INVALID_ARGUMENT,
                      "search parameters: '%.40s...' is too long", s);
        memcpy(item, s, len);
        item[len] = '\0';
        char *eq = strchr(item, '=');
        SML_RETURN_IF(eq == NULL || eq == item, SIMIL_ERR_INVALID_ARGUMENT,
                      "search parameters: '%s' is not name=value (in '%s')", item, settings);
        *eq = '\0';
        SML_TRY(simil_search_params_set(&trial, item, eq + 1));
        s += len;
        if (*s == ',') {
            s++;
            SML_RETURN_IF(*s == '\0', SIMIL_ERR_INVALID_ARGUMENT,
                          "search parameters: '%s' ends in a comma", settings);
        }
    }
    *params = trial;
    return SIMIL_OK;
}

simil_status simil_search_params_set_int(simil_search_params *params, const char *name,
                                         int64_t value)
{
    const sml_param_row *row = NULL; /* set by sml_lookup when it succeeds */
    SML_TRY(sml_lookup(params, name, __func__, &row));
    SML_RETURN_IF(row->info.type == SIMIL_PARAM_ENUM, SIMIL_ERR_INVALID_ARGUMENT,
                  "search parameter %s takes one of %s; set it by name "
                  "(simil_search_params_set)",
                  name, row->range_text);
    char text[32];
    snprintf(text, sizeof text, "%" PRId64, value);
    return sml_set_number(row, params, (double)value, text);
}

simil_status simil_search_params_set_float(simil_search_params *params, const char *name,
                                           double value)
{
    const sml_param_row *row = NULL; /* set by sml_lookup when it succeeds */
    SML_TRY(sml_lookup(params, name, __func__, &row));
    SML_RETURN_IF(row->info.type != SIMIL_PARAM_FLOAT, SIMIL_ERR_INVALID_ARGUMENT,
                  "search parameter %s takes %s%s%s, not a real number", name,
                  sml_kind_text(row->info.type),
                  row->info.type == SIMIL_PARAM_ENUM ? " " : " from ", row->range_text);
    return sml_set_number(row, params, value, NULL);
}

simil_status simil_search_params_get(const simil_search_params *params, const char *name,
                                     char *value, size_t size)
{
    const sml_param_row *row = NULL; /* set by sml_lookup when it succeeds */
    SML_TRY(sml_lookup(params, name, __func__, &row));
    SML_RETURN_IF(value == NULL || size == 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "simil_search_params_get: no room for the value of %s", name);
    const double v = sml_load_value(row, params);
    int n;
    if (row->info.type == SIMIL_PARAM_ENUM) {
        n = snprintf(value, size, "%s", row->info.choices[(int)v]);
    } else if (row->info.type == SIMIL_PARAM_INT) {
        n = snprintf(value, size, "%.0f", v);
    } else {
        /* the shortest text that reads back as the same float: "0.05", not
         * 0.0500000007 */
        for (int digits = 6; digits <= 9; digits++) {
            n = snprintf(value, size, "%.*g", digits, v);
            if (n >= 0 && (size_t)n < size && (float)strtod(value, NULL) == (float)v) break;
        }
    }
    if (n < 0 || (size_t)n >= size) {
        value[0] = '\0';
        return sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                         "simil_search_params_get: the value of %s needs %d bytes, %zu given",
                         name, n + 1, size);
    }
    return SIMIL_OK;
}

simil_status simil_search_params_get_int(const simil_search_params *params, const char *name,
                                         int64_t *value)
{
    const sml_param_row *row = NULL; /* set by sml_lookup when it succeeds */
    SML_TRY(sml_lookup(params, name, __func__, &row));
    SML_RETURN_IF(value == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "simil_search_params_get_int: value is NULL");
    SML_RETURN_IF(row->info.type != SIMIL_PARAM_INT, SIMIL_ERR_INVALID_ARGUMENT,
                  "search parameter %s is not an integer; read it with %s", name,
                  row->info.type == SIMIL_PARAM_FLOAT ? "simil_search_params_get_float"
                                                      : "simil_search_params_get");
    *value = (int64_t)sml_load_value(row, params);
    return SIMIL_OK;
}

simil_status simil_search_params_get_float(const simil_search_params *params, const char *name,
                                           double *value)
{
    const sml_param_row *row = NULL; /* set by sml_lookup when it succeeds */
    SML_TRY(sml_lookup(params, name, __func__, &row));
    SML_RETURN_IF(value == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "simil_search_params_get_float: value is NULL");
    SML_RETURN_IF(row->info.type == SIMIL_PARAM_ENUM, SIMIL_ERR_INVALID_ARGUMENT,
                  "search parameter %s is one of %s; read it with simil_search_params_get",
                  name, row->range_text);
    *value = sml_load_value(row, params);
    return SIMIL_OK;
}

int sml_search_param_given(const simil_search_params *params, const char *name)
{
    const sml_param_row *row = sml_param_row_of(name);
    return row != NULL && (params->given >> (row - sml_params) & 1u);
}

int simil_search_param_count(void) { return SML_NPARAMS; }

const simil_search_param_info *simil_search_param_get_info(int i)
{
    sml_params_ready();
    return i >= 0 && i < SML_NPARAMS ? &sml_params[i].info : NULL;
}

const simil_search_param_info *simil_search_param_find(const char *name)
{
    sml_params_ready();
    for (int i = 0; name != NULL && i < SML_NPARAMS; i++)
        if (strcmp(sml_params[i].info.name, name) == 0) return &sml_params[i].info;
    return NULL;
}

/* Whether an index of this description reads settings of these uses. */
static int sml_spec_uses(const sml_index_spec *spec, unsigned uses)
{
    return (uses & SML_USES_ALL) || ((uses & SML_USES_IVF) && spec->ivf_nlist > 0) ||
           ((uses & SML_USES_PQ) && spec->encoding == SML_ENCODING_PQ) ||
           ((uses & SML_USES_XFBQ) && spec->encoding == SML_ENCODING_XFBQ) ||
           ((uses & SML_USES_REFINE) && spec->refine);
}

int simil_index_uses_search_param(const simil_index *index, const char *name)
{
    sml_params_ready();
    for (int i = 0; index != NULL && name != NULL && i < SML_NPARAMS; i++)
        if (strcmp(sml_params[i].info.name, name) == 0)
            return sml_spec_uses(&index->spec, sml_params[i].uses);
    return 0;
}
