/* tools/cmd_info.c: "simil info" says what an index file is (simil's or
 * Faiss's), loads it on the CPU and prints what it holds, then what this
 * build of simil can run on.  A Faiss file of a type simil does not load is
 * still described (simil_faiss_describe), with the reason it does not load. */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const char info_usage[] =
    "usage: simil info INDEX [--json]\n"
    "\n"
    "Say whether INDEX is a simil or a Faiss index file, and print its\n"
    "description, metric, dimension, size, default nprobe and file size, and\n"
    "whether this build has CUDA and how many GPUs it sees.  A Faiss file is\n"
    "also described object by object (e.g. IndexIDMap2 > IndexIVFFlat), even\n"
    "one of a type simil does not load: then 'loads: no' says why, and the\n"
    "exit status is still 0.\n"
    "\n"
    "  --json   print one JSON object on stdout\n";

typedef struct info_file {
    const char *path;
    int faiss;              /* a Faiss index file */
    char structure[512];    /* Faiss: its objects */
    const simil_index *index; /* NULL when it does not load */
    const char *why;        /* why not */
    long long bytes;        /* file size, -1 if unknown */
} info_file;

static void info_json(const info_file *f)
{
    const simil_index *ix = f->index;
    putchar('{');
    cli_json_string(stdout, "file", f->path, ", ");
    cli_json_string(stdout, "format", f->faiss ? "faiss" : "simil", ", ");
    if (f->faiss) cli_json_string(stdout, "faiss", f->structure, ", ");
    printf("\"loads\": %s, ", ix ? "true" : "false");
    if (!ix) cli_json_string(stdout, "why_not", f->why, ", ");
    if (ix) {
        cli_json_string(stdout, "description", simil_index_description(ix), ", ");
        cli_json_string(stdout, "metric", simil_metric_name(simil_index_metric(ix)), ", ");
        printf("\"dim\": %" PRId64 ", \"size\": %" PRId64 ", \"trained\": %s, ",
               simil_index_dim(ix), simil_index_size(ix),
               simil_index_is_trained(ix) ? "true" : "false");
        if (simil_index_nprobe(ix) > 0) printf("\"nprobe\": %" PRId64 ", ", simil_index_nprobe(ix));
    }
    if (f->bytes >= 0) printf("\"file_size\": %lld, ", f->bytes);
    printf("\"built_with_cuda\": %s, \"gpus\": %d}\n", simil_built_with_cuda() ? "true" : "false",
           simil_gpu_count());
}

static void info_text(const info_file *f)
{
    const simil_index *ix = f->index;
    printf("file: %s\n", f->path);
    printf("format: %s\n", f->faiss ? "faiss" : "simil");
    if (f->faiss) printf("faiss: %s\n", f->structure);
    if (ix) {
        printf("loads: yes\n");
        printf("description: %s\n", simil_index_description(ix));
        printf("metric: %s\n", simil_metric_name(simil_index_metric(ix)));
        printf("dim: %" PRId64 "\n", simil_index_dim(ix));
        printf("size: %" PRId64 "\n", simil_index_size(ix));
        printf("trained: %s\n", simil_index_is_trained(ix) ? "yes" : "no");
        if (simil_index_nprobe(ix) > 0) printf("nprobe: %" PRId64 "\n", simil_index_nprobe(ix));
    } else {
        printf("loads: no: %s\n", f->why);
    }
    if (f->bytes >= 0) printf("file size: %lld bytes\n", f->bytes);
    printf("built with CUDA: %s\n", simil_built_with_cuda() ? "yes" : "no");
    printf("GPUs: %d\n", simil_gpu_count());
}

int cmd_info(int argc, char **argv)
{
    int json = 0;
    const cli_opt opts[] = {
        {"json", 0, CLI_FLAG, &json, 0, 0, 0},
        {NULL, 0, CLI_FLAG, NULL, 0, 0, 0},
    };
    info_file f = {.bytes = -1};
    simil_index *index = NULL;
    char why[1024] = "";
    struct stat sb;
    int rc;
    if (!cli_parse(argc, argv, opts, info_usage, &f.path, 1, &rc)) return rc;
    f.faiss = simil_faiss_describe(f.path, f.structure, sizeof f.structure) == SIMIL_OK;
    simil_status st = simil_index_load(&index, f.path, "cpu");
    /* a Faiss file of a type simil does not load is described all the same */
    if (st != SIMIL_OK && !(f.faiss && st == SIMIL_ERR_UNSUPPORTED)) return cli_fail(st, f.path);
    if (st != SIMIL_OK) snprintf(why, sizeof why, "%s", simil_last_error());
    f.index = index;
    f.why = why;
    if (stat(f.path, &sb) == 0) f.bytes = (long long)sb.st_size;
    if (json) info_json(&f);
    else info_text(&f);
    simil_index_destroy(index);
    return CLI_EXIT_OK;
}
