/* fuzz_hdf5.c: the ann-benchmarks HDF5 reader on arbitrary files.  The input
 * is written to a .hdf5 file, and its datasets train and neighbors are read
 * ("FILE.hdf5:train").  A missing dataset is SIMIL_ERR_INVALID_ARGUMENT, and
 * a build without HDF5 answers SIMIL_ERR_UNSUPPORTED.  libhdf5 itself is not
 * instrumented, so coverage guides only simil's side of the reader.
 *
 * Known bugs (docs/reliability.md), stepped around so that fuzzing goes on
 * past them; SIMIL_FUZZ_NO_WORKAROUNDS=1 reads such datasets anyway (the
 * known-bug replay test):
 *  - "HDF5 size": dataset_hdf5.c allocates whatever rows x cols the file's
 *    dataspace declares, with no bound, so a 2 KB file can ask for terabytes.
 *    Datasets whose info declares more than 64 MB are not read.
 *  - "HDF5 type layouts": dataset_hdf5.c takes any float or integer class of
 *    the right size, including damaged layouts (an exponent field or a bit
 *    offset past the element) that libhdf5 converts inconsistently: the same
 *    element reads differently in a whole read and in a one-row read.
 *    Datasets of a number type that is not one of HDF5's standard ones are
 *    not read. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_common.h"

#if defined(SIMIL_HAVE_HDF5)
#include <hdf5.h>
#endif

enum { SML_FUZZ_HDF5_MAX_BYTES = 64 << 20 };

static int strict(void)
{
    const char *s = getenv("SIMIL_FUZZ_NO_WORKAROUNDS");
    return s != NULL && s[0] == '1';
}

/* 1 when the dataset's declared size would trip "HDF5 size". */
static int claims_too_much(const char *spec)
{
    int64_t rows, cols;
    simil_dtype dtype;
    if (simil_matrix_info(spec, &rows, &cols, &dtype) != SIMIL_OK) return 0;
    double bytes = (double)rows * (double)cols * (double)simil_dtype_size(dtype);
    return bytes > SML_FUZZ_HDF5_MAX_BYTES;
}

/* 1 when the dataset is stored as a number type that is none of HDF5's
 * standard float and integer types simil reads ("HDF5 type layouts"). */
static int odd_number_type(const char *file, const char *name)
{
#if defined(SIMIL_HAVE_HDF5)
    H5E_auto2_t func;
    void *data;
    H5Eget_auto2(H5E_DEFAULT, &func, &data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int odd = 0;
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f < 0 ? -1 : H5Dopen2(f, name, H5P_DEFAULT);
    hid_t t = d < 0 ? -1 : H5Dget_type(d);
    if (t >= 0 && (H5Tget_class(t) == H5T_FLOAT || H5Tget_class(t) == H5T_INTEGER)) {
        const hid_t standard[] = {H5T_IEEE_F32LE, H5T_IEEE_F32BE, H5T_IEEE_F64LE,
                                  H5T_IEEE_F64BE, H5T_STD_U8LE,   H5T_STD_U8BE,
                                  H5T_STD_I32LE,  H5T_STD_I32BE,  H5T_STD_I64LE,
                                  H5T_STD_I64BE};
        odd = 1;
        for (size_t i = 0; i < sizeof standard / sizeof standard[0]; i++)
            if (H5Tequal(t, standard[i]) > 0) odd = 0;
    }
    if (t >= 0) H5Tclose(t);
    if (d >= 0) H5Dclose(d);
    if (f >= 0) H5Fclose(f);
    H5Eset_auto2(H5E_DEFAULT, func, data);
    return odd;
#else
    (void)file;
    (void)name;
    return 0;
#endif
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = sml_fuzz_write_file("input.hdf5", data, size);
    static const char *const names[2] = {"train", "neighbors"};
    for (int i = 0; i < 2; i++) {
        char spec[1100];
        snprintf(spec, sizeof spec, "%s:%s", path, names[i]);
        if (!strict() && (claims_too_much(spec) || odd_number_type(path, names[i]))) continue;
        sml_fuzz_check_matrix(spec, NULL, 2, SIMIL_ERR_INVALID_ARGUMENT, SIMIL_ERR_UNSUPPORTED);
    }
    return 0;
}
