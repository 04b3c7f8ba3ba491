/* index_shards.c: one index over several devices (the GPU paper, "Multi-GPU"):
 * S shards x R replicas of an inner index, each part on its own device.
 *
 * Shards split the vectors: add gives each shard a contiguous share of every
 * batch, in parallel; a search goes to every shard of a replica, in parallel,
 * and one more k-selection, on the first shard's device, merges their lists.
 * Replicas split the queries.  IVF shards share one coarse quantizer (and PQ
 * codebooks): the first part is trained, and its trained state is copied to
 * the others through an index file.  The saved form is "Shards<S>,<inner>",
 * one replica's shards in order; it loads onto S x R devices, or all onto
 * one device. */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "index/index_internal.h"

typedef struct sml_shards {
    int shards;
    int replicas;
    simil_index **parts;  /* replica r, shard s at parts[r * shards + s] */
} sml_shards;

static sml_shards *sml_shards_of(const simil_index *index) { return index->impl; }

/* ---- running one job on every part, in parallel ------------------------ */

typedef struct sml_part_job {
    simil_index *part;
    simil_status (*run)(struct sml_part_job *job);
    int64_t n;
    const float *x;
    const int64_t *ids;
    int64_t k;
    const simil_search_params *params;
    float *distances;
    int64_t *labels;
    int64_t removed;
    int omp_threads;
    simil_status status;
    char message[256];
} sml_part_job;

static void *sml_part_thread(void *arg)
{
    sml_part_job *job = arg;
    /* The parts share the cores: each thread's OpenMP team (host-side
     * planning, CPU parts' searches) gets its share, not all of them.  This
     * share alone did not lift replication; sizing the query check's team
     * to its work did (core/vectors.c; docs/benchmarks.md, "Tried and
     * dropped"). */
    const int before = omp_get_max_threads();  /* restored: this may be the caller's thread */
    omp_set_num_threads(job->omp_threads);
    job->status = job->run(job);
    omp_set_num_threads(before);
    if (job->status != SIMIL_OK)
        snprintf(job->message, sizeof job->message, "%s", simil_last_error());
    return NULL;
}

/* Run jobs[0..n) concurrently, job 0 on the calling thread (which would
 * only wait, and whose OpenMP workers are already up, so a search saves a
 * thread start and join); the first failure, with its
 * message, wins. */
static simil_status sml_parts_run(sml_part_job *jobs, int n)
{
    pthread_t threads[SML_MAX_PARTS];
    int started[SML_MAX_PARTS] = {0};
    const int share = omp_get_max_threads() / n;
    for (int i = 0; i < n; i++) {
        jobs[i].omp_threads = share > 1 ? share : 1;
        if (i > 0) started[i] = pthread_create(&threads[i], NULL, sml_part_thread, &jobs[i]) == 0;
    }
    sml_part_thread(&jobs[0]);
    for (int i = 1; i < n; i++) {
        if (started[i]) pthread_join(threads[i], NULL);
        else sml_part_thread(&jobs[i]);
    }
    for (int i = 0; i < n; i++)
        if (jobs[i].status != SIMIL_OK)
            return sml_error(jobs[i].status, "part %d: %s", i, jobs[i].message);
    return SIMIL_OK;
}

static simil_status sml_job_add(sml_part_job *j) { return simil_index_add(j->part, j->n, j->x, j->ids); }

/* The outer index already checked and prepared the queries: go straight to
 * the part's type (a second check per part would also start one more OpenMP
 * team per thread, fighting over the cores the GPU threads need). */
static simil_status sml_job_search(sml_part_job *j)
{
    if (j->n == 0) return SIMIL_OK;
    if (j->part->ntotal == 0) {
        const float empty = j->part->metric == SIMIL_METRIC_L2 ? INFINITY : -INFINITY;
        for (int64_t i = 0; i < j->n * j->k; i++) {
            j->distances[i] = empty;
            j->labels[i] = -1;
        }
        return SIMIL_OK;
    }
    sml_search_call call = {.nq = j->n, .queries = j->x, .k = j->k, .params = *j->params,
                            .distances = j->distances, .labels = j->labels};
    return j->part->vt->search(j->part, &call);
}

static simil_status sml_job_remove(sml_part_job *j)
{
    return simil_index_remove(j->part, j->n, j->ids, &j->removed);
}

/* ---- training: the first part, then copies --------------------------- */

/* *copy = part, on device, through a temporary index file. */
static simil_status sml_part_clone(const simil_index *part, const char *device,
                                   simil_index **copy)
{
    char path[4096];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/simil-shard-XXXXXX", tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    SML_RETURN_IF(fd < 0, SIMIL_ERR_IO,
                  "cannot create a temporary file in %s to copy an index between devices",
                  tmp ? tmp : "/tmp");
    close(fd);
    simil_status s = simil_index_save(part, path);
    if (s == SIMIL_OK) s = simil_index_load(copy, path, device);
    unlink(path);
    return s;
}

/* Replace parts [first, count) by copies of parts[i % shards] made on their
 * own devices: training state to every part, or shards to every replica. */
static simil_status sml_shards_copy_parts(simil_index *index, int first)
{
    sml_shards *sh = sml_shards_of(index);
    const int parts = sh->shards * sh->replicas;
    sml_placement where;
    SML_TRY(sml_device_placement(index->device, &where));
    simil_index *copies[SML_MAX_PARTS] = {NULL};
    simil_status s = SIMIL_OK;
    for (int i = first; i < parts && s == SIMIL_OK; i++) {
        const simil_index *from = sh->parts[first == 1 ? 0 : i % sh->shards];
        s = sml_part_clone(from, where.device[where.count == 1 ? 0 : i], &copies[i]);
    }
    if (s != SIMIL_OK) {
        for (int i = first; i < parts; i++) simil_index_destroy(copies[i]);
        return s;
    }
    for (int i = first; i < parts; i++) {
        simil_index_destroy(sh->parts[i]);
        sh->parts[i] = copies[i];
    }
    return SIMIL_OK;
}

/* Part 0's copy is trained and copied to the other parts, and all of them
 * replace the old parts only once every copy is made.  Copying part 0 to
 * the others is only right while they are empty: a sharded Flat or flat
 * XFBQ index holding vectors would get shard 0's vectors in every shard. */
static simil_status sml_shards_train(simil_index *index, int64_t n, const float *x)
{
    sml_shards *sh = sml_shards_of(index);
    if (sh->parts[0]->vt->train == NULL) return SIMIL_OK; /* nothing to train (Flat) */
    SML_RETURN_IF(index->ntotal > 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "train: the sharded index '%s' holds %" PRId64 " vectors, which its shards "
                  "would lose; remove them first (reset the index), then train and add",
                  index->description, index->ntotal);
    sml_placement where;
    SML_TRY(sml_device_placement(index->device, &where));
    simil_index *trained = NULL;
    simil_status s = sml_part_clone(sh->parts[0], where.device[0], &trained);
    if (s == SIMIL_OK) s = simil_index_train(trained, n, x);
    if (s != SIMIL_OK) {
        simil_index_destroy(trained);
        return s;
    }
    simil_index *old = sh->parts[0];
    sh->parts[0] = trained;
    s = sml_shards_copy_parts(index, 1);
    if (s != SIMIL_OK) {
        sh->parts[0] = old;
        old = trained;
    }
    simil_index_destroy(old);
    return s;
}

/* ---- add, search, remove --------------------------------------------- */

static simil_status sml_shards_add(simil_index *index, int64_t n, const float *x,
                                   const int64_t *ids)
{
    sml_shards *sh = sml_shards_of(index);
    const int parts = sh->shards * sh->replicas;
    sml_part_job jobs[SML_MAX_PARTS];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < parts; i++) {
        const int s = i % sh->shards;
        const int64_t lo = n * s / sh->shards, hi = n * (s + 1) / sh->shards;
        jobs[i] = (sml_part_job){.part = sh->parts[i], .run = sml_job_add, .n = hi - lo,
                                 .x = x + lo * index->dim, .ids = ids + lo};
    }
    simil_status s = sml_parts_run(jobs, parts);
    if (s != SIMIL_OK) {
        /* take back what the parts that succeeded added, by id: a copy of one
         * of these ids that a part held before goes too (ids may repeat) */
        for (int i = 0; i < parts; i++)
            if (jobs[i].status == SIMIL_OK && jobs[i].n > 0)
                simil_index_remove(sh->parts[i], jobs[i].n, jobs[i].ids, NULL);
    }
    return s;
}

/* Merge S lists of k (distances, labels) per query into the best k, with
 * the k-selection of the first shard's backend, which takes host memory. */
static simil_status sml_shards_merge(const simil_index *index, int64_t nq, int64_t k,
                                     const float *d, const int64_t *l, float *out_d,
                                     int64_t *out_l)
{
    sml_shards *sh = sml_shards_of(index);
    sml_backend *b = sh->parts[0]->backend;
    const int64_t cols = sh->shards * k;
    int64_t *column;
    SML_TRY(sml_alloc((void **)&column, (size_t)(nq * k), sizeof *column, "merge"));
    simil_status s = b->ops->select_k(b, nq, cols, d, k, index->metric != SIMIL_METRIC_L2, out_d,
                                      column);
    if (s == SIMIL_OK)
        for (int64_t q = 0; q < nq; q++)
            for (int64_t j = 0; j < k; j++) {
                const int64_t c = column[q * k + j];
                out_l[q * k + j] = c < 0 ? -1 : l[q * cols + c];
            }
    sml_free(column);
    return s;
}

static simil_status sml_shards_search(const simil_index *index, const sml_search_call *call)
{
    sml_shards *sh = sml_shards_of(index);
    const int64_t k = call->k, nq = call->nq;
    const int64_t cols = sh->shards * k;
    /* Replicas alone write their rows of the result in place.  With shards,
     * shard s of replica r writes its own block of the rows of its replica's
     * queries, and those blocks are merged below. */
    const int in_place = sh->shards == 1;
    float *d = NULL, *part_d = NULL;
    int64_t *l = NULL, *part_l = NULL;
    simil_status s = SIMIL_OK;
    if (!in_place) {
        const size_t cells = (size_t)(nq * cols);
        s = sml_alloc((void **)&d, cells, sizeof *d, "shard results");
        if (s == SIMIL_OK) s = sml_alloc((void **)&l, cells, sizeof *l, "shard results");
        if (s == SIMIL_OK) s = sml_alloc((void **)&part_d, cells, sizeof *part_d, "shard results");
        if (s == SIMIL_OK) s = sml_alloc((void **)&part_l, cells, sizeof *part_l, "shard results");
    }
    /* one search per part, all in parallel */
    const int parts = sh->shards * sh->replicas;
    sml_part_job jobs[SML_MAX_PARTS];
    memset(jobs, 0, sizeof jobs);
    if (s == SIMIL_OK) {
        for (int i = 0; i < parts; i++) {
            const int r = i / sh->shards, sidx = i % sh->shards;
            const int64_t lo = nq * r / sh->replicas, hi = nq * (r + 1) / sh->replicas;
            const size_t at = in_place ? (size_t)(lo * k) : (size_t)(lo * cols + sidx * (hi - lo) * k);
            jobs[i] = (sml_part_job){.part = sh->parts[i], .run = sml_job_search, .n = hi - lo,
                                     .x = call->queries + lo * index->dim, .k = k,
                                     .params = &call->params,
                                     .distances = (in_place ? call->distances : part_d) + at,
                                     .labels = (in_place ? call->labels : part_l) + at};
        }
        s = sml_parts_run(jobs, parts);
    }
    if (s == SIMIL_OK && !in_place) {
        /* from [replica block][shard][query][k] to [query][shard][k] */
        for (int i = 0; i < parts; i++) {
            const int r = i / sh->shards, sidx = i % sh->shards;
            const int64_t lo = nq * r / sh->replicas, m = jobs[i].n;
            for (int64_t q = 0; q < m; q++) {
                memcpy(d + (lo + q) * cols + sidx * k, jobs[i].distances + q * k, sizeof *d * (size_t)k);
                memcpy(l + (lo + q) * cols + sidx * k, jobs[i].labels + q * k, sizeof *l * (size_t)k);
            }
        }
        s = sml_shards_merge(index, nq, k, d, l, call->distances, call->labels);
    }
    sml_free(part_d);
    sml_free(part_l);
    sml_free(d);
    sml_free(l);
    return s;
}

static simil_status sml_shards_remove(simil_index *index, int64_t n, const int64_t *sorted,
                                      int64_t *removed)
{
    sml_shards *sh = sml_shards_of(index);
    const int parts = sh->shards * sh->replicas;
    sml_part_job jobs[SML_MAX_PARTS];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < parts; i++)
        jobs[i] = (sml_part_job){.part = sh->parts[i], .run = sml_job_remove, .n = n, .ids = sorted};
    SML_TRY(sml_parts_run(jobs, parts));
    *removed = 0;
    for (int s = 0; s < sh->shards; s++) *removed += jobs[s].removed;
    return SIMIL_OK;
}

static simil_status sml_shards_reconstruct(const simil_index *index, int64_t id, float *out)
{
    sml_shards *sh = sml_shards_of(index);
    for (int s = 0; s < sh->shards; s++)
        if (simil_index_reconstruct(sh->parts[s], id, out) == SIMIL_OK) return SIMIL_OK;
    return sml_error(SIMIL_ERR_INVALID_ARGUMENT, "reconstruct: id %" PRId64 " is not in the index",
                     id);
}

static void sml_shards_reset(simil_index *index)
{
    sml_shards *sh = sml_shards_of(index);
    for (int i = 0; i < sh->shards * sh->replicas; i++) simil_index_reset(sh->parts[i]);
}

/* ---- files: per shard, its counters and its type's sections ------------ */

static const uint32_t sml_tag_shard = SML_TAG('S', 'H', 'R', 'D');

static simil_status sml_shards_save(const simil_index *index, sml_writer *w)
{
    sml_shards *sh = sml_shards_of(index);
    for (int s = 0; s < sh->shards; s++) {
        const simil_index *p = sh->parts[s];
        int64_t head[3] = {p->ntotal, p->next_id, p->trained};
        SML_TRY(sml_section_write(w, sml_tag_shard, head, sizeof head));
        SML_TRY(p->vt->save(p, w));
    }
    return SIMIL_OK;
}

static simil_status sml_shards_load(simil_index *index, sml_reader *r)
{
    sml_shards *sh = sml_shards_of(index);
    int64_t total = 0;
    for (int s = 0; s < sh->shards; s++) {
        int64_t head[3];
        uint64_t bytes;
        SML_TRY(sml_section_open(r, sml_tag_shard, &bytes));
        SML_RETURN_IF(bytes != sizeof head, SIMIL_ERR_CORRUPT, "'%s' is damaged: bad shard header",
                      r->path);
        SML_TRY(sml_section_read(r, head, sizeof head));
        SML_TRY(sml_section_close(r));
        SML_RETURN_IF(head[0] < 0 || head[1] < 0 || head[2] < 0 || head[2] > 1 ||
                          head[0] > index->ntotal - total || head[1] > index->next_id,
                      SIMIL_ERR_CORRUPT, "'%s' is damaged: impossible shard header", r->path);
        simil_index *p = sh->parts[s];
        p->ntotal = head[0];
        p->next_id = head[1];
        p->trained = (int)head[2];
        total += head[0];
        SML_TRY(p->vt->load(p, r));
    }
    SML_RETURN_IF(total != index->ntotal, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: shards hold %" PRId64 " vectors, the header says %" PRId64,
                  r->path, total, index->ntotal);
    /* replicas: copies of the first replica's shards */
    return sh->replicas == 1 ? SIMIL_OK : sml_shards_copy_parts(index, sh->shards);
}

static void sml_shards_ids(const simil_index *index, int64_t *out)
{
    sml_shards *sh = sml_shards_of(index);
    for (int s = 0; s < sh->shards; s++) {
        const simil_index *p = sh->parts[s];
        p->vt->ids(p, out);
        out += p->ntotal;
    }
}

static void sml_shards_destroy(simil_index *index)
{
    sml_shards *sh = sml_shards_of(index);
    for (int i = 0; i < sh->shards * sh->replicas; i++) simil_index_destroy(sh->parts[i]);
    sml_free(sh->parts);
    sml_free(sh);
}

static const sml_index_vtable sml_shards_vtable = {
    .train = sml_shards_train,
    .add = sml_shards_add,
    .search = sml_shards_search,
    .remove = sml_shards_remove,
    .reconstruct = sml_shards_reconstruct,
    .ids = sml_shards_ids,
    .reset = sml_shards_reset,
    .save = sml_shards_save,
    .load = sml_shards_load,
    .destroy = sml_shards_destroy,
};

simil_status sml_shards_init(simil_index *index)
{
    sml_placement where;
    SML_TRY(sml_device_placement(index->device, &where));
    sml_shards *sh;
    SML_TRY(sml_calloc((void **)&sh, 1, sizeof *sh, "a sharded index"));
    sh->shards = (int)index->spec.shards;
    sh->replicas = where.count == 1 ? 1 : where.replicas;
    const int parts = sh->shards * sh->replicas;
    simil_status s = parts <= SML_MAX_PARTS
                         ? sml_calloc((void **)&sh->parts, (size_t)parts, sizeof *sh->parts, "parts")
                         : sml_error(SIMIL_ERR_INVALID_ARGUMENT, "at most %d parts", SML_MAX_PARTS);
    sml_index_spec inner = index->spec;
    inner.shards = 0;
    char desc[96];
    sml_index_spec_format(&inner, desc, sizeof desc);
    for (int i = 0; i < parts && s == SIMIL_OK; i++)
        s = sml_index_new(&sh->parts[i], index->dim, desc, index->metric,
                          where.device[where.count == 1 ? 0 : i]);
    if (s != SIMIL_OK) {
        for (int i = 0; sh->parts && i < parts; i++) simil_index_destroy(sh->parts[i]);
        sml_free(sh->parts);
        sml_free(sh);
        return s;
    }
    index->impl = sh;
    index->vt = &sml_shards_vtable;
    index->trained = sh->parts[0]->trained;
    return SIMIL_OK;
}
