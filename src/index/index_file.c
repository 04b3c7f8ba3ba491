/* index_file.c: the simil index file, format versions 1 and 2.
 *
 *   "SIMILIDX" u32 version u32 0
 *   section HEAD: u32 metric, u32 trained, i64 dim, i64 ntotal, i64 next_id,
 *                 u32 length, description bytes
 *   the index type's sections (see its save function)
 *   version 2 only: section SRCH, the search defaults: i64 nprobe
 *   section END  (empty), then the end of the file
 * An index with no search default set is written as version 1, byte for
 * byte as before version 2 existed, so older readers still load it; one
 * with defaults is version 2, which they refuse by its number.
 * Integers are little-endian.  Sections are checksummed (file_io.h).  The
 * file is written atomically; loading checks every size against the file
 * before allocating, so damaged files fail cleanly. */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "index/index_internal.h"

static const char sml_magic[8] = {'S', 'I', 'M', 'I', 'L', 'I', 'D', 'X'};
static const uint32_t sml_file_version = 2;
static const uint32_t sml_tag_head = SML_TAG('H', 'E', 'A', 'D');
static const uint32_t sml_tag_end = SML_TAG('E', 'N', 'D', ' ');
static const uint32_t sml_tag_search = SML_TAG('S', 'R', 'C', 'H');

typedef struct sml_head {
    uint32_t metric;
    uint32_t trained;
    int64_t dim;
    int64_t ntotal;
    int64_t next_id;
    uint32_t desc_len;
} sml_head;

enum { SML_HEAD_BYTES = 4 + 4 + 8 + 8 + 8 + 4 };

static void sml_head_pack(const sml_head *h, unsigned char *p)
{
    memcpy(p, &h->metric, 4);
    memcpy(p + 4, &h->trained, 4);
    memcpy(p + 8, &h->dim, 8);
    memcpy(p + 16, &h->ntotal, 8);
    memcpy(p + 24, &h->next_id, 8);
    memcpy(p + 32, &h->desc_len, 4);
}

static void sml_head_unpack(sml_head *h, const unsigned char *p)
{
    memcpy(&h->metric, p, 4);
    memcpy(&h->trained, p + 4, 4);
    memcpy(&h->dim, p + 8, 8);
    memcpy(&h->ntotal, p + 16, 8);
    memcpy(&h->next_id, p + 24, 8);
    memcpy(&h->desc_len, p + 32, 4);
}

static simil_status sml_index_write_all(const simil_index *index, sml_writer *w)
{
    const int defaults = index->nprobe != 0;
    uint32_t version[2] = {defaults ? sml_file_version : 1, 0};
    SML_TRY(sml_writer_write(w, sml_magic, sizeof sml_magic));
    SML_TRY(sml_writer_write(w, version, sizeof version));
    sml_head h = {
        .metric = (uint32_t)index->metric,
        .trained = (uint32_t)index->trained,
        .dim = index->dim,
        .ntotal = index->ntotal,
        .next_id = index->next_id,
        .desc_len = (uint32_t)strlen(index->description),
    };
    unsigned char packed[SML_HEAD_BYTES];
    sml_head_pack(&h, packed);
    SML_TRY(sml_section_begin(w, sml_tag_head, SML_HEAD_BYTES + h.desc_len));
    SML_TRY(sml_writer_write(w, packed, sizeof packed));
    SML_TRY(sml_writer_write(w, index->description, h.desc_len));
    SML_TRY(sml_section_end(w));
    SML_TRY(index->vt->save(index, w));
    if (defaults) SML_TRY(sml_section_write(w, sml_tag_search, &index->nprobe, 8));
    return sml_section_write(w, sml_tag_end, NULL, 0);
}

/* The size of the file, from a dry run of the save. */
static simil_status sml_index_file_bytes(const simil_index *index, uint64_t *bytes)
{
    sml_writer *w;
    SML_TRY(sml_writer_open_measure(&w));
    simil_status s = sml_index_write_all(index, w);
    *bytes = sml_writer_bytes(w);
    sml_writer_abort(w);
    return s;
}

simil_status sml_index_file_save(const simil_index *index, const char *path)
{
    uint64_t bytes;
    SML_TRY(sml_index_file_bytes(index, &bytes));
    SML_TRY(sml_file_space_check(path, bytes));
    sml_writer *w;
    SML_TRY(sml_writer_open(&w, path));
    simil_status s = sml_index_write_all(index, w);
    if (s != SIMIL_OK) {
        sml_writer_abort(w);
        return sml_error_context(s, "saving '%s' (the old file, if any, is intact)", path);
    }
    return sml_writer_commit(w);
}

static simil_status sml_index_read_head(sml_reader *r, sml_head *h, uint32_t *file_version,
                                        char *desc, size_t desc_size)
{
    char magic[8];
    uint32_t version[2];
    SML_RETURN_IF(r->size < sizeof magic + sizeof version, SIMIL_ERR_CORRUPT,
                  "'%s' is not a simil index: it is only %llu bytes", r->path,
                  (unsigned long long)r->size);
    SML_TRY(sml_reader_read(r, magic, sizeof magic));
    SML_RETURN_IF(memcmp(magic, sml_magic, sizeof magic) != 0, SIMIL_ERR_CORRUPT,
                  "'%s' is not a simil index (wrong magic number)", r->path);
    SML_TRY(sml_reader_read(r, version, sizeof version));
    SML_RETURN_IF(version[0] < 1 || version[0] > sml_file_version || version[1] != 0,
                  SIMIL_ERR_CORRUPT,
                  "'%s' has index format version %u; this simil reads versions 1 to %u",
                  r->path, version[0], sml_file_version);
    *file_version = version[0];
    uint64_t length;
    SML_TRY(sml_section_open(r, sml_tag_head, &length));
    SML_RETURN_IF(length < SML_HEAD_BYTES || length - SML_HEAD_BYTES >= desc_size,
                  SIMIL_ERR_CORRUPT, "'%s' is damaged: header of %llu bytes", r->path,
                  (unsigned long long)length);
    unsigned char packed[SML_HEAD_BYTES];
    SML_TRY(sml_section_read(r, packed, sizeof packed));
    sml_head_unpack(h, packed);
    SML_RETURN_IF(h->desc_len != length - SML_HEAD_BYTES, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: bad description length", r->path);
    SML_TRY(sml_section_read(r, desc, h->desc_len));
    desc[h->desc_len] = '\0';
    SML_TRY(sml_section_close(r));
    SML_RETURN_IF(h->ntotal < 0 || h->next_id < 0 || h->dim < 1 || h->metric > 2 ||
                      h->trained > 1,
                  SIMIL_ERR_CORRUPT, "'%s' is damaged: impossible header values", r->path);
    /* Every stored vector takes at least 8 bytes of id: a cheap bound that
     * stops a damaged count from driving a huge allocation. */
    SML_RETURN_IF((uint64_t)h->ntotal > r->size / 8, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: it claims %" PRId64 " vectors in %llu bytes", r->path,
                  h->ntotal, (unsigned long long)r->size);
    return SIMIL_OK;
}

/* Version 2's search defaults. */
static simil_status sml_index_read_search(simil_index *index, sml_reader *r)
{
    uint64_t length;
    int64_t nprobe;
    SML_TRY(sml_section_open(r, sml_tag_search, &length));
    SML_RETURN_IF(length != 8, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: search defaults of %llu bytes", r->path,
                  (unsigned long long)length);
    SML_TRY(sml_section_read(r, &nprobe, 8));
    SML_RETURN_IF(nprobe < 0 || (nprobe > 0 && index->spec.ivf_nlist == 0), SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: default nprobe %" PRId64 " for index '%s'", r->path, nprobe,
                  index->description);
    index->nprobe = nprobe;
    return sml_section_close(r);
}

static simil_status sml_index_read_all(simil_index **out, sml_reader *r, const char *device)
{
    sml_head h = {0};
    char desc[128];
    uint32_t version = 0;
    SML_TRY(sml_index_read_head(r, &h, &version, desc, sizeof desc));
    simil_index *index;
    sml_index_spec spec;
    if (h.dim > ((int64_t)1 << 24) || sml_index_spec_parse(desc, h.dim, &spec) != SIMIL_OK)
        return sml_error_context(SIMIL_ERR_CORRUPT, "'%s' is damaged", r->path);
    /* a trained inverted file stores its centroids: a file too small for them
     * is damaged, and is refused before they are allocated */
    const int64_t coded_dim = spec.opq_m ? spec.opq_dim : h.dim;
    SML_RETURN_IF(h.trained && (uint64_t)(spec.ivf_nlist * coded_dim) > r->size / sizeof(float),
                  SIMIL_ERR_CORRUPT, "'%s' is damaged: %" PRId64 " lists cannot fit in %llu bytes",
                  r->path, spec.ivf_nlist, (unsigned long long)r->size);
    /* an RR index stores its dim x dim rotation, trained or not (and making
     * one costs an SVD): a file too small for it is refused first */
    SML_RETURN_IF(spec.rotate && (uint64_t)(h.dim * h.dim) > r->size / sizeof(float),
                  SIMIL_ERR_CORRUPT, "'%s' is damaged: a rotation of %" PRId64 " x %" PRId64
                  " cannot fit in %llu bytes", r->path, h.dim, h.dim,
                  (unsigned long long)r->size);
    /* One unsharded index cannot be spread over several devices as it loads:
     * sharding splits the vectors as they are added. */
    sml_placement placement;
    SML_TRY(sml_device_placement(device, &placement));
    SML_RETURN_IF(!spec.shards && placement.count > 1, SIMIL_ERR_INVALID_ARGUMENT,
                  "'%s' holds one unsharded %s index, which loads onto one device, not the %d "
                  "of '%s'; to search on several, build it with that device string ('%s')",
                  r->path, desc, placement.count, device, device);
    simil_status s = sml_index_new_to_load(&index, h.dim, desc, (simil_metric)h.metric, device);
    SML_TRY(s);
    index->ntotal = h.ntotal;
    index->next_id = h.next_id;
    /* a type with nothing to train is trained, whatever a damaged header says */
    index->trained = index->vt->train == NULL ? 1 : (int)h.trained;
    s = index->vt->load(index, r);
    if (s == SIMIL_OK && version >= 2) s = sml_index_read_search(index, r);
    uint64_t length = 0;
    if (s == SIMIL_OK) s = sml_section_open(r, sml_tag_end, &length);
    if (s == SIMIL_OK) s = sml_section_close(r);
    if (s == SIMIL_OK && r->offset != r->size)
        s = sml_error(SIMIL_ERR_CORRUPT, "'%s' has %llu unexpected bytes after its end", r->path,
                      (unsigned long long)(r->size - r->offset));
    if (s != SIMIL_OK) {
        sml_index_free(index);
        return s;
    }
    *out = index;
    return SIMIL_OK;
}

simil_status sml_index_file_load(simil_index **out, const char *path, const char *device)
{
    sml_reader r;
    SML_TRY(sml_reader_open(&r, path));
    simil_status s = sml_index_read_all(out, &r, device);
    sml_reader_close(&r);
    return s;
}
