/* index_opq.c: "OPQm[_d],...", a learned rotation in front of another index
 * (in practice IVF-PQ).  Training learns the rotation (algo/opq.c) on the
 * training vectors, then trains the inner index on the rotated ones; add,
 * search and reconstruct rotate on the way in and out, on the host. */
#include <string.h>

#include "algo/opq.h"
#include "core/alloc.h"
#include "core/error.h"
#include "index/index_internal.h"

static const uint32_t sml_tag_rotation = SML_TAG('O', 'P', 'Q', 'R');

typedef struct sml_opq {
    float *rt;            /* dim x dout; NULL until trained or loaded */
    int64_t dout;
    simil_index *inner;   /* dimension dout */
} sml_opq;

static sml_opq *sml_opq_of(const simil_index *index) { return index->impl; }

/* y = x rotated, in a new buffer. */
static simil_status sml_opq_rotate(const simil_index *index, int64_t n, const float *x, float **y)
{
    const sml_opq *o = sml_opq_of(index);
    SML_RETURN_IF(!sml_product_fits(n, o->dout, SML_MAX_FLOATS - 1), SIMIL_ERR_INVALID_ARGUMENT,
                  "OPQ: %" PRId64 " rotated vectors of dimension %" PRId64
                  " exceed the address space",
                  n, o->dout);
    SML_TRY(sml_alloc((void **)y, (size_t)(n * o->dout + 1), sizeof(float), "rotated vectors"));
    simil_status s = sml_opq_apply(n, index->dim, o->dout, o->rt, x, *y);
    if (s != SIMIL_OK) {
        sml_free(*y);
        *y = NULL;
    }
    return s;
}

static simil_status sml_opq_train_index(simil_index *index, int64_t n, const float *x)
{
    sml_opq *o = sml_opq_of(index);
    float *rt, *y = NULL;
    SML_TRY(sml_alloc((void **)&rt, (size_t)(index->dim * o->dout), sizeof(float), "rotation"));
    simil_status s = sml_opq_train(index->backend, n, index->dim, o->dout, index->spec.opq_m, x, rt);
    if (s == SIMIL_OK) {
        float *old = o->rt;
        o->rt = rt;
        s = sml_opq_rotate(index, n, x, &y);
        if (s == SIMIL_OK) s = simil_index_train(o->inner, n, y);
        if (s == SIMIL_OK) rt = old; else o->rt = old;
        sml_free(y);
    }
    sml_free(rt);
    return s;
}

static simil_status sml_opq_add(simil_index *index, int64_t n, const float *x, const int64_t *ids)
{
    float *y;
    SML_TRY(sml_opq_rotate(index, n, x, &y));
    simil_status s = simil_index_add(sml_opq_of(index)->inner, n, y, ids);
    sml_free(y);
    return s;
}

static simil_status sml_opq_search(const simil_index *index, const sml_search_call *call)
{
    float *y;
    SML_TRY(sml_opq_rotate(index, call->nq, call->queries, &y));
    simil_status s = simil_index_search(sml_opq_of(index)->inner, call->nq, y, call->k,
                                        &call->params, call->distances, call->labels);
    sml_free(y);
    return s;
}

static simil_status sml_opq_remove(simil_index *index, int64_t n, const int64_t *sorted,
                                   int64_t *removed)
{
    return simil_index_remove(sml_opq_of(index)->inner, n, sorted, removed);
}

static simil_status sml_opq_reconstruct(const simil_index *index, int64_t id, float *out)
{
    const sml_opq *o = sml_opq_of(index);
    float *y;
    SML_TRY(sml_alloc((void **)&y, (size_t)o->dout, sizeof(float), "a vector"));
    simil_status s = simil_index_reconstruct(o->inner, id, y);
    if (s == SIMIL_OK) s = sml_opq_unapply(1, index->dim, o->dout, o->rt, y, out);
    sml_free(y);
    return s;
}

static void sml_opq_ids(const simil_index *index, int64_t *out)
{
    const simil_index *inner = sml_opq_of(index)->inner;
    inner->vt->ids(inner, out);
}

static void sml_opq_reset(simil_index *index) { simil_index_reset(sml_opq_of(index)->inner); }

static simil_status sml_opq_save(const simil_index *index, sml_writer *w)
{
    if (!index->trained) return SIMIL_OK;
    const sml_opq *o = sml_opq_of(index);
    SML_TRY(sml_section_write(w, sml_tag_rotation, o->rt,
                              sizeof(float) * (uint64_t)(index->dim * o->dout)));
    return o->inner->vt->save(o->inner, w);
}

static simil_status sml_opq_load(simil_index *index, sml_reader *r)
{
    sml_opq *o = sml_opq_of(index);
    o->inner->ntotal = index->ntotal;
    o->inner->next_id = index->next_id;
    o->inner->trained = index->trained;
    if (!index->trained) return o->inner->vt->load(o->inner, r);
    uint64_t bytes;
    SML_TRY(sml_section_open(r, sml_tag_rotation, &bytes));
    SML_RETURN_IF(bytes != sizeof(float) * (uint64_t)(index->dim * o->dout), SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: an OPQ rotation of %llu bytes", r->path,
                  (unsigned long long)bytes);
    if (o->rt == NULL) SML_TRY(sml_alloc((void **)&o->rt, (size_t)bytes, 1, "rotation"));
    SML_TRY(sml_section_read(r, o->rt, (size_t)bytes));
    SML_TRY(sml_section_close(r));
    return o->inner->vt->load(o->inner, r);
}

static void sml_opq_destroy(simil_index *index)
{
    sml_opq *o = sml_opq_of(index);
    simil_index_destroy(o->inner);
    sml_free(o->rt);
    sml_free(o);
}

void sml_opq_parts(const simil_index *index, float **rt, int64_t *dout, simil_index **inner)
{
    sml_opq *o = sml_opq_of(index);
    *rt = o->rt;
    *dout = o->dout;
    *inner = o->inner;
}

simil_status sml_opq_adopt(simil_index *index, const float *rt, simil_index *inner)
{
    sml_opq *o = sml_opq_of(index);
    SML_RETURN_IF(inner->dim != o->dout || strcmp(inner->description, o->inner->description) != 0,
                  SIMIL_ERR_INTERNAL, "OPQ around '%s' of dimension %" PRId64 " given '%s' of %" PRId64,
                  o->inner->description, o->dout, inner->description, inner->dim);
    if (o->rt == NULL) /* an untrained OPQ holds no rotation yet */
        SML_TRY(sml_alloc((void **)&o->rt, (size_t)(index->dim * o->dout), sizeof(float),
                          "rotation"));
    memcpy(o->rt, rt, sizeof(float) * (size_t)(index->dim * o->dout));
    sml_index_free(o->inner);
    o->inner = inner;
    index->trained = inner->trained;
    index->ntotal = inner->ntotal;
    index->next_id = inner->next_id;
    index->nprobe = inner->nprobe;
    return SIMIL_OK;
}

static const sml_index_vtable sml_opq_vtable = {
    .train = sml_opq_train_index,
    .add = sml_opq_add,
    .search = sml_opq_search,
    .remove = sml_opq_remove,
    .reconstruct = sml_opq_reconstruct,
    .ids = sml_opq_ids,
    .reset = sml_opq_reset,
    .save = sml_opq_save,
    .load = sml_opq_load,
    .destroy = sml_opq_destroy,
};

simil_status sml_opq_init(simil_index *index)
{
    sml_opq *o;
    SML_TRY(sml_calloc((void **)&o, 1, sizeof *o, "an OPQ index"));
    o->dout = index->spec.opq_dim;
    sml_index_spec inner = index->spec;
    inner.opq_m = 0;
    inner.opq_dim = 0;
    /* the rotation is allocated when it gets values (train, load) */
    simil_status s = sml_index_inner(index, &inner, o->dout, index->metric, &o->inner);
    if (s != SIMIL_OK) {
        sml_free(o);
        return s;
    }
    index->impl = o;
    index->vt = &sml_opq_vtable;
    index->trained = 0;
    return SIMIL_OK;
}
