/* simil/dataset.h: reading and writing vector files, and the synthetic data
 * generators of the benchmarks (docs/datasets.md).
 *
 * Formats, chosen by the file name:
 *   .fvecs .bvecs .ivecs     texmex: each row is an int32 dimension, then the row
 *   .npy                     numpy, 2-d (or 1-d = one row), C order, little endian;
 *                            float32, uint8, int32, int64 (and float64 on read)
 *   *idx3-ubyte[.gz]         MNIST / Fashion-MNIST idx of unsigned bytes, optionally
 *                            gzipped: each image is one row of rows*cols values;
 *                            label files (*idx1-ubyte[.gz]) read as n x 1
 *   FILE.hdf5:NAME           a 2-d dataset of an ann-benchmarks HDF5 file
 *                            (train, test, neighbors, distances), when built with HDF5;
 *                            also FILE.h5:NAME.  Without HDF5: SIMIL_ERR_UNSUPPORTED
 * A malformed file, or a layout simil does not read (another element type,
 * big-endian or Fortran-order npy), gives SIMIL_ERR_CORRUPT with a message that
 * names the file and says what is wrong; a missing or unreadable file gives
 * SIMIL_ERR_IO.  An empty texmex file is a 0 x 0 matrix. */
#ifndef SIMIL_DATASET_H
#define SIMIL_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "simil/index.h"
#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum simil_dtype {
    SIMIL_DTYPE_FLOAT32 = 0,
    SIMIL_DTYPE_UINT8 = 1,
    SIMIL_DTYPE_INT32 = 2,
    SIMIL_DTYPE_INT64 = 3
} simil_dtype;

/* A dense row-major matrix.  Matrices filled by the functions below own their
 * data; release it with simil_matrix_free(). */
typedef struct simil_matrix {
    int64_t rows;
    int64_t cols;
    simil_dtype dtype;
    void *data;
} simil_matrix;

SIMIL_API size_t simil_dtype_size(simil_dtype dtype);

/* Shape and element type without reading the data.  Checks the header, and
 * the size where the format allows (not inside a gzipped idx file).  Any of
 * rows, cols, dtype may be NULL. */
SIMIL_API simil_status simil_matrix_info(const char *path, int64_t *rows, int64_t *cols,
                                         simil_dtype *dtype);

/* Read rows [first, first + count) of the file.  count < 0 means "to the end".
 * The element type is the file's, except that float64 is read as float32.
 * *out is overwritten (not freed) and owns the data on success; on failure it
 * is zeroed.  A range outside the file gives SIMIL_ERR_INVALID_ARGUMENT. */
SIMIL_API simil_status simil_matrix_read(const char *path, int64_t first, int64_t count,
                                         simil_matrix *out);

/* Like simil_matrix_read, converting any element type to float32. */
SIMIL_API simil_status simil_matrix_read_float(const char *path, int64_t first,
                                               int64_t count, simil_matrix *out);

/* Write a matrix, atomically (temporary file, fsync, rename): on failure an
 * existing file is left as it was.  The format is chosen by the name: .fvecs
 * needs float32, .ivecs int32, .bvecs uint8, .npy any type (written as
 * version 1.0).  int64 data written to .ivecs is narrowed when every value
 * fits in int32, else the call fails with SIMIL_ERR_INVALID_ARGUMENT.  idx and
 * HDF5 are not written (SIMIL_ERR_UNSUPPORTED). */
SIMIL_API simil_status simil_matrix_write(const char *path, const simil_matrix *m);

/* The metric a dataset file declares.  ann-benchmarks HDF5 files name theirs
 * in the root attribute "distance": "euclidean" is SIMIL_METRIC_L2, "angular"
 * (and "cosine") SIMIL_METRIC_COSINE, "ip", "dot" and "inner_product"
 * SIMIL_METRIC_IP.  path is FILE.hdf5 or FILE.hdf5:NAME.  *declared is 1 when
 * the file names a metric, else 0 (*metric untouched): an HDF5 file without
 * the attribute, and every other format, which has no place for one.  A
 * distance simil does not compute ("hamming", "jaccard", ...) gives
 * SIMIL_ERR_UNSUPPORTED naming it. */
SIMIL_API simil_status simil_dataset_metric(const char *path, simil_metric *metric,
                                            int *declared);

/* Free the data of a matrix filled by this library and zero the struct. */
SIMIL_API void simil_matrix_free(simil_matrix *m);

/* The generators of docs/datasets.md, bit-exact.  kind is "uniform" or "mix".
 * Rows [first, first + n) of the dataset (n x dim floats into out), so large
 * sets can be made in pieces; the result does not depend on the pieces or on
 * the number of OpenMP threads. */
SIMIL_API simil_status simil_generate(const char *kind, int64_t first, int64_t n,
                                      int64_t dim, uint64_t seed, float *out);

#ifdef __cplusplus
}
#endif
#endif
