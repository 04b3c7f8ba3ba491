/* hdf5_seed.c: writes small ann-benchmarks-like HDF5 files for the seed
 * corpus of fuzz_hdf5 (fuzz/make_seeds.sh compiles and runs it).
 *   hdf5_seed OUT.hdf5 KIND      KIND: f32 (train float32 + neighbors int32),
 *                                f64 (train float64, big-endian), u8, empty */
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int put(hid_t file, const char *name, hid_t file_type, hid_t mem_type, hsize_t rows,
               hsize_t cols, const void *data)
{
    hsize_t dims[2] = {rows, cols};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_obj_track_times(dcpl, 0); /* no timestamps: the same bytes every run */
    hid_t set = H5Dcreate2(file, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    int bad = set < 0 || (rows * cols > 0 &&
                          H5Dwrite(set, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0);
    if (set >= 0) H5Dclose(set);
    H5Sclose(space);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: hdf5_seed OUT.hdf5 f32|f64|u8|empty\n");
        return 2;
    }
    float train[12][6];
    double wide[12][6];
    uint8_t bytes[12][6];
    int32_t neighbors[4][3];
    for (int i = 0; i < 12; i++)
        for (int j = 0; j < 6; j++) {
            train[i][j] = (float)(i * 6 + j) / 7.0f - 3.0f;
            wide[i][j] = train[i][j];
            bytes[i][j] = (uint8_t)(i * 21 + j);
        }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) neighbors[i][j] = (i + j * 5) % 12;
    hid_t file = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) return 1;
    int bad = 0;
    const char *kind = argv[2];
    if (strcmp(kind, "f32") == 0) {
        bad |= put(file, "train", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 12, 6, train);
        bad |= put(file, "neighbors", H5T_STD_I32LE, H5T_NATIVE_INT32, 4, 3, neighbors);
    } else if (strcmp(kind, "f64") == 0) {
        bad |= put(file, "train", H5T_IEEE_F64BE, H5T_NATIVE_DOUBLE, 12, 6, wide);
    } else if (strcmp(kind, "u8") == 0) {
        bad |= put(file, "train", H5T_STD_U8LE, H5T_NATIVE_UINT8, 12, 6, bytes);
    } else {
        bad |= put(file, "train", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 0, 6, train);
    }
    H5Fclose(file);
    return bad;
}
