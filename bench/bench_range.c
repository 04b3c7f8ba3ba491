/* bench_range.c: range search and filtered search, as a program (not a test),
 * on uniform data of docs/datasets.md (uniform1M is N = 1000000, dim 128).
 *
 *   bench_range range  DEVICES N NQ COUNT [DESC [PARAMS]]
 *   bench_range filter DEVICES N NQ K DESC [PARAMS]
 *
 * DEVICES: comma-separated, e.g. cpu,gpu.  DESC defaults to Flat.
 * range: the radius is the median over the queries of their COUNT-th
 * neighbour's distance (found on the first device), so a query has about
 * COUNT neighbours inside; per device, the median of 3 timed range searches
 * (after a warm-up), its QPS, and how its results differ from the first
 * device's (queries whose counts differ, pairs in one and not the other).
 * filter: per device, k neighbours with a random 1%, 10% and 50% of the ids
 * allowed (as a bitset), each timed in turns with the unfiltered search (the
 * medians of 3 pairs, 201 below 100 queries per call), and the ratio of the
 * filtered QPS to the unfiltered one of its turns. */
#define _POSIX_C_SOURCE 200809L /* CLOCK_MONOTONIC under -std=c11 (clang) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "simil/simil.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void die(const char *what)
{
    fprintf(stderr, "%s: %s\n", what, simil_last_error());
    exit(1);
}

static simil_index *build(const char *desc, const char *device, int64_t n, int64_t dim,
                          const float *x)
{
    simil_index *index;
    if (simil_index_create(&index, dim, desc, SIMIL_METRIC_L2, device)) die("create");
    if (simil_index_train(index, n < 200000 ? n : 200000, x)) die("train");
    if (simil_index_add(index, n, x, NULL)) die("add");
    return index;
}

/* Pairs in a but not in b, over queries; *counts: queries whose counts differ. */
static int64_t range_diff(const simil_range_result *a, const simil_range_result *b,
                          int64_t *counts)
{
    int64_t only = 0;
    *counts = 0;
    for (int64_t q = 0; q < a->nq; q++) {
        const int64_t na = a->offsets[q + 1] - a->offsets[q];
        const int64_t nb = b->offsets[q + 1] - b->offsets[q];
        *counts += na != nb;
        int64_t *x = malloc(sizeof(int64_t) * (size_t)(na + nb + 1)), *y = x + na;
        memcpy(x, a->labels + a->offsets[q], sizeof(int64_t) * (size_t)na);
        memcpy(y, b->labels + b->offsets[q], sizeof(int64_t) * (size_t)nb);
        qsort(x, (size_t)na, sizeof *x, cmp_id);
        qsort(y, (size_t)nb, sizeof *y, cmp_id);
        for (int64_t i = 0, j = 0; i < na; i++) {
            while (j < nb && y[j] < x[i]) j++;
            only += !(j < nb && y[j] == x[i]);
        }
        free(x);
    }
    return only;
}

static int bench_range(char **devices, int ndev, int64_t n, int64_t nq, int64_t count,
                       const char *desc, const simil_search_params *p, const float *x,
                       const float *q)
{
    float radius = 0;
    simil_range_result *first = NULL;
    double first_qps = 0;
    for (int dv = 0; dv < ndev; dv++) {
        simil_index *index = build(desc, devices[dv], n, 128, x);
        if (dv == 0) {
            float *d = malloc(sizeof(float) * (size_t)(nq * count));
            int64_t *l = malloc(sizeof(int64_t) * (size_t)(nq * count));
            double *kth = malloc(sizeof(double) * (size_t)nq);
            if (simil_index_search(index, nq, q, count, p, d, l)) die("search");
            for (int64_t i = 0; i < nq; i++) kth[i] = d[i * count + count - 1];
            qsort(kth, (size_t)nq, sizeof *kth, cmp_double);
            radius = (float)kth[nq / 2];
            free(d);
            free(l);
            free(kth);
        }
        simil_range_result *r = NULL;
        if (simil_index_range_search(index, nq, q, radius, p, &r)) die("range search");
        double t[3];
        for (int i = 0; i < 3; i++) {
            simil_range_result_destroy(r);
            const double t0 = now();
            if (simil_index_range_search(index, nq, q, radius, p, &r)) die("range search");
            t[i] = now() - t0;
        }
        qsort(t, 3, sizeof t[0], cmp_double);
        const double qps = (double)nq / t[1];
        printf("%s %s: radius %g, %lld results (%.1f per query), %.4f s, %.0f QPS", desc,
               simil_backend_name(index), (double)radius, (long long)r->offsets[nq],
               (double)r->offsets[nq] / (double)nq, t[1], qps);
        if (dv == 0) {
            first = r;
            first_qps = qps;
            printf("\n");
        } else {
            int64_t counts_a, counts_b;
            const int64_t a = range_diff(r, first, &counts_a), b = range_diff(first, r, &counts_b);
            printf(", %.2fx %s; %lld queries with other counts, %lld pairs only here, %lld only "
                   "there\n",
                   qps / first_qps, devices[0], (long long)counts_a, (long long)a, (long long)b);
            simil_range_result_destroy(r);
        }
        simil_index_destroy(index);
    }
    simil_range_result_destroy(first);
    return 0;
}

/* Unfiltered (params base) and filtered (params p) searches timed in turns,
 * so that a drift of the clocks or of other work over the run falls on both:
 * pairs in alternating order, 3 of them (201 below 100 queries per call,
 * where one call takes well under a millisecond and its time spreads
 * widely), after a warm-up of each; the medians of each side go to *tu and
 * *tf.  0, or -1 where a search failed. */
static int time_pairs(const simil_index *index, int64_t nq, const float *q, int64_t k,
                      const simil_search_params *base, const simil_search_params *p, float *d,
                      int64_t *l, double *tu, double *tf)
{
    enum { MANY = 201 };
    double u[MANY], f[MANY];
    const int reps = nq < 100 ? MANY : 3;
    if (simil_index_search(index, nq, q, k, base, d, l) ||
        simil_index_search(index, nq, q, k, p, d, l))
        return -1;
    for (int i = 0; i < reps; i++)
        for (int side = 0; side < 2; side++) {
            const int filtered = (i + side) % 2;  /* F then U on odd pairs */
            const double t0 = now();
            if (simil_index_search(index, nq, q, k, filtered ? p : base, d, l)) return -1;
            (filtered ? f : u)[i] = now() - t0;
        }
    qsort(u, (size_t)reps, sizeof u[0], cmp_double);
    qsort(f, (size_t)reps, sizeof f[0], cmp_double);
    *tu = u[reps / 2];
    *tf = f[reps / 2];
    return 0;
}

static int bench_filter(char **devices, int ndev, int64_t n, int64_t nq, int64_t k,
                        const char *desc, const simil_search_params *base, const float *x,
                        const float *q)
{
    float *d = malloc(sizeof(float) * (size_t)(nq * k));
    int64_t *l = malloc(sizeof(int64_t) * (size_t)(nq * k));
    uint8_t *bits = malloc((size_t)(n + 7) / 8);
    const int percents[] = {1, 10, 50};
    for (int dv = 0; dv < ndev; dv++) {
        simil_index *index = build(desc, devices[dv], n, 128, x);
        printf("%s %s k=%lld:", desc, simil_backend_name(index), (long long)k);
        for (int i = 0; i < 3; i++) {
            uint64_t s = 12345u + (uint64_t)i;
            memset(bits, 0, (size_t)(n + 7) / 8);
            for (int64_t id = 0; id < n; id++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                if ((int)((s >> 33) % 100) < percents[i]) bits[id / 8] |= (uint8_t)(1u << (id % 8));
            }
            simil_search_params *p;
            if (simil_search_params_create(&p)) die("params");
            for (int j = 0; j < simil_search_param_count(); j++) {
                const char *name = simil_search_param_get_info(j)->name;
                char v[64];
                if (simil_search_params_get(base, name, v, sizeof v) ||
                    simil_search_params_set(p, name, v))
                    die("params");
            }
            if (simil_search_params_allow_bitset(p, n, bits)) die("allow");
            double tu, tf;
            if (time_pairs(index, nq, q, k, base, p, d, l, &tu, &tf) < 0)
                printf(" %d%%: %s;", percents[i], simil_last_error());
            else
                printf(" %d%%: %.0f QPS (%.2fx; unfiltered %.0f QPS in turn with it);",
                       percents[i], (double)nq / tf, tu / tf, (double)nq / tu);
            simil_search_params_destroy(p);
        }
        printf("\n");
        simil_index_destroy(index);
    }
    free(bits);
    free(d);
    free(l);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 6 || (strcmp(argv[1], "range") != 0 && strcmp(argv[1], "filter") != 0)) {
        fprintf(stderr, "usage: bench_range range DEVICES N NQ COUNT [DESC [PARAMS]]\n"
                        "       bench_range filter DEVICES N NQ K DESC [PARAMS]\n");
        return 2;
    }
    char *devices[8];
    int ndev = 0;
    for (char *tok = strtok(argv[2], ","); tok && ndev < 8; tok = strtok(NULL, ","))
        devices[ndev++] = tok;
    const int64_t n = atoll(argv[3]), nq = atoll(argv[4]), count = atoll(argv[5]);
    const char *desc = argc > 6 ? argv[6] : "Flat";
    simil_search_params *p;
    if (simil_search_params_create(&p)) die("params");
    if (argc > 7 && simil_search_params_parse(p, argv[7])) die("params");
    float *x = malloc(sizeof(float) * (size_t)(n * 128)), *q = malloc(sizeof(float) * (size_t)(nq * 128));
    if (!x || !q) return 1;
    if (simil_generate("uniform", 0, n, 128, 1, x) || simil_generate("uniform", 0, nq, 128, 2, q))
        die("generate");
    const int rc = strcmp(argv[1], "range") == 0
                       ? bench_range(devices, ndev, n, nq, count, desc, p, x, q)
                       : bench_filter(devices, ndev, n, nq, count, desc, p, x, q);
    simil_search_params_destroy(p);
    free(x);
    free(q);
    return rc;
}
