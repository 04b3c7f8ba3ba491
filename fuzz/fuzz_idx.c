/* fuzz_idx.c: the MNIST idx reader on arbitrary files named *-idx3-ubyte.
 * zlib reads such a file as plain data unless it starts with the gzip magic,
 * so this covers the plain path (with its size checks) and, for inputs that
 * begin with 1f 8b, the gzip path too; fuzz_idx_gz.c feeds the gzip path
 * with valid compressed streams. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = sml_fuzz_write_file("input-idx3-ubyte", data, size);
    sml_fuzz_check_matrix(path, NULL, 0);
    return 0;
}
