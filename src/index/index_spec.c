/* index_spec.c: the factory-string parser (grammar in index_spec.h). */
#include "index/index_spec.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/sq_code.h"

enum { SML_SPEC_MAX_COMPONENTS = 8, SML_SPEC_MAX_LEN = 256, SML_PQ_MAX_CODE_BYTES = 128 };

/* Parse the decimal number at *p (advancing it) into *out, >= 1. */
static int sml_spec_number(const char **p, int64_t *out)
{
    if (!isdigit((unsigned char)**p)) return 0;
    errno = 0;
    char *end;
    long long v = strtoll(*p, &end, 10);
    if (errno != 0 || v < 1 || v > ((int64_t)1 << 40)) return 0;
    *p = end;
    *out = v;
    return 1;
}

/* "NAME<n>[<sep><m>]" with the second number optional. */
static int sml_spec_numbers(const char *s, const char *name, char sep, int64_t *a, int64_t *b)
{
    size_t len = strlen(name);
    if (strncmp(s, name, len) != 0) return 0;
    const char *p = s + len;
    if (!sml_spec_number(&p, a)) return 0;
    if (*p == sep && sep != '\0') {
        p++;
        if (!sml_spec_number(&p, b)) return 0;
    }
    return *p == '\0';
}

/* The description's suffix for each place of XFBQ's re-ranking floats
 * (SML_XFBQ_FLOATS_*): parsed and written from this one table. */
static const char *const sml_xfbq_floats_suffix[] = {"_fp32", "_host", "_fp16"};

/* The place a description without a suffix means, and whose suffix is not
 * written: for flat XFBQ the fp16 copy, which on a GPU gives the results of
 * fp32 floats at about their speed in 253 bytes a 96-d vector, not 440
 * (docs/xfbq.md); an inverted file keeps its floats in its list rows, in
 * backend memory, and takes no suffix. */
static int sml_xfbq_floats_default(const sml_index_spec *spec)
{
    return spec->ivf_nlist ? SML_XFBQ_FLOATS_BACKEND : SML_XFBQ_FLOATS_FP16;
}

static simil_status sml_spec_encoding(const char *c, const char *desc, sml_index_spec *spec)
{
    int64_t a = 0, b = 0;
    if (strcmp(c, "Flat") == 0) {
        spec->encoding = SML_ENCODING_FLAT;
        return SIMIL_OK;
    }
    /* XFBQ[QxB][_fp32|_host|_fp16]: the suffix, where the floats for re-ranking
     * live; -1: none */
    char xfbq[SML_SPEC_MAX_LEN];
    const size_t len = strlen(c);
    int floats = -1;
    for (int f = SML_XFBQ_FLOATS_BACKEND; f <= SML_XFBQ_FLOATS_FP16 && strncmp(c, "XFBQ", 4) == 0;
         f++) {
        const size_t sl = strlen(sml_xfbq_floats_suffix[f]);
        if (len > sl && strcmp(c + len - sl, sml_xfbq_floats_suffix[f]) == 0) floats = f;
    }
    snprintf(xfbq, sizeof xfbq, "%.*s",
             (int)(len - (floats < 0 ? 0 : strlen(sml_xfbq_floats_suffix[floats]))), c);
    if (strcmp(xfbq, "XFBQ") == 0 || sml_spec_numbers(xfbq, "XFBQ", 'x', &a, &b)) {
        /* the inverted file comes before the encoding, so it is known here */
        SML_RETURN_IF(floats >= 0 && spec->ivf_nlist, SIMIL_ERR_INVALID_ARGUMENT,
                      "index '%s': _fp32, _host and _fp16 (where re-ranking floats live) are "
                      "for flat XFBQ; an inverted file keeps each vector's floats in its list "
                      "rows", desc);
        spec->encoding = SML_ENCODING_XFBQ;
        spec->xfbq_floats = floats >= 0 ? floats : sml_xfbq_floats_default(spec);
        if (a != 0) {
            SML_RETURN_IF(b == 0, SIMIL_ERR_INVALID_ARGUMENT,
                          "index '%s': write XFBQ<query bits>x<base bits>, e.g. XFBQ4x3", desc);
            SML_RETURN_IF(a > 8 || b > 8, SIMIL_ERR_INVALID_ARGUMENT,
                          "index '%s': XFBQ bit counts must be 1 to 8, got %" PRId64
                          "x%" PRId64, desc, a, b);
            spec->xfbq_query_bits = (int)a;
            spec->xfbq_base_bits = (int)b;
        }
        return SIMIL_OK;
    }
    static const struct {
        const char *name;
        sml_sq_type type;
    } sq[] = {{"SQ8", SML_SQ_8BIT}, {"SQfp16", SML_SQ_FP16}, {"SQbf16", SML_SQ_BF16}};
    for (size_t i = 0; i < sizeof sq / sizeof sq[0]; i++) {
        if (strcmp(c, sq[i].name) == 0) {
            spec->encoding = SML_ENCODING_SQ;
            spec->sq_type = sq[i].type;
            return SIMIL_OK;
        }
    }
    if (sml_spec_numbers(c, "PQ", 'x', &a, &b)) {
        spec->encoding = SML_ENCODING_PQ;
        spec->pq_m = a;
        if (b != 0) {
            SML_RETURN_IF(b < 4 || b > 8, SIMIL_ERR_INVALID_ARGUMENT,
                          "index '%s': PQ codes take 4 to 8 bits, got %" PRId64, desc, b);
            spec->pq_bits = (int)b;
        }
        return SIMIL_OK;
    }
    return sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                     "index '%s': '%s' is not an encoding; expected Flat, PQ<m>[x<bits>], "
                     "XFBQ[<q>x<b>][_fp32|_host|_fp16], SQ8, SQfp16 or SQbf16",
                     desc, c);
}

/* Split desc at commas (spaces around components are ignored). */
static simil_status sml_spec_split(const char *desc, char buf[SML_SPEC_MAX_LEN],
                                   char *parts[SML_SPEC_MAX_COMPONENTS], int *count)
{
    SML_RETURN_IF(strlen(desc) >= SML_SPEC_MAX_LEN, SIMIL_ERR_INVALID_ARGUMENT,
                  "index description is longer than %d characters", SML_SPEC_MAX_LEN - 1);
    strcpy(buf, desc);
    *count = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*tok)) tok++;
        char *end = tok + strlen(tok);
        while (end > tok && isspace((unsigned char)end[-1])) *--end = '\0';
        SML_RETURN_IF(*count == SML_SPEC_MAX_COMPONENTS, SIMIL_ERR_INVALID_ARGUMENT,
                      "index '%s' has too many components", desc);
        parts[(*count)++] = tok;
    }
    SML_RETURN_IF(*count == 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "empty index description; try \"Flat\" or \"IVF1024,Flat\"");
    return SIMIL_OK;
}

static simil_status sml_spec_check(const char *desc, int64_t dim, sml_index_spec *spec)
{
    /* Callers check dim too; the limits below divide by it. */
    SML_RETURN_IF(dim < 1, SIMIL_ERR_INVALID_ARGUMENT,
                  "index '%s': dimension %" PRId64 " must be at least 1", desc, dim);
    int64_t coded_dim = spec->opq_m ? spec->opq_dim : dim;
    SML_RETURN_IF(spec->rotate && (spec->encoding != SML_ENCODING_XFBQ || spec->opq_m),
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "index '%s': RR (random rotation) applies to XFBQ codes only, as in "
                  "\"RR,XFBQ4x3\" or \"RR,IVF1024,XFBQ\"", desc);
    /* the rotation is dim x dim floats, made by one SVD at creation */
    SML_RETURN_IF(spec->rotate && dim > 8192, SIMIL_ERR_INVALID_ARGUMENT,
                  "index '%s': RR at dimension %" PRId64 " would take a %" PRId64 " x %" PRId64
                  " rotation; at most 8192 dimensions", desc, dim, dim, dim);
    if (spec->opq_m) {
        SML_RETURN_IF(spec->encoding != SML_ENCODING_PQ, SIMIL_ERR_INVALID_ARGUMENT,
                      "index '%s': OPQ needs a PQ encoding after it", desc);
        SML_RETURN_IF(coded_dim > dim, SIMIL_ERR_INVALID_ARGUMENT,
                      "index '%s': OPQ output dimension %" PRId64
                      " is larger than the input dimension %" PRId64, desc, coded_dim, dim);
        SML_RETURN_IF(coded_dim % spec->opq_m != 0, SIMIL_ERR_INVALID_ARGUMENT,
                      "index '%s': OPQ%" PRId64 " must divide its output dimension %" PRId64,
                      desc, spec->opq_m, coded_dim);
    }
    if (spec->encoding == SML_ENCODING_PQ) {
        SML_RETURN_IF(coded_dim % spec->pq_m != 0, SIMIL_ERR_INVALID_ARGUMENT,
                      "index '%s': PQ%" PRId64 " must divide the dimension %" PRId64
                      " (each sub-quantizer codes dim/m components)",
                      desc, spec->pq_m, coded_dim);
        SML_RETURN_IF((spec->pq_m * spec->pq_bits + 7) / 8 > SML_PQ_MAX_CODE_BYTES,
                      SIMIL_ERR_INVALID_ARGUMENT,
                      "index '%s': codes of %" PRId64 " x %d bits exceed %d bytes", desc,
                      spec->pq_m, spec->pq_bits, SML_PQ_MAX_CODE_BYTES);
    }
    /* Trained parameters are allocated when the index is made: keep each
     * under 2^30 floats (4 GiB) so that a typo or a damaged file cannot ask
     * for terabytes. */
    const int64_t most = (int64_t)1 << 30;
    SML_RETURN_IF(spec->ivf_nlist > ((int64_t)1 << 24), SIMIL_ERR_INVALID_ARGUMENT,
                  "index '%s': at most 16777216 (2^24) lists", desc);
    SML_RETURN_IF(spec->ivf_nlist > most / coded_dim, SIMIL_ERR_INVALID_ARGUMENT,
                  "index '%s': %" PRId64 " lists of dimension %" PRId64
                  " would take more than 4 GiB of centroids; use fewer lists",
                  desc, spec->ivf_nlist, coded_dim);
    SML_RETURN_IF(spec->encoding == SML_ENCODING_PQ && ((int64_t)1 << spec->pq_bits) > most / coded_dim,
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "index '%s': PQ codebooks at dimension %" PRId64 " would take more than 4 GiB",
                  desc, coded_dim);
    SML_RETURN_IF(spec->opq_m && dim > most / coded_dim, SIMIL_ERR_INVALID_ARGUMENT,
                  "index '%s': an OPQ rotation of %" PRId64 " x %" PRId64
                  " would take more than 4 GiB", desc, dim, coded_dim);
    SML_RETURN_IF(spec->refine && spec->encoding == SML_ENCODING_FLAT, SIMIL_ERR_INVALID_ARGUMENT,
                  "index '%s': Refine re-ranks a compressed index; Flat is already exact", desc);
    return SIMIL_OK;
}

simil_status sml_index_spec_parse(const char *desc, int64_t dim, sml_index_spec *spec)
{
    SML_RETURN_IF(desc == NULL, SIMIL_ERR_INVALID_ARGUMENT, "index description is NULL");
    memset(spec, 0, sizeof *spec);
    spec->pq_bits = 8;
    spec->xfbq_query_bits = 4;
    spec->xfbq_base_bits = 3;
    char buf[SML_SPEC_MAX_LEN];
    char *parts[SML_SPEC_MAX_COMPONENTS];
    int count = 0, i = 0;
    SML_TRY(sml_spec_split(desc, buf, parts, &count));
    int64_t a = 0, b = 0;
    if (strncmp(parts[i], "Shards", 6) == 0) {
        SML_RETURN_IF(!sml_spec_numbers(parts[i], "Shards", '\0', &a, &b) || a > 1024 ||
                          i + 1 == count,
                      SIMIL_ERR_INVALID_ARGUMENT,
                      "index '%s': write Shards<parts>,<index>, e.g. Shards2,IVF4096,Flat", desc);
        spec->shards = a;
        i++;
    }
    if (strcmp(parts[i], "IDMap") == 0) i++;
    if (i < count && strncmp(parts[i], "OPQ", 3) == 0) {
        SML_RETURN_IF(!sml_spec_numbers(parts[i], "OPQ", '_', &a, &b), SIMIL_ERR_INVALID_ARGUMENT,
                      "index '%s': write OPQ<m> or OPQ<m>_<dim>, got '%s'", desc, parts[i]);
        spec->opq_m = a;
        spec->opq_dim = b ? b : dim;
        i++;
    }
    if (i < count && strncmp(parts[i], "RR", 2) == 0) {
        SML_RETURN_IF(strcmp(parts[i], "RR") != 0 &&
                          !(sml_spec_numbers(parts[i], "RR", '\0', &a, &b) && a == dim),
                      SIMIL_ERR_INVALID_ARGUMENT,
                      "index '%s': write RR (a random rotation, which keeps the dimension "
                      "%" PRId64 "), got '%s'", desc, dim, parts[i]);
        spec->rotate = 1;
        i++;
    }
    if (i < count && strncmp(parts[i], "IVF", 3) == 0) {
        SML_RETURN_IF(!sml_spec_numbers(parts[i], "IVF", '\0', &a, &b), SIMIL_ERR_INVALID_ARGUMENT,
                      "index '%s': write IVF<number of lists>, e.g. IVF1024, got '%s'", desc,
                      parts[i]);
        spec->ivf_nlist = a;
        i++;
    }
    SML_RETURN_IF(i == count, SIMIL_ERR_INVALID_ARGUMENT,
                  "index '%s' has no encoding; end it with Flat, PQ<m>, XFBQ or SQ8", desc);
    SML_TRY(sml_spec_encoding(parts[i++], desc, spec));
    if (i < count && (strcmp(parts[i], "Refine") == 0 || strcmp(parts[i], "RFlat") == 0)) {
        spec->refine = 1;
        i++;
    }
    SML_RETURN_IF(i < count, SIMIL_ERR_INVALID_ARGUMENT,
                  "index '%s': unexpected '%s' (order is [OPQ..,|RR,][IVF..,]encoding[,Refine])",
                  desc, parts[i]);
    return sml_spec_check(desc, dim, spec);
}

void sml_index_spec_format(const sml_index_spec *spec, char *out, size_t size)
{
    int n = 0;
    out[0] = '\0';
#define SML_APPEND(...)                                                          \
    do {                                                                         \
        if (n >= 0 && (size_t)n < size) n += snprintf(out + n, size - (size_t)n, __VA_ARGS__); \
    } while (0)
    if (spec->shards) SML_APPEND("Shards%" PRId64 ",", spec->shards);
    if (spec->opq_m) SML_APPEND("OPQ%" PRId64 "_%" PRId64 ",", spec->opq_m, spec->opq_dim);
    if (spec->rotate) SML_APPEND("RR,");
    if (spec->ivf_nlist) SML_APPEND("IVF%" PRId64 ",", spec->ivf_nlist);
    switch (spec->encoding) {
    case SML_ENCODING_FLAT: SML_APPEND("Flat"); break;
    case SML_ENCODING_PQ: SML_APPEND("PQ%" PRId64 "x%d", spec->pq_m, spec->pq_bits); break;
    case SML_ENCODING_XFBQ:
        assert(spec->xfbq_floats >= 0 && spec->xfbq_floats <= SML_XFBQ_FLOATS_FP16);
        assert(!spec->ivf_nlist || spec->xfbq_floats == SML_XFBQ_FLOATS_BACKEND);
        SML_APPEND("XFBQ%dx%d%s", spec->xfbq_query_bits, spec->xfbq_base_bits,
                   spec->xfbq_floats == sml_xfbq_floats_default(spec)
                       ? ""
                       : sml_xfbq_floats_suffix[spec->xfbq_floats]);
        break;
    case SML_ENCODING_SQ:
        SML_APPEND("%s", spec->sq_type == SML_SQ_8BIT   ? "SQ8"
                         : spec->sq_type == SML_SQ_FP16 ? "SQfp16"
                                                        : "SQbf16");
        break;
    }
    if (spec->refine) SML_APPEND(",Refine");
#undef SML_APPEND
}
