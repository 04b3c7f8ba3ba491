/* fuzz_common.h: what the fuzz targets share.
 *
 * Each target is one LLVMFuzzerTestOneInput() in fuzz_<name>.c.  It is built
 * twice: with libFuzzer (fuzz/CMakeLists.txt, SIMIL_FUZZ=ON, clang only) and,
 * with replay_main.c, as an ordinary program that the test suite runs over
 * tests/regressions/<name>/ and fuzz/seeds/<name>/ (tests/reliability).
 *
 * A target accepts any input and checks that simil answers it with a status
 * from the documented set; anything else (a crash, a sanitizer report, an
 * unexpected status) aborts, which both drivers report as a failure. */
#ifndef SML_FUZZ_COMMON_H
#define SML_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "simil/simil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Write data to a file called name in this process's scratch folder (in
 * /dev/shm when it exists, else $TMPDIR or /tmp; removed at exit) and return
 * its path, valid until the next call with the same name. */
const char *sml_fuzz_write_file(const char *name, const void *data, size_t size);

/* A path in the scratch folder, for files the target writes itself. */
const char *sml_fuzz_path(const char *name);

/* Abort, printing what and the library's message, unless status is one of
 * the count statuses that follow. */
void sml_fuzz_expect(const char *what, simil_status status, int count, ...);

/* Read every byte of a buffer, so that AddressSanitizer sees the whole of it;
 * returns a checksum so that the compiler cannot drop the reads. */
uint64_t sml_fuzz_touch(const void *data, size_t size);

/* Abort with a message: an invariant of the library does not hold. */
void sml_fuzz_fail(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2), noreturn))
#endif
    ;

#endif

/* 1 when desc parses for dim as an index whose fixed parameters would take
 * more than 4 MB (IVF: nlist x dim centroids; PQ: 2^bits x dim codebook
 * floats; RR: a dim x dim rotation per shard, the first made by an SVD), and
 * SIMIL_FUZZ_NO_WORKAROUNDS is not 1.  Creating such an index
 * allocates all of it at once (the library caps it at 4 GiB): the targets
 * skip those to keep fuzzing fast. */
int sml_fuzz_params_too_large(const char *desc, int64_t dim);

/* The checks every matrix reader gets, on the file at path:
 *  - simil_matrix_info and simil_matrix_read answer SIMIL_OK, SIMIL_ERR_CORRUPT
 *    or one of the extra statuses (extra_count of them, then the list);
 *  - a read that succeeds agrees with info on the shape and type, and all of
 *    its data can be read; a read that fails leaves the matrix zeroed;
 *  - when info succeeds, a range past the end is SIMIL_ERR_INVALID_ARGUMENT,
 *    and (after a good read) row 1 read alone as float equals row 1 converted;
 *  - when roundtrip is not NULL (a writable format, by its name), the matrix
 *    written there reads back identical.
 * Returns the status of the whole read. */
simil_status sml_fuzz_check_matrix(const char *path, const char *roundtrip, int extra_count, ...);
