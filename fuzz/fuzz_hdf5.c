/* fuzz_hdf5.c: the ann-benchmarks HDF5 reader on arbitrary files.  The input
 * is written to a .hdf5 file, and its datasets train and neighbors are read
 * ("FILE.hdf5:train").  A missing dataset is SIMIL_ERR_INVALID_ARGUMENT, and
 * a build without HDF5 answers SIMIL_ERR_UNSUPPORTED.  libhdf5 itself is not
 * instrumented, so coverage guides only simil's side of the reader.
 *
 * The reader refuses what libhdf5 1.10 reads inconsistently (damaged type
 * layouts, data past the end of the file) and what declares more than it
 * stores, so no workaround is needed here: every dataset is read. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = sml_fuzz_write_file("input.hdf5", data, size);
    static const char *const names[2] = {"train", "neighbors"};
    for (int i = 0; i < 2; i++) {
        char spec[1100];
        snprintf(spec, sizeof spec, "%s:%s", path, names[i]);
        sml_fuzz_check_matrix(spec, NULL, 2, SIMIL_ERR_INVALID_ARGUMENT, SIMIL_ERR_UNSUPPORTED);
    }
    return 0;
}
