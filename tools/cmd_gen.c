/* tools/cmd_gen.c: "simil gen" writes rows of the synthetic datasets of
 * docs/datasets.md (simil_generate) to an .fvecs or .npy file. */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>

#include "cli.h"

static const char gen_usage[] =
    "usage: simil gen --kind uniform|mix --n N --dim D --seed S --out FILE [--first F]\n"
    "\n"
    "Write rows [F, F+N) of a synthetic dataset (docs/datasets.md), bit-exact.\n"
    "\n"
    "  --kind K     uniform or mix\n"
    "  --n N        number of rows\n"
    "  --dim D      vector dimension\n"
    "  --seed S     dataset seed (e.g. 1 for uniform1M's base, 2 for its queries)\n"
    "  --first F    first row to write (default 0), to make large sets in pieces\n"
    "  --out FILE   .fvecs or .npy (float32)\n";

int cmd_gen(int argc, char **argv)
{
    static const char *const kinds[] = {"uniform", "mix", NULL};
    static const char *const formats[] = {".fvecs", ".npy", NULL};
    const char *kind = NULL, *out = NULL;
    int64_t n = 0, dim = 0, seed = 0, first = 0;
    const cli_opt opts[] = {
        {"kind", 0, CLI_STRING, &kind, 1, 0, 0},
        {"n", 'n', CLI_INT, &n, 1, 1, INT64_C(1) << 40},
        {"dim", 'd', CLI_INT, &dim, 1, 1, INT64_C(1) << 24},
        {"seed", 0, CLI_INT, &seed, 1, 0, INT64_MAX},
        {"first", 0, CLI_INT, &first, 0, 0, INT64_C(1) << 50},
        {"out", 'o', CLI_STRING, &out, 1, 0, 0},
        {NULL, 0, CLI_FLAG, NULL, 0, 0, 0},
    };
    int rc;
    if (!cli_parse(argc, argv, opts, gen_usage, NULL, 0, &rc)) return rc;
    if (!cli_check_choice("--kind", kind, kinds) || !cli_check_suffix("--out", out, formats))
        return CLI_EXIT_USAGE;
    if ((uint64_t)n > SIZE_MAX / sizeof(float) / (uint64_t)dim)
        return cli_error("%" PRId64 " x %" PRId64 " floats do not fit in memory", n, dim);

    float *x = malloc((size_t)n * (size_t)dim * sizeof *x);
    if (!x)
        return cli_error("out of memory for %" PRId64 " x %" PRId64 " floats", n, dim);
    simil_matrix m = {n, dim, SIMIL_DTYPE_FLOAT32, x};
    simil_status st = simil_generate(kind, first, n, dim, (uint64_t)seed, x);
    rc = st == SIMIL_OK ? CLI_EXIT_OK : cli_fail(st, NULL);
    if (rc == CLI_EXIT_OK) {
        st = simil_matrix_write(out, &m);
        if (st != SIMIL_OK) rc = cli_fail(st, out);
    }
    free(x);
    return rc;
}
