/* fuzz_texmex.c: the texmex readers (.fvecs, .bvecs, .ivecs) on arbitrary
 * files.  The same bytes are read as each of the three formats, with the
 * checks of sml_fuzz_check_matrix and a write/read round trip. */
#include <stdio.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const ext[3] = {"fvecs", "bvecs", "ivecs"};
    for (int i = 0; i < 3; i++) {
        char name[32], back[32];
        snprintf(name, sizeof name, "input.%s", ext[i]);
        snprintf(back, sizeof back, "roundtrip.%s", ext[i]);
        const char *path = sml_fuzz_write_file(name, data, size);
        sml_fuzz_check_matrix(path, sml_fuzz_path(back), 0);
    }
    return 0;
}
