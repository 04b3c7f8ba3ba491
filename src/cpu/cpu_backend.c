/* cpu_backend.c: the CPU backend.  Backend memory is host memory, so the
 * memory operations are allocations and copies; the compute operations are
 * in the other cpu_*.c files. */
#include "cpu/cpu_backend.h"

#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "cpu/cpu_knn.h"

static void sml_cpu_close(sml_backend *b) { sml_free(b); }

static simil_status sml_cpu_mem_alloc(sml_backend *b, size_t bytes, void **mem)
{
    return sml_alloc(mem, bytes, 1, "index data");
}

static void sml_cpu_mem_free(sml_backend *b, void *mem) { sml_free(mem); }

static simil_status sml_cpu_mem_copy(sml_backend *b, void *dst, const void *src, size_t bytes)
{
    if (bytes > 0) memcpy(dst, src, bytes);
    return SIMIL_OK;
}

static simil_status sml_cpu_gather_rows(sml_backend *b, void *dst, const void *src,
                                        size_t row_bytes, int64_t n, const int64_t *rows)
{
    char *d = dst;
    const char *s = src;
#pragma omp parallel for schedule(static) if (n * (int64_t)row_bytes > (1 << 20))
    for (int64_t i = 0; i < n; i++)
        memcpy(d + (size_t)i * row_bytes, s + (size_t)rows[i] * row_bytes, row_bytes);
    return SIMIL_OK;
}

static simil_status sml_cpu_row_norms(sml_backend *b, int64_t n, int64_t dim, const float *x,
                                      float *norms)
{
#pragma omp parallel for schedule(static) if (n * dim > (1 << 18))
    for (int64_t i = 0; i < n; i++) norms[i] = sml_cpu_dot(x + i * dim, x + i * dim, dim);
    return SIMIL_OK;
}

static simil_status sml_cpu_knn_op(sml_backend *b, const sml_knn_args *args)
{
    return sml_cpu_knn(args);
}

static const sml_backend_ops sml_cpu_ops = {
    .close = sml_cpu_close,
    .mem_alloc = sml_cpu_mem_alloc,
    .mem_free = sml_cpu_mem_free,
    .mem_upload = sml_cpu_mem_copy,
    .mem_download = sml_cpu_mem_copy,
    .mem_copy = sml_cpu_mem_copy,
    .mem_gather_rows = sml_cpu_gather_rows,
    .row_norms = sml_cpu_row_norms,
    .knn = sml_cpu_knn_op,
};

simil_status sml_cpu_backend_open(sml_backend **out)
{
    sml_backend *b;
    SML_TRY(sml_calloc((void **)&b, 1, sizeof *b, "the CPU backend"));
    b->ops = &sml_cpu_ops;
    b->gpu = -1;
    int threads = omp_get_max_threads();
    snprintf(b->name, sizeof b->name, "cpu (%d thread%s)", threads, threads == 1 ? "" : "s");
    *out = b;
    return SIMIL_OK;
}
