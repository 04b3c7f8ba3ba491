/* fuzz_index_spec.c: the factory-string parser.
 *
 * Input: one byte that picks the dimension (1 to 1000) and the metric, then
 * the description (up to its first NUL).  simil_index_create must give
 * SIMIL_OK (Flat), SIMIL_ERR_UNSUPPORTED (valid, not built yet) or
 * SIMIL_ERR_INVALID_ARGUMENT.  The parser itself must also round-trip: a
 * description it accepts, formatted canonically, parses to the same spec.
 *
 * Descriptions whose fixed parameters would pass 4 MB are only parsed, not
 * created (sml_fuzz_params_too_large): the library allows up to 4 GiB of
 * them and 2^24 lists, which is correct but would slow fuzzing to a crawl
 * (so would RR's rotation of dim x dim floats in every shard: "Shards62,RR,XFBQ"
 * at dim 728 took over 10 s to create twice under ASan while each shard made
 * its own by an SVD);
 * SIMIL_FUZZ_NO_WORKAROUNDS=1 creates them. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "index/index_spec.h"

static void check_roundtrip(const char *desc, int64_t dim)
{
    sml_index_spec spec, again;
    if (sml_index_spec_parse(desc, dim, &spec) != SIMIL_OK) return;
    char canonical[512];
    sml_index_spec_format(&spec, canonical, sizeof canonical);
    if (sml_index_spec_parse(canonical, dim, &again) != SIMIL_OK)
        sml_fuzz_fail("'%s' parses, but its canonical form '%s' does not (dim %lld): %s", desc,
                      canonical, (long long)dim, simil_last_error());
    if (memcmp(&spec, &again, sizeof spec) != 0)
        sml_fuzz_fail("'%s' and its canonical form '%s' parse differently (dim %lld)", desc,
                      canonical, (long long)dim);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int64_t dim = 1 + (int64_t)data[0] * 999 / 255;
    simil_metric metric = (simil_metric)(data[0] % 3);
    char *desc = malloc(size);
    if (desc == NULL) abort();
    memcpy(desc, data + 1, size - 1);
    desc[size - 1] = '\0';
    if (sml_fuzz_params_too_large(desc, dim)) {
        check_roundtrip(desc, dim);
        free(desc);
        return 0;
    }
    simil_index *index = NULL;
    simil_status s = simil_index_create(&index, dim, desc, metric, "cpu");
    sml_fuzz_expect("simil_index_create", s, 3, SIMIL_OK, SIMIL_ERR_UNSUPPORTED,
                    SIMIL_ERR_INVALID_ARGUMENT);
    if (s == SIMIL_OK) {
        if (index == NULL || simil_index_dim(index) != dim)
            sml_fuzz_fail("create of '%s' succeeded without a proper index", desc);
        /* the normalized description is itself a valid description */
        simil_index *again = NULL;
        sml_fuzz_expect("create from a normalized description",
                        simil_index_create(&again, dim, simil_index_description(index), metric,
                                           "cpu"),
                        1, SIMIL_OK);
        simil_index_destroy(again);
    } else if (index != NULL) {
        sml_fuzz_fail("a failed create returned an index");
    }
    simil_index_destroy(index);
    check_roundtrip(desc, dim);
    free(desc);
    return 0;
}
