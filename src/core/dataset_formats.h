/* dataset_formats.h: the per-format readers and writers behind simil/dataset.h,
 * and the helpers they share (dataset_common.c).
 *
 * dataset.c picks a format from the file name and calls one of these.  Every
 * reader takes rows [first, first + count), count < 0 meaning "to the end";
 * once it knows the file's row count it resolves and checks the range with
 * sml_dataset_range, and it fills out with memory from sml_alloc (so that
 * simil_matrix_free releases it).  On failure out is left zeroed.
 *
 * The readers check every size a header claims against the real file size
 * before they allocate, and report a malformed file as SIMIL_ERR_CORRUPT with
 * the file's name.  Files are little-endian, and so must the host be. */
#ifndef SML_DATASET_FORMATS_H
#define SML_DATASET_FORMATS_H

#include <stddef.h>
#include <stdint.h>

#include "simil/dataset.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "simil's dataset readers assume a little-endian host"
#endif

/* "float32", "uint8", "int32", "int64". */
const char *sml_dtype_name(simil_dtype dtype);

/* Resolve *count (< 0: to the end) against a file of rows rows and check that
 * [first, first + *count) lies inside it; SIMIL_ERR_INVALID_ARGUMENT naming
 * path and the row counts if not. */
simil_status sml_dataset_range(const char *path, int64_t rows, int64_t first, int64_t *count);

/* rows * cols * esize in bytes, or SIMIL_ERR_CORRUPT naming path when that
 * does not fit in size_t / int64 (a header claiming an absurd shape). */
simil_status sml_dataset_bytes(const char *path, int64_t rows, int64_t cols, size_t esize,
                               size_t *bytes);

/* Allocate out->data for a rows x cols matrix of dtype and set the shape. */
simil_status sml_dataset_alloc(simil_matrix *out, int64_t rows, int64_t cols, simil_dtype dtype);

/* texmex .fvecs / .bvecs / .ivecs; file_dtype is float32, uint8 or int32. */
simil_status sml_texmex_info(const char *path, simil_dtype file_dtype, int64_t *rows,
                             int64_t *cols);
simil_status sml_texmex_read(const char *path, simil_dtype file_dtype, int64_t first, int64_t count,
                             simil_matrix *out);
/* int64 input to an int32 file is narrowed; a value that does not fit fails
 * the write and leaves any existing file untouched. */
simil_status sml_texmex_write(const char *path, simil_dtype file_dtype, const simil_matrix *m);

/* numpy .npy, versions 1.0 to 3.0; writes version 1.0. */
simil_status sml_npy_info(const char *path, int64_t *rows, int64_t *cols, simil_dtype *dtype);
simil_status sml_npy_read(const char *path, int64_t first, int64_t count, simil_matrix *out);
simil_status sml_npy_write(const char *path, const simil_matrix *m);

/* MNIST idx of unsigned bytes, plain or gzipped: rows are the first dimension,
 * the other dimensions are flattened into columns. */
simil_status sml_idx_info(const char *path, int64_t *rows, int64_t *cols, simil_dtype *dtype);
simil_status sml_idx_read(const char *path, int64_t first, int64_t count, simil_matrix *out);

/* The ':' that ends the file name in "FILE.hdf5:NAME" (also .h5), or NULL. */
const char *sml_hdf5_split(const char *spec);

/* HDF5 "FILE:NAME" (spec is the whole string); SIMIL_ERR_UNSUPPORTED when
 * simil was built without HDF5. */
simil_status sml_hdf5_info(const char *spec, int64_t *rows, int64_t *cols, simil_dtype *dtype);
simil_status sml_hdf5_read(const char *spec, int64_t first, int64_t count, simil_matrix *out);
/* The string attribute name of the root group of spec's file (the part
 * before ":NAME", if any) into out (size bytes, cut to fit); *found is 0
 * when the file has no such attribute. */
simil_status sml_hdf5_attribute(const char *spec, const char *name, char *out, size_t size,
                                int *found);

#endif
