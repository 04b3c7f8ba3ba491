/* blas.c: OpenBLAS through dlopen, with an address-space check (blas.h). */
#include "core/blas.h"

#include <assert.h>
#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/error.h"

#ifndef SIMIL_OPENBLAS_PATH
#define SIMIL_OPENBLAS_PATH "libopenblas.so.0"
#endif

/* What OpenBLAS 0.3.21 (OpenMP build) reserved on the development machine:
 * loading it, 171 MB with one thread and 302 MB with two (about 40 MB plus
 * 131 MB a thread); then each thread that calls sgemm for the first time, a
 * 128 MB buffer (kept for later calls), and glibc a 64 MB malloc arena for a
 * new thread.  With margins. */
static const uint64_t sml_blas_base_bytes = (uint64_t)48 << 20;
static const uint64_t sml_blas_thread_bytes = (uint64_t)144 << 20;
static const uint64_t sml_blas_caller_bytes = (uint64_t)208 << 20;

enum { SML_CBLAS_ROW_MAJOR = 101, SML_CBLAS_NO_TRANS = 111, SML_CBLAS_TRANS = 112 };

typedef void (*sml_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                             const float *, int, float, float *, int);
typedef void (*sml_sgesdd_fn)(const char *, const int *, const int *, float *, const int *,
                              float *, float *, const int *, float *, const int *, float *,
                              const int *, int *, int *);

static struct {
    pthread_mutex_t lock;
    int loaded;          /* 1 once the symbols below are set */
    int callers;         /* the most threads that called it at once so far */
    sml_sgemm_fn sgemm;
    sml_sgesdd_fn sgesdd;
    int (*get_parallel)(void);
    char *(*get_corename)(void);
} sml_blas = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Bytes of address space left under RLIMIT_AS; UINT64_MAX without a limit. */
static uint64_t sml_address_space_left(void)
{
    struct rlimit limit;
    if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL) return UINT64_MAX;
    int got = fscanf(f, "%lu", &pages);
    fclose(f);
    if (got != 1) return UINT64_MAX;
    const uint64_t used = (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
    return (uint64_t)limit.rlim_cur > used ? (uint64_t)limit.rlim_cur - used : 0;
}

/* The threads OpenBLAS sizes its buffers for at load. */
static int sml_blas_load_threads(void)
{
    int threads = omp_get_max_threads();
    const char *env = getenv("OPENBLAS_NUM_THREADS");
    if (env != NULL && atoi(env) > threads) threads = atoi(env);
    return threads > 0 ? threads : 1;
}

static simil_status sml_blas_no_room(uint64_t left, uint64_t need, const char *what)
{
    return sml_error(SIMIL_ERR_OUT_OF_MEMORY,
                     "out of address space: the limit (ulimit -v) leaves %llu MB, and %s needs "
                     "about %llu MB; raise the limit, or use fewer threads (OMP_NUM_THREADS)",
                     (unsigned long long)(left >> 20), what, (unsigned long long)(need >> 20));
}

/* The kernels this CPU deserves, by its instruction sets: "SkylakeX" with
 * AVX-512, "Haswell" with AVX2 and FMA, NULL otherwise and off x86 (these
 * are x86 kernels; OpenBLAS's own choice stands). */
static const char *sml_blas_deserved(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return NULL;
}

/* Whether OpenBLAS's kernels use AVX2 at least (its names, any case). */
static int sml_blas_core_is_modern(const char *core)
{
    static const char *const modern[] = {"haswell", "skylakex", "cooperlake", "sapphirerapids",
                                         "zen"};
    if (core == NULL) return 0;
    for (size_t i = 0; i < sizeof modern / sizeof modern[0]; i++)
        if (strncasecmp(core, modern[i], strlen(modern[i])) == 0) return 1;
    return 0;
}

/* Open OpenBLAS with the kernels this CPU's instruction sets call for.
 * Debian 12's OpenBLAS 0.3.21 took the CPU of the development machine (an
 * AVX-512 Xeon that names itself "Intel(R) Xeon(R) Processor") for a
 * Prescott, whose SSE3 GEMM ran Fashion-MNIST's exact search at 425 QPS
 * against 2,298 with SkylakeX's.  OPENBLAS_CORETYPE, read by its load-time
 * constructor, is the only way to choose, and what OpenBLAS detects is
 * known only once it is loaded; closing it to load it again unloads the
 * libgomp it brought (ThreadSanitizer fails on that, LeakSanitizer finds
 * libgomp's blocks lost).  So the variable is set for the load, when the
 * user has not set it and the CPU has AVX2 and FMA or AVX-512, and removed
 * after.  On such CPUs OpenBLAS itself picks these kernels or their kin
 * (Zen runs Haswell's, Cooper Lake SkylakeX's sgemm).  (setenv races with
 * getenv in other threads; this runs once, at the first operation that
 * needs OpenBLAS.) */
static void *sml_blas_open(void)
{
    const char *want = getenv("OPENBLAS_CORETYPE") == NULL ? sml_blas_deserved() : NULL;
    if (want != NULL) setenv("OPENBLAS_CORETYPE", want, 0);
    void *h = dlopen(SIMIL_OPENBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
    if (want != NULL) unsetenv("OPENBLAS_CORETYPE");
    return h;
}

static simil_status sml_blas_load(void)
{
    const int threads = sml_blas_load_threads();
    const uint64_t left = sml_address_space_left();
    const uint64_t need = sml_blas_base_bytes + sml_blas_thread_bytes * (uint64_t)threads;
    if (left < need) return sml_blas_no_room(left, need, "loading OpenBLAS");
    /* an OpenBLAS already in the process (numpy's, say) is the one every
     * caller of cblas_sgemm would get: take it rather than load a second */
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL) h = sml_blas_open();
    SML_RETURN_IF(h == NULL, SIMIL_ERR_UNSUPPORTED, "cannot load OpenBLAS (%s): %s",
                  SIMIL_OPENBLAS_PATH, dlerror());
    sml_blas.sgemm = (sml_sgemm_fn)dlsym(h, "cblas_sgemm");
    sml_blas.sgesdd = (sml_sgesdd_fn)dlsym(h, "sgesdd_");
    sml_blas.get_parallel = (int (*)(void))dlsym(h, "openblas_get_parallel");
    sml_blas.get_corename = (char *(*)(void))dlsym(h, "openblas_get_corename");
    SML_RETURN_IF(sml_blas.sgemm == NULL || sml_blas.sgesdd == NULL ||
                      sml_blas.get_parallel == NULL,
                  SIMIL_ERR_UNSUPPORTED,
                  "%s lacks cblas_sgemm, sgesdd_ or openblas_get_parallel", SIMIL_OPENBLAS_PATH);
    sml_blas.loaded = 1; /* the handle stays open for the process's life */
    return SIMIL_OK;
}

simil_status sml_blas_callers(int want, int *got)
{
    pthread_mutex_lock(&sml_blas.lock);
    simil_status s = sml_blas.loaded ? SIMIL_OK : sml_blas_load();
    int n = want > 0 ? want : 1;
    uint64_t left = 0, need = 0;
    if (s == SIMIL_OK && n > sml_blas.callers) {
        /* callers beyond those already served may each take a new buffer */
        left = sml_address_space_left();
        while (n > 1 && n > sml_blas.callers &&
               left < sml_blas_caller_bytes * (uint64_t)(n - sml_blas.callers))
            n--;
        need = sml_blas_caller_bytes * (uint64_t)(n - sml_blas.callers);
        if (n > sml_blas.callers && left < need)
            s = sml_blas_no_room(left, need, "OpenBLAS's GEMM buffer");
        else if (n > sml_blas.callers)
            sml_blas.callers = n;
    }
    pthread_mutex_unlock(&sml_blas.lock);
    *got = s == SIMIL_OK ? n : 0;
    return s;
}

simil_status sml_blas_ready(int callers)
{
    int got;
    SML_TRY(sml_blas_callers(callers, &got));
    return got >= callers ? SIMIL_OK
                          : sml_error(SIMIL_ERR_OUT_OF_MEMORY,
                                      "out of address space (ulimit -v) for %d OpenBLAS callers",
                                      callers);
}

void sml_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
               int64_t ldc)
{
    assert(sml_blas.loaded);
    sml_blas.sgemm(SML_CBLAS_ROW_MAJOR, trans_a ? SML_CBLAS_TRANS : SML_CBLAS_NO_TRANS,
                   trans_b ? SML_CBLAS_TRANS : SML_CBLAS_NO_TRANS, (int)m, (int)n, (int)k, alpha,
                   a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

simil_status sml_sgemm_rows(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float *a, int64_t lda, const float *b,
                            int64_t ldb, float beta, float *c, int64_t ldc, int64_t block)
{
    assert(block >= 1);
    const int64_t blocks = (m + block - 1) / block;
    int threads = omp_get_max_threads();
    if (threads > blocks) threads = blocks > 0 ? (int)blocks : 1;
    SML_TRY(sml_blas_callers(threads, &threads));
    /* the pthread build serves one caller at a time (cpu_knn.c) */
    if (sml_blas.get_parallel() == 1) threads = 1;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t i = 0; i < blocks; i++) {
        /* a team of one is not "in parallel" to OpenBLAS: this task's ICV
         * keeps each block on its thread */
        omp_set_num_threads(1);
        const int64_t r0 = i * block, rows = m - r0 < block ? m - r0 : block;
        /* row r of op(A): row r of A, or column r of A transposed */
        const float *ai = trans_a ? a + r0 : a + r0 * lda;
        sml_sgemm(trans_a, trans_b, rows, n, k, alpha, ai, lda, b, ldb, beta, c + r0 * ldc, ldc);
    }
    return SIMIL_OK;
}

void sml_sgesdd(const char *jobz, const int *m, const int *n, float *a, const int *lda, float *s,
                float *u, const int *ldu, float *vt, const int *ldvt, float *work,
                const int *lwork, int *iwork, int *info)
{
    assert(sml_blas.loaded);
    /* LAPACK's SVD makes many small BLAS calls.  OpenBLAS's OpenMP build
     * spreads each over the calling task's threads (omp_get_max_threads()),
     * and on a loaded machine every one of them waits at a barrier for a
     * thread the scheduler has set aside, spinning meanwhile: a 784 x 784
     * SVD took 14.1 s of CPU on 2 threads against 0.20 s on one (2 shared
     * cores, load average 30).  One thread then, by this task's ICV. */
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    sml_blas.sgesdd(jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork, iwork, info);
    omp_set_num_threads(threads);
}

int sml_blas_parallel(void)
{
    assert(sml_blas.loaded);
    return sml_blas.get_parallel();
}

const char *sml_blas_corename(void)
{
    assert(sml_blas.loaded);
    return sml_blas.get_corename != NULL ? sml_blas.get_corename() : NULL;
}

int sml_blas_core_wanted(void)
{
    const char *core = sml_blas_corename();
    return getenv("OPENBLAS_CORETYPE") != NULL || sml_blas_deserved() == NULL ||
           sml_blas_core_is_modern(core);
}
