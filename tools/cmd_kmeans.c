/* tools/cmd_kmeans.c: "simil kmeans" clusters a vector file and writes the
 * centroids; it prints the objective of every iteration. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char kmeans_usage[] =
    "usage: simil kmeans --data FILE -k K --out CENTROIDS [OPTIONS]\n"
    "\n"
    "Cluster the vectors of FILE with k-means (Lloyd iterations) and write the\n"
    "K centroids to CENTROIDS (.fvecs or .npy).\n"
    "\n"
    "  --data FILE         vectors: .fvecs .bvecs .ivecs .npy, idx[.gz], FILE.hdf5:NAME\n"
    "  -k K                number of clusters\n"
    "  --out FILE          centroids to write (.fvecs or .npy)\n"
    "  --iters N           iterations (default 20)\n"
    "  --init I            random (default) or k-means++\n"
    "  --max-points-per-centroid M\n"
    "                      train on a random sample of at most K*M vectors\n"
    "                      (default 256; 0 uses every vector)\n"
    "  --seed S            random seed (default 1234)\n"
    "  --spherical         unit-norm centroids (for cosine or inner product)\n"
    "  --assign FILE       also write each vector's cluster (.ivecs or .npy)\n"
    "  --device D          auto (default), cpu, gpu or gpu:N\n";

typedef struct kmeans_args {
    const char *data, *out, *init, *assign, *device;
    int64_t k, iters, max_ppc, seed;
    int spherical;
} kmeans_args;

static int kmeans_write(const char *path, int64_t rows, int64_t cols, simil_dtype dtype,
                        void *data)
{
    simil_matrix m = {rows, cols, dtype, data};
    simil_status st = simil_matrix_write(path, &m);
    return st == SIMIL_OK ? CLI_EXIT_OK : cli_fail(st, path);
}

static int kmeans_run(const kmeans_args *a)
{
    simil_matrix data = {0, 0, SIMIL_DTYPE_FLOAT32, NULL};
    int rc = cli_read_float(a->data, 0, -1, &data);
    if (rc) return rc;
    simil_kmeans_params p;
    simil_kmeans_params_init(&p);
    p.k = a->k;
    p.iterations = (int)a->iters;
    p.init = strcmp(a->init, "k-means++") == 0 ? SIMIL_KMEANS_INIT_PLUSPLUS
                                               : SIMIL_KMEANS_INIT_RANDOM;
    p.max_points_per_centroid = a->max_ppc;
    p.seed = (uint64_t)a->seed;
    p.spherical = a->spherical;
    p.device = a->device;
    if (a->k > data.rows) {
        rc = cli_error("--k %" PRId64 " is more than the %" PRId64 " points of %s", a->k,
                       data.rows, a->data);
        simil_matrix_free(&data);
        return rc;
    }
    /* k <= rows: k x cols floats are no more than the data just read */
    float *centroids = malloc(sizeof(float) * (size_t)(a->k * data.cols));
    double *objective = malloc(sizeof(double) * (size_t)(a->iters > 0 ? a->iters : 1));
    int64_t *assign = a->assign ? malloc(sizeof(int64_t) * (size_t)data.rows) : NULL;
    if (!centroids || !objective || (a->assign && !assign)) {
        rc = cli_error("out of memory for %" PRId64 " centroids", a->k);
    } else {
        double t0 = cli_now();
        simil_status st = simil_kmeans(&p, data.rows, data.cols, data.data, centroids, assign,
                                       objective);
        double seconds = cli_now() - t0;
        if (st != SIMIL_OK) {
            rc = cli_fail(st, NULL);
        } else {
            for (int64_t i = 0; i < a->iters; i++)
                printf("iteration %" PRId64 ": objective %.6g\n", i + 1, objective[i]);
            printf("k-means: n=%" PRId64 " dim=%" PRId64 " k=%" PRId64 " %" PRId64
                   " iterations in %.3f s\n",
                   data.rows, data.cols, a->k, a->iters, seconds);
            rc = kmeans_write(a->out, a->k, data.cols, SIMIL_DTYPE_FLOAT32, centroids);
            if (!rc && a->assign)
                rc = kmeans_write(a->assign, data.rows, 1, SIMIL_DTYPE_INT64, assign);
        }
    }
    free(assign);
    free(objective);
    free(centroids);
    simil_matrix_free(&data);
    return rc;
}

int cmd_kmeans(int argc, char **argv)
{
    kmeans_args a = {NULL, NULL, "random", NULL, "auto", 0, 20, 256, 1234, 0};
    const cli_opt opts[] = {
        {"data", 0, CLI_STRING, &a.data, 1, 0, 0},
        {"k", 'k', CLI_INT, &a.k, 1, 1, INT32_MAX},
        {"out", 'o', CLI_STRING, &a.out, 1, 0, 0},
        {"iters", 0, CLI_INT, &a.iters, 0, 0, 1000000},
        {"init", 0, CLI_STRING, &a.init, 0, 0, 0},
        {"max-points-per-centroid", 0, CLI_INT, &a.max_ppc, 0, 0, INT64_MAX},
        {"seed", 0, CLI_INT, &a.seed, 0, 0, INT64_MAX},
        {"spherical", 0, CLI_FLAG, &a.spherical, 0, 0, 0},
        {"assign", 0, CLI_STRING, &a.assign, 0, 0, 0},
        {"device", 0, CLI_STRING, &a.device, 0, 0, 0},
        {NULL, 0, CLI_FLAG, NULL, 0, 0, 0},
    };
    static const char *const inits[] = {"random", "k-means++", NULL};
    static const char *const matrix_suffixes[] = {".fvecs", ".npy", NULL};
    static const char *const assign_suffixes[] = {".ivecs", ".npy", NULL};
    int rc;
    if (!cli_parse(argc, argv, opts, kmeans_usage, NULL, 0, &rc)) return rc;
    if (!cli_check_choice("--init", a.init, inits)) return CLI_EXIT_USAGE;
    if (!cli_check_device("--device", a.device)) return CLI_EXIT_USAGE;
    if (!cli_check_suffix("--out", a.out, matrix_suffixes)) return CLI_EXIT_USAGE;
    if (a.assign && !cli_check_suffix("--assign", a.assign, assign_suffixes))
        return CLI_EXIT_USAGE;
    cli_progress_install(0);
    return kmeans_run(&a);
}
