/* faiss_read.c: loading index files written by Faiss (faiss::write_index).
 *
 * simil reads IndexFlatL2/IP ("IxF2", "IxFI", "IxFl"), IndexIVFFlat ("IwFl",
 * and the older "IvFl"/"IvFL"), IndexIVFPQ with 4- to 8-bit codes ("IwPQ",
 * and the older "IvPQ"; also with by_residual = false), IndexScalarQuantizer
 * ("IxSQ") and IndexIVFScalarQuantizer ("IwSQ", "IwSq"; also with
 * by_residual = false) for the types QT_8bit, QT_fp16 and QT_bf16,
 * IndexPreTransform ("IxPT") of one linear transform without bias around an
 * IndexIVFPQ (which is OPQ),
 * IndexHNSWFlat ("IHNf", as a Flat index of its storage: the graph is
 * skipped and searches are exact), and IndexIDMap/IndexIDMap2 ("IxMp",
 * "IxM2") around any of them.  Inverted lists must be ArrayInvertedLists
 * ("ilar"), with list sizes stored in full or sparse form.  As it reads, the
 * reader notes each object, which simil_faiss_describe reports.
 *
 * A Faiss file is a tree of objects, each opening with a four-character code
 * and then its fields in native (little-endian) byte order: int32 d, int64
 * ntotal, two unused int64, a bool is_trained, an int32 metric (0 inner
 * product, 1 L2); a std::vector is a uint64 count followed by its elements.
 * The reader parses the whole file into host arrays first (sml_faiss_parsed),
 * checking every count against the bytes left in the file before allocating,
 * and only then builds the simil index: a damaged file fails with
 * SIMIL_ERR_CORRUPT before any index exists, and a valid file of a kind simil
 * cannot represent fails with SIMIL_ERR_UNSUPPORTED naming what is missing. */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "algo/pq.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/vectors.h"
#include "index/index_internal.h"
#include "index/index_sq.h"
#include "index/ivf.h"
#include "simil/faiss.h"

#define SML_FOURCC(s) SML_TAG((s)[0], (s)[1], (s)[2], (s)[3])

enum { SML_FAISS_FLAT = 1, SML_FAISS_IVF_FLAT = 2, SML_FAISS_IVF_PQ = 3, SML_FAISS_SQ = 4,
       SML_FAISS_IVF_SQ = 5 };
enum { SML_FAISS_PQ_NBITS = 8, SML_FAISS_PQ_MIN_NBITS = 4 };
static const int64_t sml_faiss_max_dim = (int64_t)1 << 24;
static const char sml_faiss_readable[] =
    "simil reads IndexFlat, IndexIVFFlat, IndexIVFPQ, IndexScalarQuantizer, "
    "IndexIVFScalarQuantizer, IndexHNSWFlat, IndexPreTransform (OPQ) and "
    "IndexIDMap/IndexIDMap2 around them";

/* Faiss types by code, for messages about the ones simil does not read. */
static const struct {
    char code[5];
    const char *name;
} sml_faiss_names[] = {
    {"IxF2", "IndexFlatL2"},          {"IxFI", "IndexFlatIP"},
    {"IxFl", "IndexFlat"},            {"IwFl", "IndexIVFFlat"},
    {"IvFl", "IndexIVFFlat (old)"},   {"IvFL", "IndexIVFFlat (old)"},
    {"IwPQ", "IndexIVFPQ"},           {"IvPQ", "IndexIVFPQ (old)"},
    {"IxMp", "IndexIDMap"},           {"IxM2", "IndexIDMap2"},
    {"IHNf", "IndexHNSWFlat"},        {"IHNp", "IndexHNSWPQ"},
    {"IHNs", "IndexHNSWSQ"},          {"IHN2", "IndexHNSW2Level"},
    {"IHc2", "IndexHNSWCagra"},       {"IxPq", "IndexPQ"},
    {"IxPQ", "IndexPQ (old)"},        {"IxSQ", "IndexScalarQuantizer"},
    {"IwSQ", "IndexIVFScalarQuantizer (old)"}, {"IwSq", "IndexIVFScalarQuantizer"},
    {"IxPT", "IndexPreTransform"},    {"IxRF", "IndexRefine"},
    {"IwQR", "IndexIVFPQR"},          {"IvQR", "IndexIVFPQR (old)"},
    {"IxHe", "IndexLSH"},             {"IPfs", "IndexPQFastScan"},
    {"IwPf", "IndexIVFPQFastScan"},   {"IwFd", "IndexIVFFlatDedup"},
    {"INSf", "IndexNSGFlat"},         {"INSp", "IndexNSGPQ"},
    {"INSs", "IndexNSGSQ"},           {"INNf", "IndexNNDescentFlat"},
    {"IxRq", "IndexResidualQuantizer"}, {"IxLS", "IndexLocalSearchQuantizer"},
    {"IwRQ", "IndexIVFResidualQuantizer"}, {"IwLS", "IndexIVFLocalSearchQuantizer"},
    {"Ixrq", "IndexRaBitQ"},          {"Iwrq", "IndexIVFRaBitQ"},
    {"IRMf", "IndexRowwiseMinMax"},   {"IRMh", "IndexRowwiseMinMaxFP16"},
    {"Ix2L", "Index2Layer"},          {"IwSh", "IndexIVFSpectralHash"},
    {"IBxF", "IndexBinaryFlat"},      {"IBwF", "IndexBinaryIVF"},
    {"IBHf", "IndexBinaryHNSW"},
};

/* What a Faiss file holds, in host memory, before it becomes a simil index. */
typedef struct sml_faiss_parsed {
    int kind;               /* SML_FAISS_FLAT, _IVF_FLAT, _IVF_PQ, _SQ or _IVF_SQ */
    int64_t dim;
    int64_t ntotal;
    simil_metric metric;
    float *vectors;         /* Flat: ntotal x dim */
    int64_t nlist;          /* IVF */
    int64_t nprobe;         /* IVF: the default the file carries */
    float *coarse;          /* IVF: nlist x dim */
    int64_t pq_m;           /* IVF-PQ */
    int pq_nbits;           /* IVF-PQ: 4 to 8; codes of fewer are unpacked */
    int by_residual;        /* IVF-PQ, IVF-SQ: 0 where the codes are of the vectors */
    float *codebooks;       /* IVF-PQ: pq_m x 256 x dim / pq_m */
    sml_sq_type sq_type;    /* SQ */
    float *sq_ranges;       /* SQ8: vmin (dim), then vdiff (dim) */
    size_t code_size;       /* IVF, SQ: bytes per code in the file */
    size_t row_bytes;       /* IVF, SQ: bytes per code in simil's rows (>= code_size) */
    int64_t *list_sizes;    /* IVF: nlist */
    uint8_t *codes;         /* IVF, SQ: ntotal rows of row_bytes (IVF: list after list) */
    int64_t *ids;           /* IVF: ntotal, as codes */
    int64_t *id_map;        /* IDMap: ntotal external ids; NULL without one */
    float *pre_rt;          /* IndexPreTransform: pre_din x dim rotation (y = x rt) */
    int64_t pre_din;        /* IndexPreTransform: the input dimension; 0 without */
    int64_t pre_dout;       /* IndexPreTransform: its output, the inner dimension */
    char what[384];         /* the objects read so far, for simil_faiss_describe */
} sml_faiss_parsed;

static void sml_faiss_parsed_free(sml_faiss_parsed *p)
{
    sml_free(p->vectors);
    sml_free(p->coarse);
    sml_free(p->codebooks);
    sml_free(p->sq_ranges);
    sml_free(p->list_sizes);
    sml_free(p->codes);
    sml_free(p->ids);
    sml_free(p->id_map);
    sml_free(p->pre_rt);
    memset(p, 0, sizeof *p);
}

/* Append to the description of what was read (cut to fit). */
static void sml_fr_note(sml_faiss_parsed *p, const char *fmt, ...) SML_PRINTF(2, 3);
static void sml_fr_note(sml_faiss_parsed *p, const char *fmt, ...)
{
    size_t len = strlen(p->what);
    va_list ap;
    va_start(ap, fmt);
    if (len + 1 < sizeof p->what) vsnprintf(p->what + len, sizeof p->what - len, fmt, ap);
    va_end(ap);
}

/* A parsed kind, for messages. */
static const char *sml_faiss_kind_name(int kind)
{
    switch (kind) {
    case SML_FAISS_FLAT: return "Flat";
    case SML_FAISS_IVF_FLAT: return "IVF-Flat";
    case SML_FAISS_IVF_PQ: return "IVF-PQ";
    case SML_FAISS_SQ: return "scalar-quantizer";
    default: assert(kind == SML_FAISS_IVF_SQ); return "IVF scalar-quantizer";
    }
}

static void sml_faiss_code_text(uint32_t code, char text[5])
{
    for (int i = 0; i < 4; i++) {
        char c = (char)(code >> (8 * i));
        text[i] = (c >= 32 && c < 127) ? c : '?';
    }
    text[4] = '\0';
}

static const char *sml_faiss_name(uint32_t code)
{
    for (size_t i = 0; i < sizeof sml_faiss_names / sizeof sml_faiss_names[0]; i++)
        if (SML_FOURCC(sml_faiss_names[i].code) == code) return sml_faiss_names[i].name;
    return "an unknown type";
}

static int sml_faiss_is_alnum(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

int sml_faiss_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return 0;
    unsigned char head[4];
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    /* every Faiss index code is 'I' and three letters or digits; simil's own
     * files start with "SIMILIDX" */
    return got == sizeof head && head[0] == 'I' && sml_faiss_is_alnum(head[1]) &&
           sml_faiss_is_alnum(head[2]) && sml_faiss_is_alnum(head[3]);
}

static simil_status sml_faiss_unsupported(const char *path, uint32_t code, const char *where)
{
    char text[5];
    sml_faiss_code_text(code, text);
    return sml_error(SIMIL_ERR_UNSUPPORTED,
                     "'%s': Faiss index type '%s' (%s)%s is not supported; %s", path, text,
                     sml_faiss_name(code), where, sml_faiss_readable);
}

/* ---- primitives: every count is checked against the bytes left ---- */

static uint64_t sml_fr_left(const sml_reader *r) { return r->size - r->offset; }

static simil_status sml_fr_u8(sml_reader *r, uint8_t *v) { return sml_reader_read(r, v, 1); }
static simil_status sml_fr_u32(sml_reader *r, uint32_t *v) { return sml_reader_read(r, v, 4); }
static simil_status sml_fr_u64(sml_reader *r, uint64_t *v) { return sml_reader_read(r, v, 8); }

/* The count of a std::vector of elem-byte elements. */
static simil_status sml_fr_count(sml_reader *r, size_t elem, uint64_t *count, const char *what)
{
    SML_TRY(sml_fr_u64(r, count));
    SML_RETURN_IF(*count > sml_fr_left(r) / elem, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: %s claims %llu elements of %zu bytes at offset %llu, "
                  "only %llu bytes follow",
                  r->path, what, (unsigned long long)*count, elem,
                  (unsigned long long)(r->offset - 8), (unsigned long long)sml_fr_left(r));
    return SIMIL_OK;
}

/* count elements (already checked against the file) into a new buffer. */
static simil_status sml_fr_array(sml_reader *r, size_t elem, uint64_t count, void **out,
                                 const char *what)
{
    SML_TRY(sml_alloc(out, count > 0 ? (size_t)count : 1, elem, what));
    simil_status s = sml_reader_read(r, *out, (size_t)count * elem);
    if (s != SIMIL_OK) {
        sml_free(*out);
        *out = NULL;
    }
    return s;
}

static simil_status sml_fr_skip_vector(sml_reader *r, size_t elem, const char *what)
{
    uint64_t count;
    SML_TRY(sml_fr_count(r, elem, &count, what));
    return sml_reader_seek(r, r->offset + count * elem);
}

typedef struct sml_fr_head {
    int64_t dim;
    int64_t ntotal;
    int trained;
    simil_metric metric;
} sml_fr_head;

/* The fields every Faiss index starts with (after its code). */
static simil_status sml_fr_header(sml_reader *r, sml_fr_head *h)
{
    int32_t d, metric;
    int64_t ntotal, unused[2];
    uint8_t trained;
    SML_TRY(sml_reader_read(r, &d, 4));
    SML_TRY(sml_reader_read(r, &ntotal, 8));
    SML_TRY(sml_reader_read(r, unused, sizeof unused));
    SML_TRY(sml_fr_u8(r, &trained));
    SML_TRY(sml_reader_read(r, &metric, 4));
    SML_RETURN_IF(d < 1 || ntotal < 0 || (uint64_t)ntotal > r->size || trained > 1 || metric < 0,
                  SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: impossible Faiss header (d=%d, ntotal=%" PRId64
                  ", is_trained=%u, metric=%d) before offset %llu",
                  r->path, (int)d, ntotal, (unsigned)trained, (int)metric,
                  (unsigned long long)r->offset);
    SML_RETURN_IF(metric > 1, SIMIL_ERR_UNSUPPORTED,
                  "'%s' uses Faiss metric type %d; simil reads L2 (1) and inner product (0)",
                  r->path, (int)metric);
    SML_RETURN_IF(d > sml_faiss_max_dim, SIMIL_ERR_UNSUPPORTED,
                  "'%s' holds vectors of dimension %d; simil takes at most %" PRId64, r->path,
                  (int)d, sml_faiss_max_dim);
    h->dim = d;
    h->ntotal = ntotal;
    h->trained = trained;
    h->metric = metric == 1 ? SIMIL_METRIC_L2 : SIMIL_METRIC_IP;
    return SIMIL_OK;
}

static int sml_fr_is_flat(uint32_t code)
{
    return code == SML_FOURCC("IxF2") || code == SML_FOURCC("IxFI") ||
           code == SML_FOURCC("IxFl");
}

/* An IndexFlat after its code: header, then ntotal x d floats. */
static simil_status sml_fr_flat(sml_reader *r, sml_fr_head *h, float **vectors)
{
    SML_TRY(sml_fr_header(r, h));
    uint64_t count;
    SML_TRY(sml_fr_count(r, sizeof(float), &count, "the vectors of a Flat index"));
    SML_RETURN_IF(count % (uint64_t)h->dim != 0 || count / (uint64_t)h->dim != (uint64_t)h->ntotal,
                  SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: a Flat index of %" PRId64 " vectors of dimension %" PRId64
                  " holds %llu floats",
                  r->path, h->ntotal, h->dim, (unsigned long long)count);
    return sml_fr_array(r, sizeof(float), count, (void **)vectors, "Faiss vectors");
}

/* ---- inverted files ---- */

/* The coarse quantizer: an IndexFlat of nlist centroids in the IVF's metric. */
static simil_status sml_fr_quantizer(sml_reader *r, sml_faiss_parsed *p, uint64_t nlist)
{
    uint32_t code;
    SML_TRY(sml_fr_u32(r, &code));
    if (!sml_fr_is_flat(code))
        return sml_faiss_unsupported(r->path, code, " as a coarse quantizer");
    sml_fr_head h = {0};
    SML_TRY(sml_fr_flat(r, &h, &p->coarse));
    SML_RETURN_IF(h.dim != p->dim || nlist < 1 || (uint64_t)h.ntotal != nlist, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: an IVF of %llu lists in dimension %" PRId64
                  " has a quantizer of %" PRId64 " centroids in dimension %" PRId64,
                  r->path, (unsigned long long)nlist, p->dim, h.ntotal, h.dim);
    SML_RETURN_IF(h.metric != p->metric, SIMIL_ERR_UNSUPPORTED,
                  "'%s': the IVF's coarse quantizer uses another metric than the index; "
                  "simil's IVF probes lists with the index's own metric",
                  r->path);
    p->nlist = (int64_t)nlist;
    return SIMIL_OK;
}

/* Old IVF files ("Iv..") keep each list's ids in the header, as vectors. */
static simil_status sml_fr_legacy_ids(sml_reader *r, sml_faiss_parsed *p)
{
    SML_RETURN_IF((uint64_t)p->ntotal > sml_fr_left(r) / sizeof(int64_t), SIMIL_ERR_CORRUPT,
                  "'%s' is truncated: the ids of %" PRId64 " vectors do not fit", r->path,
                  p->ntotal);
    SML_TRY(sml_calloc((void **)&p->list_sizes, (size_t)p->nlist, sizeof(int64_t), "list sizes"));
    SML_TRY(sml_alloc((void **)&p->ids, (size_t)(p->ntotal > 0 ? p->ntotal : 1), sizeof(int64_t),
                      "Faiss ids"));
    int64_t total = 0;
    for (int64_t l = 0; l < p->nlist; l++) {
        uint64_t n;
        SML_TRY(sml_fr_count(r, sizeof(int64_t), &n, "a list of ids"));
        SML_RETURN_IF(n > (uint64_t)(p->ntotal - total), SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: its lists hold more ids than its header's %" PRId64,
                      r->path, p->ntotal);
        SML_TRY(sml_reader_read(r, p->ids + total, (size_t)n * sizeof(int64_t)));
        p->list_sizes[l] = (int64_t)n;
        total += (int64_t)n;
    }
    SML_RETURN_IF(total != p->ntotal, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: its lists hold %" PRId64 " ids, its header says %" PRId64,
                  r->path, total, p->ntotal);
    return SIMIL_OK;
}

/* The direct map (id -> list position) that Faiss may keep: simil has no use
 * for it, so it is checked and skipped. */
static simil_status sml_fr_direct_map(sml_reader *r)
{
    uint8_t type;
    SML_TRY(sml_fr_u8(r, &type));
    SML_RETURN_IF(type > 2, SIMIL_ERR_CORRUPT, "'%s' is damaged: direct map of type %u", r->path,
                  (unsigned)type);
    SML_TRY(sml_fr_skip_vector(r, sizeof(int64_t), "a direct map"));
    if (type == 2) SML_TRY(sml_fr_skip_vector(r, 2 * sizeof(int64_t), "a direct map"));
    return SIMIL_OK;
}

/* The header of an index that must be trained (what: its kind, for the
 * message), into p. */
static simil_status sml_fr_trained_header(sml_reader *r, sml_faiss_parsed *p, const char *what)
{
    sml_fr_head h = {0};
    SML_TRY(sml_fr_header(r, &h));
    SML_RETURN_IF(!h.trained, SIMIL_ERR_UNSUPPORTED,
                  "'%s' holds an untrained Faiss %s; train it in Faiss before saving, "
                  "or create and train the index in simil",
                  r->path, what);
    p->dim = h.dim;
    p->ntotal = h.ntotal;
    p->metric = h.metric;
    return SIMIL_OK;
}

/* Header, nlist, nprobe, quantizer, [old: ids,] direct map. */
static simil_status sml_fr_ivf_header(sml_reader *r, sml_faiss_parsed *p, int legacy)
{
    SML_TRY(sml_fr_trained_header(r, p, "IVF index"));
    uint64_t nlist, nprobe;
    SML_TRY(sml_fr_u64(r, &nlist));
    SML_TRY(sml_fr_u64(r, &nprobe));
    SML_RETURN_IF(nprobe > (uint64_t)INT64_MAX, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: nprobe %llu", r->path, (unsigned long long)nprobe);
    p->nprobe = (int64_t)nprobe;
    SML_TRY(sml_fr_quantizer(r, p, nlist));
    if (legacy) SML_TRY(sml_fr_legacy_ids(r, p));
    return sml_fr_direct_map(r);
}

/* The codes of rows [at, at + n) of p->codes widened in place from
 * code_size to row_bytes. */
static void sml_fr_widen(const sml_faiss_parsed *p, int64_t at, int64_t n)
{
    uint8_t *rows = p->codes + (size_t)at * p->row_bytes;
    sml_rows_widen(rows, n, p->code_size, p->row_bytes);
    if (p->kind == SML_FAISS_IVF_PQ && p->pq_nbits < 8)
        for (int64_t j = 0; j < n; j++) {
            uint8_t *row = rows + (size_t)j * p->row_bytes;
            sml_pq_unpack_bits(row, p->pq_m, p->pq_nbits, row);
        }
}

/* The list sizes of "ilar": "full" (nlist sizes) or "sprs" (list, size pairs). */
static simil_status sml_fr_list_sizes(sml_reader *r, sml_faiss_parsed *p)
{
    uint32_t kind;
    uint64_t count;
    SML_TRY(sml_fr_u32(r, &kind));
    SML_RETURN_IF(kind != SML_FOURCC("full") && kind != SML_FOURCC("sprs"), SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: unknown list-size layout", r->path);
    SML_TRY(sml_calloc((void **)&p->list_sizes, (size_t)p->nlist, sizeof(int64_t), "list sizes"));
    SML_TRY(sml_fr_count(r, sizeof(uint64_t), &count, "the list sizes"));
    int full = kind == SML_FOURCC("full");
    SML_RETURN_IF(full ? count != (uint64_t)p->nlist : count % 2 != 0, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: %llu list sizes for %" PRId64 " lists", r->path,
                  (unsigned long long)count, p->nlist);
    uint64_t *v;
    SML_TRY(sml_fr_array(r, sizeof(uint64_t), count, (void **)&v, "list sizes"));
    simil_status s = SIMIL_OK;
    uint64_t limit = sml_fr_left(r) / (p->code_size + sizeof(int64_t)), total = 0;
    for (uint64_t i = 0; i < (full ? count : count / 2) && s == SIMIL_OK; i++) {
        uint64_t l = full ? i : v[2 * i], n = full ? v[i] : v[2 * i + 1];
        if (l >= (uint64_t)p->nlist || p->list_sizes[l] != 0 || n > limit - total)
            s = sml_error(SIMIL_ERR_CORRUPT,
                          "'%s' is damaged: list %llu of %llu vectors does not fit the file",
                          r->path, (unsigned long long)l, (unsigned long long)n);
        else
            p->list_sizes[l] = (int64_t)n;
        total += n;
    }
    sml_free(v);
    SML_TRY(s);
    SML_RETURN_IF(total != (uint64_t)p->ntotal, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: its lists hold %llu vectors, its header says %" PRId64,
                  r->path, (unsigned long long)total, p->ntotal);
    return SIMIL_OK;
}

/* ArrayInvertedLists ("ilar"): sizes, then codes and ids of each non-empty
 * list in turn. */
static simil_status sml_fr_invlists(sml_reader *r, sml_faiss_parsed *p)
{
    uint32_t code;
    uint64_t nlist, code_size;
    SML_TRY(sml_fr_u32(r, &code));
    if (code != SML_FOURCC("ilar")) {
        char text[5];
        sml_faiss_code_text(code, text);
        return sml_error(SIMIL_ERR_UNSUPPORTED,
                         "'%s' keeps its inverted lists as '%s'; simil reads 'ilar' "
                         "(ArrayInvertedLists, the Faiss default)",
                         r->path, text);
    }
    SML_TRY(sml_fr_u64(r, &nlist));
    SML_TRY(sml_fr_u64(r, &code_size));
    SML_RETURN_IF(nlist != (uint64_t)p->nlist || code_size != p->code_size, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: inverted lists of %llu lists and %llu-byte codes in an "
                  "index of %" PRId64 " lists and %zu-byte codes",
                  r->path, (unsigned long long)nlist, (unsigned long long)code_size, p->nlist,
                  p->code_size);
    SML_TRY(sml_fr_list_sizes(r, p));
    SML_TRY(sml_alloc((void **)&p->codes, (size_t)(p->ntotal > 0 ? p->ntotal : 1), p->row_bytes,
                      "Faiss codes"));
    SML_TRY(sml_alloc((void **)&p->ids, (size_t)(p->ntotal > 0 ? p->ntotal : 1), sizeof(int64_t),
                      "Faiss ids"));
    int64_t at = 0;
    for (int64_t l = 0; l < p->nlist; l++) {
        int64_t n = p->list_sizes[l];
        SML_TRY(sml_reader_read(r, p->codes + (size_t)at * p->row_bytes, (size_t)n * p->code_size));
        SML_TRY(sml_reader_read(r, p->ids + at, (size_t)n * sizeof(int64_t)));
        sml_fr_widen(p, at, n);
        at += n;
    }
    return SIMIL_OK;
}

/* The codes of old IVF files: one vector of elem-byte elements per list. */
static simil_status sml_fr_legacy_codes(sml_reader *r, sml_faiss_parsed *p, size_t elem)
{
    SML_RETURN_IF((uint64_t)p->ntotal > sml_fr_left(r) / p->code_size, SIMIL_ERR_CORRUPT,
                  "'%s' is truncated: %" PRId64 " codes of %zu bytes do not fit", r->path,
                  p->ntotal, p->code_size);
    SML_TRY(sml_alloc((void **)&p->codes, (size_t)(p->ntotal > 0 ? p->ntotal : 1), p->row_bytes,
                      "Faiss codes"));
    int64_t at = 0;
    for (int64_t l = 0; l < p->nlist; l++) {
        int64_t n = p->list_sizes[l];
        uint64_t count;
        SML_TRY(sml_fr_count(r, elem, &count, "a list of codes"));
        SML_RETURN_IF(count * elem != (uint64_t)n * p->code_size, SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: list %" PRId64 " has %" PRId64 " ids but %llu bytes of "
                      "codes",
                      r->path, l, n, (unsigned long long)(count * elem));
        SML_TRY(sml_reader_read(r, p->codes + (size_t)at * p->row_bytes, (size_t)(count * elem)));
        sml_fr_widen(p, at, n);
        at += n;
    }
    return SIMIL_OK;
}

/* IndexIVFPQ fields after the IVF header: by_residual, code_size, the PQ. */
static simil_status sml_fr_pq(sml_reader *r, sml_faiss_parsed *p)
{
    uint8_t by_residual;
    uint64_t code_size, d, m, nbits, count;
    SML_TRY(sml_fr_u8(r, &by_residual));
    SML_RETURN_IF(by_residual > 1, SIMIL_ERR_CORRUPT, "'%s' is damaged: by_residual=%u", r->path,
                  (unsigned)by_residual);
    SML_TRY(sml_fr_u64(r, &code_size));
    SML_TRY(sml_fr_u64(r, &d));
    SML_TRY(sml_fr_u64(r, &m));
    SML_TRY(sml_fr_u64(r, &nbits));
    sml_fr_note(p, " (nlist %" PRId64 ", nprobe %" PRId64 ", M %llu, nbits %llu, %s)", p->nlist,
                p->nprobe, (unsigned long long)m, (unsigned long long)nbits,
                by_residual ? "by_residual" : "by_residual = false");
    /* codes of the vectors scan as residuals of a zero centroid: for L2, the
     * table route that takes x - c; for IP, without the coarse similarity
     * (index_ivf_pq.c) */
    p->by_residual = by_residual;
    SML_RETURN_IF(d != (uint64_t)p->dim || m < 1 || m > d || d % m != 0 || nbits < 1 ||
                      nbits > 24 || code_size != (m * nbits + 7) / 8,
                  SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: a product quantizer of d=%llu, M=%llu, nbits=%llu, "
                  "code_size=%llu in an index of dimension %" PRId64,
                  r->path, (unsigned long long)d, (unsigned long long)m,
                  (unsigned long long)nbits, (unsigned long long)code_size, p->dim);
    SML_RETURN_IF(nbits < SML_FAISS_PQ_MIN_NBITS || nbits > SML_FAISS_PQ_NBITS,
                  SIMIL_ERR_UNSUPPORTED,
                  "'%s' is an IndexIVFPQ with nbits=%llu; simil reads PQ codes of 4 to 8 bits",
                  r->path, (unsigned long long)nbits);
    SML_TRY(sml_fr_count(r, sizeof(float), &count, "the PQ codebooks"));
    SML_RETURN_IF(count != d << nbits, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: PQ codebooks of %llu floats, %llu expected", r->path,
                  (unsigned long long)count, (unsigned long long)(d << nbits));
    SML_TRY(sml_fr_array(r, sizeof(float), count, (void **)&p->codebooks, "PQ codebooks"));
    p->pq_m = (int64_t)m;
    p->pq_nbits = (int)nbits;
    p->code_size = (size_t)code_size;
    p->row_bytes = sml_ivf_pq_row_bytes((int64_t)m, p->metric);
    return SIMIL_OK;
}

/* A ScalarQuantizer: qtype, rangestat, rangestat_arg, d, code_size, trained
 * (SQ8: vmin then vdiff, d floats each; the half types: none). */
static simil_status sml_fr_sq(sml_reader *r, sml_faiss_parsed *p)
{
    uint32_t qtype, rangestat;
    float rangestat_arg;
    uint64_t d, code_size, count;
    SML_TRY(sml_fr_u32(r, &qtype));
    SML_TRY(sml_fr_u32(r, &rangestat));
    SML_TRY(sml_reader_read(r, &rangestat_arg, 4));
    SML_TRY(sml_fr_u64(r, &d));
    SML_TRY(sml_fr_u64(r, &code_size));
    /* Faiss's ScalarQuantizer::QuantizerType, by number */
    static const char *const qtypes[] = {
        "QT_8bit", "QT_4bit", "QT_8bit_uniform", "QT_4bit_uniform", "QT_fp16",
        "QT_8bit_direct", "QT_6bit", "QT_bf16", "QT_8bit_direct_signed"};
    const char *qname = qtype < sizeof qtypes / sizeof qtypes[0] ? qtypes[qtype] : "QT_unknown";
    if (p->kind == SML_FAISS_IVF_SQ)
        sml_fr_note(p, " (nlist %" PRId64 ", nprobe %" PRId64 ", %s)", p->nlist, p->nprobe, qname);
    else
        sml_fr_note(p, " (%s)", qname);
    SML_RETURN_IF(qtype != SML_SQ_8BIT && qtype != SML_SQ_FP16 && qtype != SML_SQ_BF16,
                  SIMIL_ERR_UNSUPPORTED,
                  "'%s' uses a Faiss scalar quantizer of type %u; simil reads QT_8bit (0), "
                  "QT_fp16 (4) and QT_bf16 (7)",
                  r->path, qtype);
    p->sq_type = (sml_sq_type)qtype;
    SML_RETURN_IF(d != (uint64_t)p->dim || code_size != sml_sq_code_bytes(p->sq_type, p->dim),
                  SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: a scalar quantizer of d=%llu, code_size=%llu in an index "
                  "of dimension %" PRId64,
                  r->path, (unsigned long long)d, (unsigned long long)code_size, p->dim);
    SML_TRY(sml_fr_count(r, sizeof(float), &count, "the scalar quantizer's ranges"));
    const uint64_t want = sml_sq_needs_training(p->sq_type) ? 2 * d : 0;
    SML_RETURN_IF(count != want, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: a scalar quantizer of type %u with %llu trained floats, "
                  "%llu expected",
                  r->path, qtype, (unsigned long long)count, (unsigned long long)want);
    if (want > 0) SML_TRY(sml_fr_array(r, sizeof(float), count, (void **)&p->sq_ranges, "SQ ranges"));
    p->code_size = (size_t)code_size;
    p->row_bytes = sml_sq_stride(p->sq_type, p->dim);
    return SIMIL_OK;
}

/* IndexScalarQuantizer after its code: header, quantizer, the codes. */
static simil_status sml_fr_flat_sq(sml_reader *r, sml_faiss_parsed *p)
{
    SML_TRY(sml_fr_trained_header(r, p, "scalar quantizer"));
    p->kind = SML_FAISS_SQ;
    SML_TRY(sml_fr_sq(r, p));
    uint64_t count;
    SML_TRY(sml_fr_count(r, 1, &count, "the codes of a scalar quantizer"));
    SML_RETURN_IF(count != (uint64_t)p->ntotal * p->code_size, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: %" PRId64 " codes of %zu bytes in %llu bytes", r->path,
                  p->ntotal, p->code_size, (unsigned long long)count);
    SML_TRY(sml_alloc((void **)&p->codes, (size_t)(p->ntotal > 0 ? p->ntotal : 1), p->row_bytes,
                      "Faiss codes"));
    SML_TRY(sml_reader_read(r, p->codes, (size_t)count));
    sml_fr_widen(p, 0, p->ntotal);
    return SIMIL_OK;
}

/* IndexIVFScalarQuantizer after the IVF header: the quantizer, code_size,
 * by_residual ("IwSq" only; "IwSQ" implies it), the lists. */
static simil_status sml_fr_ivf_sq(sml_reader *r, sml_faiss_parsed *p, int has_flag)
{
    uint64_t code_size;
    uint8_t by_residual = 1;
    SML_TRY(sml_fr_sq(r, p));
    SML_TRY(sml_fr_u64(r, &code_size));
    if (has_flag) SML_TRY(sml_fr_u8(r, &by_residual));
    SML_RETURN_IF(code_size != p->code_size || by_residual > 1, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: an IVF scalar quantizer with code_size=%llu (%zu expected), "
                  "by_residual=%u",
                  r->path, (unsigned long long)code_size, p->code_size, (unsigned)by_residual);
    if (!by_residual) sml_fr_note(p, ", by_residual = false");
    p->by_residual = by_residual; /* 0: codes of the vectors, keyed alone (index_ivf_sq.c) */
    return sml_fr_invlists(r, p);
}

static simil_status sml_fr_index(sml_reader *r, sml_faiss_parsed *p, int depth);

/* IndexIDMap[2]: header, the index inside, then its ntotal external ids. */
static simil_status sml_fr_idmap(sml_reader *r, sml_faiss_parsed *p)
{
    sml_fr_head h = {0};
    SML_TRY(sml_fr_header(r, &h));
    SML_TRY(sml_fr_index(r, p, 1));
    const int64_t dim = p->pre_din ? p->pre_din : p->dim; /* the input's, before any transform */
    SML_RETURN_IF(h.dim != dim || h.ntotal != p->ntotal || h.metric != p->metric,
                  SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: an IDMap of %" PRId64 " vectors of dimension %" PRId64
                  " around an index of %" PRId64 " of dimension %" PRId64,
                  r->path, h.ntotal, h.dim, p->ntotal, p->dim);
    uint64_t count;
    SML_TRY(sml_fr_count(r, sizeof(int64_t), &count, "the IDMap's ids"));
    SML_RETURN_IF(count != (uint64_t)p->ntotal, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: an IDMap of %" PRId64 " vectors holds %llu ids", r->path,
                  p->ntotal, (unsigned long long)count);
    return sml_fr_array(r, sizeof(int64_t), count, (void **)&p->id_map, "IDMap ids");
}

/* ---- wrappers: IndexPreTransform (OPQ), IndexHNSWFlat ---- */

/* A LinearTransform without bias ("LTra", which OPQMatrix writes; "rrot", a
 * RandomRotationMatrix, the same): its matrix A (d_out x d_in, y = A x)
 * becomes simil's rotation rt = A^T.  Then d_in, d_out, is_trained. */
static simil_status sml_fr_linear(sml_reader *r, sml_faiss_parsed *p)
{
    uint32_t code;
    uint8_t have_bias, trained;
    uint64_t na, nb;
    int32_t din, dout;
    float *a = NULL, *b = NULL;
    SML_TRY(sml_fr_u32(r, &code));
    if (code != SML_FOURCC("LTra") && code != SML_FOURCC("rrot")) {
        char text[5];
        sml_faiss_code_text(code, text);
        sml_fr_note(p, " [transform '%s']", text);
        return sml_error(SIMIL_ERR_UNSUPPORTED,
                         "'%s': an IndexPreTransform by '%s' (PCA, ITQ, normalization, ... are "
                         "not read); simil reads one linear transform without bias (OPQ)",
                         r->path, text);
    }
    SML_TRY(sml_fr_u8(r, &have_bias));
    SML_TRY(sml_fr_count(r, sizeof(float), &na, "a LinearTransform's matrix"));
    SML_TRY(sml_fr_array(r, sizeof(float), na, (void **)&a, "a LinearTransform"));
    simil_status s = sml_fr_count(r, sizeof(float), &nb, "a LinearTransform's bias");
    if (s == SIMIL_OK) s = sml_fr_array(r, sizeof(float), nb, (void **)&b, "a bias");
    if (s == SIMIL_OK) s = sml_reader_read(r, &din, 4);
    if (s == SIMIL_OK) s = sml_reader_read(r, &dout, 4);
    if (s == SIMIL_OK) s = sml_fr_u8(r, &trained);
    if (s == SIMIL_OK && (have_bias > 1 || trained > 1 || din != p->pre_din || dout < 1 ||
                          dout > din || na != (uint64_t)din * (uint64_t)dout ||
                          (have_bias && nb != (uint64_t)dout)))
        s = sml_error(SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: a LinearTransform of %d -> %d with %llu coefficients in "
                      "an IndexPreTransform of dimension %" PRId64,
                      r->path, (int)din, (int)dout, (unsigned long long)na, p->pre_din);
    sml_fr_note(p, " [LinearTransform %d -> %d%s]", (int)din, (int)dout,
                have_bias ? ", with bias" : "");
    for (uint64_t j = 0; s == SIMIL_OK && have_bias && j < nb; j++)
        if (b[j] != 0)
            s = sml_error(SIMIL_ERR_UNSUPPORTED,
                          "'%s': an IndexPreTransform whose linear transform adds a bias; "
                          "simil's OPQ is a rotation without one",
                          r->path);
    if (s == SIMIL_OK && !trained)
        s = sml_error(SIMIL_ERR_UNSUPPORTED, "'%s' holds an untrained IndexPreTransform",
                      r->path);
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&p->pre_rt, (size_t)din * (size_t)dout, sizeof(float), "rotation");
    for (int64_t i = 0; s == SIMIL_OK && i < din; i++)
        for (int64_t j = 0; j < dout; j++) p->pre_rt[i * dout + j] = a[j * din + i];
    p->pre_dout = dout;
    sml_free(a);
    sml_free(b);
    return s;
}

/* IndexPreTransform: header, the number of transforms (one, linear), the
 * transform, then the index inside, which must be an IVF-PQ: simil's OPQ. */
static simil_status sml_fr_pretransform(sml_reader *r, sml_faiss_parsed *p, int depth)
{
    sml_fr_head h = {0};
    int32_t count;
    SML_TRY(sml_fr_header(r, &h));
    SML_TRY(sml_reader_read(r, &count, 4));
    SML_RETURN_IF(count < 0 || count > 64, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: an IndexPreTransform of %d transforms", r->path, (int)count);
    SML_RETURN_IF(count != 1, SIMIL_ERR_UNSUPPORTED,
                  "'%s' is an IndexPreTransform of %d transforms; simil reads one (OPQ)", r->path,
                  (int)count);
    p->pre_din = h.dim;
    SML_TRY(sml_fr_linear(r, p));
    sml_fr_note(p, " > ");
    SML_TRY(sml_fr_index(r, p, depth + 1));
    SML_RETURN_IF(p->kind != SML_FAISS_IVF_PQ, SIMIL_ERR_UNSUPPORTED,
                  "'%s' is an IndexPreTransform around a Faiss %s index; simil reads one "
                  "around an IndexIVFPQ (OPQ)",
                  r->path, sml_faiss_kind_name(p->kind));
    SML_RETURN_IF(p->dim != p->pre_dout || h.ntotal != p->ntotal || h.metric != p->metric,
                  SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: an IndexPreTransform of %" PRId64 " vectors to dimension %"
                  PRId64 " around an index of %" PRId64 " of dimension %" PRId64,
                  r->path, h.ntotal, p->pre_dout, p->ntotal, p->dim);
    return SIMIL_OK;
}

/* Skip a std::vector of elem-byte elements, returning its count. */
static simil_status sml_fr_skip_counted(sml_reader *r, size_t elem, const char *what,
                                        uint64_t *count)
{
    SML_TRY(sml_fr_count(r, elem, count, what));
    return sml_reader_seek(r, r->offset + *count * elem);
}

/* IndexHNSWFlat: header, the graph (skipped: simil searches the vectors
 * exactly, which finds at least what the graph finds), then its storage,
 * an IndexFlat that becomes the simil index. */
static simil_status sml_fr_hnsw_flat(sml_reader *r, sml_faiss_parsed *p)
{
    sml_fr_head h = {0}, hs = {0};
    uint64_t levels, count;
    int32_t fields[5]; /* entry_point, max_level, efConstruction, efSearch, upper_beam */
    int32_t cum[2] = {0, 0};
    SML_TRY(sml_fr_header(r, &h));
    SML_TRY(sml_fr_skip_counted(r, sizeof(double), "HNSW level probabilities", &count));
    SML_TRY(sml_fr_count(r, sizeof(int32_t), &levels, "HNSW neighbours per level"));
    if (levels >= 2) SML_TRY(sml_reader_read(r, cum, sizeof cum));
    SML_TRY(sml_reader_seek(r, r->offset + (levels - (levels >= 2 ? 2 : 0)) * sizeof(int32_t)));
    SML_TRY(sml_fr_skip_counted(r, sizeof(int32_t), "HNSW levels", &count));
    SML_TRY(sml_fr_skip_counted(r, sizeof(uint64_t), "HNSW offsets", &count));
    SML_TRY(sml_fr_skip_counted(r, sizeof(int32_t), "HNSW neighbours", &count));
    SML_TRY(sml_reader_read(r, fields, sizeof fields));
    sml_fr_note(p, " (M %d, %d levels, efConstruction %d, efSearch %d; searched exactly) > ",
                (int)(cum[1] - cum[0]) / 2, (int)fields[1] + 1, (int)fields[2], (int)fields[3]);
    uint32_t code;
    SML_TRY(sml_fr_u32(r, &code));
    if (!sml_fr_is_flat(code))
        return sml_faiss_unsupported(r->path, code, " as the storage of an IndexHNSWFlat");
    sml_fr_note(p, "%s", sml_faiss_name(code));
    p->kind = SML_FAISS_FLAT;
    SML_TRY(sml_fr_flat(r, &hs, &p->vectors));
    SML_RETURN_IF(hs.dim != h.dim || hs.ntotal != h.ntotal || hs.metric != h.metric,
                  SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: an IndexHNSWFlat of %" PRId64 " vectors of dimension %" PRId64
                  " stores %" PRId64 " of dimension %" PRId64,
                  r->path, h.ntotal, h.dim, hs.ntotal, hs.dim);
    p->dim = h.dim;
    p->ntotal = h.ntotal;
    p->metric = h.metric;
    return SIMIL_OK;
}

static simil_status sml_fr_index(sml_reader *r, sml_faiss_parsed *p, int depth)
{
    uint32_t code;
    SML_TRY(sml_fr_u32(r, &code));
    sml_fr_note(p, "%s", sml_faiss_name(code));
    if (code == SML_FOURCC("IxPT") && p->pre_din == 0) return sml_fr_pretransform(r, p, depth);
    if (code == SML_FOURCC("IHNf")) return sml_fr_hnsw_flat(r, p);
    if (code == SML_FOURCC("IxMp") || code == SML_FOURCC("IxM2")) {
        sml_fr_note(p, " > ");
        if (depth > 0) return sml_faiss_unsupported(r->path, code, " inside an IDMap");
        return sml_fr_idmap(r, p);
    }
    if (sml_fr_is_flat(code)) {
        sml_fr_head h = {0};
        SML_RETURN_IF(p->pre_din, SIMIL_ERR_UNSUPPORTED,
                      "'%s': an IndexPreTransform around an IndexFlat; simil reads one around "
                      "an IndexIVFPQ (OPQ)",
                      r->path);
        p->kind = SML_FAISS_FLAT;
        SML_TRY(sml_fr_flat(r, &h, &p->vectors));
        p->dim = h.dim;
        p->ntotal = h.ntotal;
        p->metric = h.metric;
        return SIMIL_OK;
    }
    int legacy = code == SML_FOURCC("IvFl") || code == SML_FOURCC("IvFL") ||
                 code == SML_FOURCC("IvPQ");
    if (code == SML_FOURCC("IwFl") || code == SML_FOURCC("IvFl") || code == SML_FOURCC("IvFL")) {
        p->kind = SML_FAISS_IVF_FLAT;
        SML_TRY(sml_fr_ivf_header(r, p, legacy));
        sml_fr_note(p, " (nlist %" PRId64 ", nprobe %" PRId64 ")", p->nlist, p->nprobe);
        p->code_size = p->row_bytes = (size_t)p->dim * sizeof(float);
        if (!legacy) return sml_fr_invlists(r, p);
        return sml_fr_legacy_codes(r, p, code == SML_FOURCC("IvFl") ? sizeof(float) : 1);
    }
    if (code == SML_FOURCC("IxSQ")) return sml_fr_flat_sq(r, p);
    if (code == SML_FOURCC("IwSQ") || code == SML_FOURCC("IwSq")) {
        p->kind = SML_FAISS_IVF_SQ;
        SML_TRY(sml_fr_ivf_header(r, p, 0));
        return sml_fr_ivf_sq(r, p, code == SML_FOURCC("IwSq"));
    }
    if (code == SML_FOURCC("IwPQ") || code == SML_FOURCC("IvPQ")) {
        p->kind = SML_FAISS_IVF_PQ;
        SML_TRY(sml_fr_ivf_header(r, p, legacy));
        SML_TRY(sml_fr_pq(r, p));
        return legacy ? sml_fr_legacy_codes(r, p, 1) : sml_fr_invlists(r, p);
    }
    return sml_faiss_unsupported(r->path, code, depth > 0 ? " inside an IDMap" : "");
}

/* ---- building the simil index ---- */

/* The ids the index gets: p->ids (the IVF's list ids, or Flat's rows), through the
 * IDMap if any, in place. */
static simil_status sml_faiss_ids(sml_faiss_parsed *p, const char *path, int64_t *next_id)
{
    int64_t max_id = -1;
    for (int64_t i = 0; i < p->ntotal; i++) {
        int64_t id = p->ids[i];
        if (p->id_map != NULL) {
            SML_RETURN_IF(id < 0 || id >= p->ntotal, SIMIL_ERR_CORRUPT,
                          "'%s' is damaged: list id %" PRId64 " outside its IDMap of %" PRId64,
                          path, id, p->ntotal);
            id = p->ids[i] = p->id_map[id];
        }
        SML_RETURN_IF(id < 0, SIMIL_ERR_UNSUPPORTED,
                      "'%s' holds the negative id %" PRId64 "; simil ids are >= 0", path, id);
        if (id > max_id) max_id = id;
    }
    /* Faiss takes any int64 id: an index holding INT64_MAX keeps next_id at
     * INT64_MAX, where it takes explicit ids only (sml_id_fits) */
    *next_id = sml_next_id_after(max_id, 0);
    return SIMIL_OK;
}

/* Through the type's add, as a fresh index takes vectors, but with the ids
 * counted here: the public add refuses the id INT64_MAX, which Faiss allows. */
static simil_status sml_faiss_fill_flat(simil_index *index, sml_faiss_parsed *p,
                                        const char *path)
{
    int64_t next_id = 0;
    SML_TRY(sml_alloc((void **)&p->ids, (size_t)(p->ntotal > 0 ? p->ntotal : 1), sizeof(int64_t),
                      "Faiss ids"));
    for (int64_t i = 0; i < p->ntotal; i++) p->ids[i] = i;
    SML_TRY(sml_faiss_ids(p, path, &next_id));
    if (p->ntotal == 0) return SIMIL_OK;
    simil_status s = sml_vectors_check(p->vectors, p->ntotal, p->dim, 1, "add");
    if (s != SIMIL_OK)
        return sml_error_context(SIMIL_ERR_UNSUPPORTED, "'%s' holds vectors simil refuses", path);
    SML_TRY(index->vt->add(index, p->ntotal, p->vectors, p->ids));
    index->ntotal = p->ntotal;
    index->next_id = next_id;
    return SIMIL_OK;
}

/* Quantizer (and codebooks), then every list in one append. */
static simil_status sml_faiss_fill_ivf(simil_index *index, sml_faiss_parsed *p, const char *path)
{
    sml_backend *b = index->backend;
    sml_ivf *ivf;
    int64_t next_id = 0;
    SML_TRY(sml_faiss_ids(p, path, &next_id));
    if (p->kind == SML_FAISS_IVF_PQ) {
        sml_pq *pq;
        int by_residual;
        sml_ivf_pq_parts(index, &ivf, &pq, &by_residual);
        SML_TRY(sml_ivf_pq_set_trained(index, p->coarse, p->codebooks, p->by_residual));
    } else if (p->kind == SML_FAISS_IVF_SQ) {
        ivf = sml_ivf_sq_ivf(index);
        sml_ivf_sq_set_by_residual(index, p->by_residual);
        SML_TRY(sml_ivf_set_centroids(b, ivf, p->coarse));
        SML_TRY(sml_sq_params_set(b, sml_ivf_sq_params(index), p->sq_ranges,
                                  p->sq_ranges + p->dim));
        index->trained = 1;
    } else {
        ivf = index->impl; /* IVF-Flat's impl is the inverted file itself */
        SML_TRY(sml_ivf_set_centroids(b, ivf, p->coarse));
        index->trained = 1;
    }
    SML_RETURN_IF(ivf->code_size != p->row_bytes || ivf->nlist != p->nlist, SIMIL_ERR_INTERNAL,
                  "Faiss codes of %zu bytes, simil's of %zu", p->row_bytes, ivf->code_size);
    if (p->ntotal > 0) {
        int64_t *lists;
        SML_TRY(sml_alloc((void **)&lists, (size_t)p->ntotal, sizeof *lists, "list numbers"));
        for (int64_t l = 0, at = 0; l < p->nlist; l++)
            for (int64_t j = 0; j < p->list_sizes[l]; j++) lists[at++] = l;
        simil_status s = p->kind == SML_FAISS_IVF_PQ
                             ? sml_ivf_pq_append(index, p->ntotal, lists, p->codes, p->ids)
                             : sml_ivf_append(b, ivf, p->ntotal, lists, p->codes, p->ids);
        sml_free(lists);
        SML_TRY(s);
    }
    index->ntotal = p->ntotal;
    index->next_id = next_id;
    index->nprobe = p->nprobe; /* Faiss's default becomes the index's */
    return SIMIL_OK;
}

/* The ranges, then the codes as the rows of one append. */
static simil_status sml_faiss_fill_sq(simil_index *index, sml_faiss_parsed *p, const char *path)
{
    int64_t next_id = 0;
    SML_TRY(sml_alloc((void **)&p->ids, (size_t)(p->ntotal > 0 ? p->ntotal : 1), sizeof(int64_t),
                      "Faiss ids"));
    for (int64_t i = 0; i < p->ntotal; i++) p->ids[i] = i;
    SML_TRY(sml_faiss_ids(p, path, &next_id));
    SML_TRY(sml_sq_params_set(index->backend, sml_sq_flat_params(index), p->sq_ranges,
                              p->sq_ranges + p->dim));
    index->trained = 1;
    SML_TRY(sml_sq_flat_append_codes(index, p->ntotal, p->codes, p->ids));
    index->ntotal = p->ntotal;
    index->next_id = next_id;
    return SIMIL_OK;
}

/* The simil index of what was read; an IndexPreTransform becomes an OPQ
 * index around the IVF-PQ inside. */
static simil_status sml_faiss_build(sml_faiss_parsed *p, const char *path, const char *device,
                                    simil_index **out)
{
    char desc[96];
    if (p->kind == SML_FAISS_FLAT)
        snprintf(desc, sizeof desc, "Flat");
    else if (p->kind == SML_FAISS_IVF_FLAT)
        snprintf(desc, sizeof desc, "IVF%" PRId64 ",Flat", p->nlist);
    else if (p->kind == SML_FAISS_IVF_PQ)
        snprintf(desc, sizeof desc, "IVF%" PRId64 ",PQ%" PRId64 "x%d", p->nlist, p->pq_m,
                 p->pq_nbits);
    else {
        const char *sq = p->sq_type == SML_SQ_8BIT   ? "SQ8"
                         : p->sq_type == SML_SQ_FP16 ? "SQfp16"
                                                     : "SQbf16";
        if (p->kind == SML_FAISS_SQ)
            snprintf(desc, sizeof desc, "%s", sq);
        else
            snprintf(desc, sizeof desc, "IVF%" PRId64 ",%s", p->nlist, sq);
    }
    simil_index *index;
    simil_status s = sml_index_new(&index, p->dim, desc, p->metric, device);
    if (s == SIMIL_ERR_INVALID_ARGUMENT)
        return sml_error_context(SIMIL_ERR_UNSUPPORTED, "'%s' is a Faiss %s index", path, desc);
    SML_TRY(s);
    s = p->kind == SML_FAISS_FLAT ? sml_faiss_fill_flat(index, p, path)
        : p->kind == SML_FAISS_SQ ? sml_faiss_fill_sq(index, p, path)
                                  : sml_faiss_fill_ivf(index, p, path);
    simil_index *outer = index;
    if (s == SIMIL_OK && p->pre_din) {
        assert(p->kind == SML_FAISS_IVF_PQ);
        s = sml_index_new_opq(&outer, p->pre_din, p->pq_m, p->pre_rt, index, device);
        if (s == SIMIL_ERR_INVALID_ARGUMENT)
            s = sml_error_context(SIMIL_ERR_UNSUPPORTED, "'%s' is a Faiss OPQ around %s", path,
                                  desc);
    }
    if (s != SIMIL_OK) {
        sml_index_free(index);
        return s;
    }
    *out = outer;
    return SIMIL_OK;
}

simil_status sml_faiss_load(const char *path, const char *device, simil_index **out)
{
    *out = NULL;
    sml_reader r;
    SML_TRY(sml_reader_open(&r, path));
    sml_faiss_parsed p;
    memset(&p, 0, sizeof p);
    simil_status s = sml_fr_index(&r, &p, 0);
    if (s == SIMIL_OK && r.offset != r.size)
        s = sml_error(SIMIL_ERR_CORRUPT, "'%s' has %llu unexpected bytes after its Faiss index",
                      path, (unsigned long long)(r.size - r.offset));
    sml_reader_close(&r);
    if (s == SIMIL_OK) s = sml_faiss_build(&p, path, device, out);
    sml_faiss_parsed_free(&p);
    return s;
}

simil_status simil_faiss_describe(const char *path, char *out, size_t size)
{
    SML_RETURN_IF(path == NULL || out == NULL || size == 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "faiss_describe: NULL argument");
    out[0] = '\0';
    sml_reader r;
    SML_TRY(sml_reader_open(&r, path));
    uint32_t code = 0;
    sml_fr_head h = {0};
    simil_status s = sml_faiss_file(path) ? SIMIL_OK
                                          : sml_error(SIMIL_ERR_CORRUPT,
                                                      "'%s' is not a Faiss index file", path);
    /* the outermost object's header: its dimension, count and metric */
    if (s == SIMIL_OK) s = sml_fr_u32(&r, &code);
    if (s == SIMIL_OK) s = sml_fr_header(&r, &h);
    sml_faiss_parsed p;
    memset(&p, 0, sizeof p);
    if (s == SIMIL_OK) s = sml_reader_seek(&r, 0);
    if (s == SIMIL_OK) {
        simil_status parsed = sml_fr_index(&r, &p, 0);
        snprintf(out, size, "%s: d=%" PRId64 ", ntotal=%" PRId64 ", metric %s%s", p.what, h.dim,
                 h.ntotal, h.metric == SIMIL_METRIC_L2 ? "l2" : "ip",
                 h.trained ? "" : ", not trained");
        if (parsed == SIMIL_ERR_CORRUPT) s = parsed;
    }
    sml_faiss_parsed_free(&p);
    sml_reader_close(&r);
    return s;
}
