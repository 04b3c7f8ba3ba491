/* alloc.c: host allocation with overflow checks, and test-time fault injection
 * for host and GPU allocations. */
#include "core/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "core/error.h"

enum { SML_ALIGN = 64 };

/* One fault-injection counter: which allocation fails next (see alloc.h). */
typedef struct sml_fault {
    atomic_int_fast64_t count;   /* allocations since the last arm */
    atomic_int_fast64_t fail_at; /* 0: never fail */
    atomic_int sticky;
} sml_fault;

static sml_fault sml_host_fault, sml_device_fault;

static int64_t sml_fault_arm(sml_fault *f, int64_t n, int sticky)
{
    int64_t made = atomic_exchange(&f->count, 0);
    atomic_store(&f->sticky, sticky);
    atomic_store(&f->fail_at, n);
    return made;
}

/* Counts one allocation; nonzero when it is to fail. */
static int sml_fault_hit(sml_fault *f)
{
    int64_t fail_at = atomic_load(&f->fail_at);
    int64_t this_one = atomic_fetch_add(&f->count, 1) + 1;
    if (fail_at <= 0) return 0;
    return this_one == fail_at || (atomic_load(&f->sticky) && this_one > fail_at);
}

int64_t sml_alloc_fail_at(int64_t n, int sticky)
{
    return sml_fault_arm(&sml_host_fault, n, sticky);
}

int64_t sml_device_alloc_fail_at(int64_t n, int sticky)
{
    return sml_fault_arm(&sml_device_fault, n, sticky);
}

int sml_device_alloc_injected_failure(void) { return sml_fault_hit(&sml_device_fault); }

void sml_huge_pages(void *p, size_t bytes)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    enum { SML_HUGE_MIN = 64 << 20, SML_PAGE = 4096 };
    if (p == NULL || bytes < SML_HUGE_MIN) return;
    const uintptr_t start = ((uintptr_t)p + SML_PAGE - 1) & ~(uintptr_t)(SML_PAGE - 1);
    const uintptr_t end = ((uintptr_t)p + bytes) & ~(uintptr_t)(SML_PAGE - 1);
    if (end > start) (void)madvise((void *)start, end - start, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

static simil_status sml_oom(size_t count, size_t size, const char *what)
{
    return sml_error(SIMIL_ERR_OUT_OF_MEMORY,
                     "out of host memory allocating %zu x %zu bytes for %s", count, size,
                     what);
}

simil_status sml_alloc(void **out, size_t count, size_t size, const char *what)
{
    *out = NULL;
    if (size != 0 && count > (SIZE_MAX - SML_ALIGN) / size) return sml_oom(count, size, what);
    size_t bytes = count * size;
    bytes = (bytes + SML_ALIGN - 1) / SML_ALIGN * SML_ALIGN;
    if (bytes == 0) bytes = SML_ALIGN;
    if (sml_fault_hit(&sml_host_fault)) return sml_oom(count, size, what);
    void *p = aligned_alloc(SML_ALIGN, bytes);
    if (p == NULL) return sml_oom(count, size, what);
    sml_huge_pages(p, bytes);
    *out = p;
    return SIMIL_OK;
}

simil_status sml_calloc(void **out, size_t count, size_t size, const char *what)
{
    SML_TRY(sml_alloc(out, count, size, what));
    memset(*out, 0, count * size);
    return SIMIL_OK;
}

/* aligned_alloc memory cannot go through realloc() portably, so this copies. */
simil_status sml_grow(void **p, size_t keep_bytes, size_t new_bytes, const char *what)
{
    void *fresh;
    SML_TRY(sml_alloc(&fresh, new_bytes, 1, what));
    if (*p != NULL && keep_bytes > 0) memcpy(fresh, *p, keep_bytes);
    sml_free(*p);
    *p = fresh;
    return SIMIL_OK;
}

void sml_free(void *p) { free(p); }

simil_status sml_strdup(char **out, const char *s)
{
    size_t n = strlen(s) + 1;
    SML_TRY(sml_alloc((void **)out, n, 1, "a string"));
    memcpy(*out, s, n);
    return SIMIL_OK;
}
