/* fuzz_npy.c: the numpy .npy reader on arbitrary files, with the checks of
 * sml_fuzz_check_matrix and a write/read round trip. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = sml_fuzz_write_file("input.npy", data, size);
    sml_fuzz_check_matrix(path, sml_fuzz_path("roundtrip.npy"), 0);
    return 0;
}
