/* make_ann_hdf5.c: writes an ann-benchmarks HDF5 file for the tool tests.
 *
 *   make_ann_hdf5 OUT.hdf5 DISTANCE NAME=FILE [NAME=FILE ...]
 *
 * Each FILE (any format simil reads) becomes the 2-d dataset NAME, in its
 * element type; DISTANCE becomes the root attribute "distance" as h5py
 * writes it (a variable-length UTF-8 string), or is left out when "-".
 * ann-benchmarks files hold train, test, neighbors and distances. */
#include <hdf5.h>
#include <stdio.h>
#include <string.h>

#include "simil/simil.h"

static int put(hid_t file, const char *name, const simil_matrix *m)
{
    hid_t type = m->dtype == SIMIL_DTYPE_FLOAT32 ? H5T_NATIVE_FLOAT
                 : m->dtype == SIMIL_DTYPE_UINT8 ? H5T_NATIVE_UINT8
                 : m->dtype == SIMIL_DTYPE_INT32 ? H5T_NATIVE_INT32
                                                 : H5T_NATIVE_INT64;
    hsize_t dims[2] = {(hsize_t)m->rows, (hsize_t)m->cols};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t set = H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int ok = set >= 0 && H5Dwrite(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, m->data) >= 0;
    if (set >= 0) H5Dclose(set);
    H5Sclose(space);
    return ok;
}

static int put_distance(hid_t file, const char *value)
{
    hid_t type = H5Tcopy(H5T_C_S1), space = H5Screate(H5S_SCALAR);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    hid_t attr = H5Acreate2(file, "distance", type, space, H5P_DEFAULT, H5P_DEFAULT);
    int ok = attr >= 0 && H5Awrite(attr, type, &value) >= 0;
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: make_ann_hdf5 OUT.hdf5 DISTANCE|- NAME=FILE...\n");
        return 2;
    }
    hid_t file = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    int ok = file >= 0 && (strcmp(argv[2], "-") == 0 || put_distance(file, argv[2]));
    for (int i = 3; ok && i < argc; i++) {
        char name[256];
        const char *eq = strchr(argv[i], '=');
        simil_matrix m;
        if (!eq || eq - argv[i] >= (long)sizeof name) {
            fprintf(stderr, "make_ann_hdf5: want NAME=FILE, got '%s'\n", argv[i]);
            ok = 0;
            break;
        }
        snprintf(name, sizeof name, "%.*s", (int)(eq - argv[i]), argv[i]);
        if (simil_matrix_read(eq + 1, 0, -1, &m) != SIMIL_OK) {
            fprintf(stderr, "make_ann_hdf5: %s\n", simil_last_error());
            ok = 0;
            break;
        }
        ok = put(file, name, &m);
        simil_matrix_free(&m);
    }
    if (file >= 0) H5Fclose(file);
    if (!ok) fprintf(stderr, "make_ann_hdf5: could not write %s\n", argv[1]);
    return ok ? 0 : 1;
}
