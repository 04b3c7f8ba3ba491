/* index_factory.c: an index's life below the public API.  sml_index_new
 * makes an index of the type its description names on the device it names;
 * sml_index_append adds prepared vectors with the id bookkeeping every type
 * shares; sml_index_free destroys one.  The public API (index.c), the file
 * readers (index_file.c, faiss_read.c) and the wrapper types (OPQ, Refine,
 * shards, which hold inner indexes) build on these, so none of them has to
 * call back into index.c. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "index/index_internal.h"
#include "index/search_batch.h"

static simil_status sml_index_make(simil_index **out, int64_t dim, const char *description,
                                   simil_metric metric, const char *device, int loading)
{
    SML_RETURN_IF(out == NULL, SIMIL_ERR_INVALID_ARGUMENT, "index pointer is NULL");
    *out = NULL;
    SML_RETURN_IF(dim < 1 || dim > ((int64_t)1 << 24), SIMIL_ERR_INVALID_ARGUMENT,
                  "dimension %" PRId64 " is out of range [1, %d]", dim, 1 << 24);
    SML_RETURN_IF(metric != SIMIL_METRIC_L2 && metric != SIMIL_METRIC_IP &&
                      metric != SIMIL_METRIC_COSINE,
                  SIMIL_ERR_INVALID_ARGUMENT, "unknown metric %d", (int)metric);
    sml_index_spec spec;
    SML_TRY(sml_index_spec_parse(description, dim, &spec));
    sml_placement placement;
    SML_TRY(sml_device_placement(device, &placement));
    simil_status (*init)(simil_index *) = NULL;
    if (spec.shards || placement.count > 1) {
        const int64_t shards = spec.shards ? spec.shards : placement.count / placement.replicas;
        SML_RETURN_IF(placement.count != 1 && placement.count != shards * placement.replicas,
                      SIMIL_ERR_INVALID_ARGUMENT,
                      "index '%s' has %" PRId64 " shards, device '%s' names %d devices in %d "
                      "replica(s); give %" PRId64 " devices per replica, or one device",
                      description, shards, device, placement.count, placement.replicas, shards);
        spec.shards = shards;
        init = sml_shards_init;
    } else if (spec.refine) {
        init = sml_refine_init;
    } else if (spec.opq_m) {
        init = sml_opq_init;
    } else if (spec.encoding == SML_ENCODING_FLAT) {
        init = spec.ivf_nlist ? sml_ivf_flat_init : sml_flat_init;
    } else if (spec.encoding == SML_ENCODING_PQ) {
        init = sml_ivf_pq_init;
    } else if (spec.encoding == SML_ENCODING_XFBQ) {
        init = spec.ivf_nlist ? sml_ivf_xfbq_init : sml_xfbq_flat_init;
    } else if (spec.encoding == SML_ENCODING_SQ) {
        init = spec.ivf_nlist ? sml_ivf_sq_init : sml_sq_flat_init;
    }
    SML_RETURN_IF(init == NULL, SIMIL_ERR_UNSUPPORTED,
                  "index '%s' is valid, but this version of simil cannot build it",
                  description);
    simil_index *index;
    SML_TRY(sml_calloc((void **)&index, 1, sizeof *index, "an index"));
    index->spec = spec;
    sml_index_spec_format(&spec, index->description, sizeof index->description);
    index->dim = dim;
    index->metric = metric;
    snprintf(index->device, sizeof index->device, "%s", device ? device : "auto");
    simil_status s = sml_device_open(placement.device[0], &index->backend);
    if (s == SIMIL_OK) s = sml_batcher_create(&index->batcher);
    index->loading = loading;
    if (s == SIMIL_OK) s = init(index);
    index->loading = 0;
    if (s != SIMIL_OK) {
        sml_batcher_destroy(index->batcher);
        sml_backend_close(index->backend);
        sml_free(index);
        return s;
    }
    if (index->vt->batchable) sml_batcher_set(index->batcher, 1, SML_BATCH_DEFAULT_WAIT_US);
    *out = index;
    return SIMIL_OK;
}

simil_status sml_index_new(simil_index **out, int64_t dim, const char *description,
                           simil_metric metric, const char *device)
{
    return sml_index_make(out, dim, description, metric, device, 0);
}

simil_status sml_index_new_to_load(simil_index **out, int64_t dim, const char *description,
                                   simil_metric metric, const char *device)
{
    return sml_index_make(out, dim, description, metric, device, 1);
}

simil_status sml_index_inner(const simil_index *outer, const sml_index_spec *spec, int64_t dim,
                             simil_metric metric, simil_index **inner)
{
    char desc[96];
    sml_index_spec_format(spec, desc, sizeof desc);
    SML_TRY(sml_index_new(inner, dim, desc, metric, outer->device));
    /* the outer index batches its callers; the inner sees one call at a time */
    sml_batcher_set((*inner)->batcher, 0, 0);
    (*inner)->ntotal = outer->ntotal;
    (*inner)->next_id = outer->next_id;
    return SIMIL_OK;
}

simil_status sml_index_append(simil_index *index, int64_t n, const float *x, const int64_t *ids)
{
    assert(index->trained && n >= 0);
    int64_t max_id = index->next_id - 1;
    if (ids != NULL) {
        for (int64_t i = 0; i < n; i++) {
            SML_RETURN_IF(ids[i] < 0 || ids[i] == INT64_MAX, SIMIL_ERR_INVALID_ARGUMENT,
                          "add: ids[%" PRId64 "]=%" PRId64 " is out of range; ids must be in "
                          "[0, 2^63-2] (-1 marks empty result slots)",
                          i, ids[i]);
            if (ids[i] > max_id) max_id = ids[i];
        }
    }
    /* sequential ids end at 2^63-2, so that next_id never passes INT64_MAX */
    SML_RETURN_IF(ids == NULL && index->next_id > INT64_MAX - n, SIMIL_ERR_INVALID_ARGUMENT,
                  "add: sequential ids from %" PRId64 " for %" PRId64 " vectors would pass "
                  "2^63-2, the largest id; pass ids explicitly",
                  index->next_id, n);
    if (n == 0) return SIMIL_OK;
    int64_t *own_ids = NULL;
    if (ids == NULL) {
        SML_TRY(sml_alloc((void **)&own_ids, (size_t)n, sizeof *own_ids, "ids"));
        for (int64_t i = 0; i < n; i++) own_ids[i] = index->next_id + i;
        max_id = index->next_id + n - 1;
    }
    simil_status s = index->vt->add(index, n, x, ids ? ids : own_ids);
    if (s == SIMIL_OK) {
        index->ntotal += n;
        index->next_id = max_id + 1;
    }
    sml_free(own_ids);
    return s;
}

simil_status sml_index_new_opq(simil_index **out, int64_t dim, int64_t m, const float *rt,
                               simil_index *inner, const char *device)
{
    char desc[128];
    snprintf(desc, sizeof desc, "OPQ%" PRId64 "_%" PRId64 ",%s", m, inner->dim,
             inner->description);
    SML_TRY(sml_index_new(out, dim, desc, inner->metric, device));
    simil_status s = sml_opq_adopt(*out, rt, inner);
    if (s != SIMIL_OK) {
        sml_index_free(*out);
        *out = NULL;
    }
    return s;
}

void sml_index_free(simil_index *index)
{
    if (index == NULL) return;
    index->vt->destroy(index);
    sml_batcher_destroy(index->batcher);
    sml_backend_close(index->backend);
    sml_free(index);
}
