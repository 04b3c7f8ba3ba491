/* tools/cmd_info.c: "simil info" loads a saved index on the CPU and prints
 * what it holds, then what this build of simil can run on. */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>

#include "cli.h"

static const char info_usage[] =
    "usage: simil info INDEX\n"
    "\n"
    "Print the description, metric, dimension, size and file size of a saved\n"
    "index, and whether this build has CUDA and how many GPUs it sees.\n";

int cmd_info(int argc, char **argv)
{
    const cli_opt opts[] = {{NULL, 0, CLI_FLAG, NULL, 0, 0, 0}};
    const char *path = NULL;
    simil_index *index = NULL;
    struct stat sb;
    int rc;
    if (!cli_parse(argc, argv, opts, info_usage, &path, 1, &rc)) return rc;
    simil_status st = simil_index_load(&index, path, "cpu");
    if (st != SIMIL_OK) return cli_fail(st, path);
    printf("file: %s\n", path);
    printf("description: %s\n", simil_index_description(index));
    printf("metric: %s\n", simil_metric_name(simil_index_metric(index)));
    printf("dim: %" PRId64 "\n", simil_index_dim(index));
    printf("size: %" PRId64 "\n", simil_index_size(index));
    printf("trained: %s\n", simil_index_is_trained(index) ? "yes" : "no");
    if (stat(path, &sb) == 0) printf("file size: %lld bytes\n", (long long)sb.st_size);
    printf("built with CUDA: %s\n", simil_built_with_cuda() ? "yes" : "no");
    printf("GPUs: %d\n", simil_gpu_count());
    simil_index_destroy(index);
    return CLI_EXIT_OK;
}
