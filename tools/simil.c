/* tools/simil.c: main() of the simil tool: the table of subcommands,
 * "simil --help" and "simil --version".  Each subcommand lives in its own
 * cmd_<name>.c file and gets argv starting at its own name. */
#include <stdio.h>
#include <string.h>

#include "cli.h"


static const struct {
    const char *name;
    cli_command_fn run;
    const char *summary;
} commands[] = {
    {"gen", cmd_gen, "write synthetic vectors (the generators of docs/datasets.md)"},
    {"build", cmd_build, "train an index on vectors (a file or a generator), add them, save it"},
    {"search", cmd_search, "search a saved index; time it and measure recall"},
    {"gt", cmd_gt, "exact neighbours of queries in data larger than memory (ground truth)"},
    {"info", cmd_info, "describe a saved index and this build"},
    {"bench", cmd_bench, "recall-QPS sweeps over index settings: table, CSV, JSON, plot"},
    {"kmeans", cmd_kmeans, "cluster vectors with k-means and write the centroids"},
    {"knn-graph", cmd_knn_graph, "build the k-NN graph of a vector file; measure its quality"},
    {"path", cmd_path, "the path through a k-NN graph with the smallest largest step"},
};

static void usage(FILE *out)
{
    fputs("usage: simil COMMAND [OPTIONS]\n"
          "       simil --help | --version\n"
          "\n"
          "Similarity search on CPUs and NVIDIA GPUs.\n"
          "\n"
          "Commands:\n",
          out);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fputs("\nRun 'simil COMMAND --help' for the options of a command.\n", out);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    if (!strcmp(name, "--version") || !strcmp(name, "-V")) {
        printf("simil %s\n", simil_version_string());
        return CLI_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i].name)) {
            cli_set_command(commands[i].name);
            return commands[i].run(argc - 1, argv + 1);
        }
    if (name[0] == '-') return cli_usage_error("unknown option '%s'", name);
    return cli_usage_error("unknown command '%s'", name);
}
