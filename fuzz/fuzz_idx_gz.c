/* fuzz_idx_gz.c: the gzipped idx path.  The input is the decompressed idx
 * file; the target gzips it (mutating a gzip stream directly would nearly
 * always break its CRC first), writes *-idx3-ubyte.gz and runs the matrix
 * checks.  It then cuts the compressed file in half: that must never read. */
#include <stdlib.h>
#include <zlib.h>

#include "fuzz_common.h"

/* gzip data of size bytes into a new buffer; *out_size its length. */
static uint8_t *gzip_bytes(const uint8_t *data, size_t size, size_t *out_size)
{
    z_stream z = {0};
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
    uLong cap = deflateBound(&z, (uLong)size);
    uint8_t *out = malloc(cap);
    if (out == NULL) abort();
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)size;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) abort();
    *out_size = z.total_out;
    deflateEnd(&z);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t gz_size;
    uint8_t *gz = gzip_bytes(data, size, &gz_size);
    const char *path = sml_fuzz_write_file("input-idx3-ubyte.gz", gz, gz_size);
    sml_fuzz_check_matrix(path, NULL, 0);
    path = sml_fuzz_write_file("cut-idx3-ubyte.gz", gz, gz_size / 2);
    simil_status s = sml_fuzz_check_matrix(path, NULL, 0);
    if (s == SIMIL_OK) sml_fuzz_fail("a gzip stream cut in half was read as a whole idx file");
    free(gz);
    return 0;
}
