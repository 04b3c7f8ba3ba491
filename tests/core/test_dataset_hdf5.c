/* test_dataset_hdf5.c: ann-benchmarks HDF5 files (src/core/dataset_hdf5.c).
 *
 * With HDF5 the test writes a small file laid out like ann-benchmarks' (train,
 * test, neighbors, distances, plus datasets of the other element types) with
 * the HDF5 C API, then reads it through simil.  Without HDF5 it checks that
 * reading says simil was built without it and how to fix that. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/test_util.h"

#if defined(SIMIL_HAVE_HDF5)
#include <hdf5.h>

enum { NTRAIN = 50, NTEST = 6, DIM = 12, K = 10 };

static float train[NTRAIN][DIM];
static double test_rows[NTEST][DIM];
static int32_t neighbors[NTEST][K];
static uint8_t bytes[4][3];
static int64_t longs[3][2];

/* A dataset stored as file_type, written from memory of mem_type. */
static void put(hid_t file, const char *name, hid_t file_type, hid_t mem_type, int rank,
                const hsize_t *dims, const void *data)
{
    hid_t space = H5Screate_simple(rank, dims, NULL);
    hid_t set = H5Dcreate2(file, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(set >= 0);
    assert_true(H5Dwrite(set, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    H5Dclose(set);
    H5Sclose(space);
}

static void write_ann_file(const char *path)
{
    sml_test_fill_uniform(&train[0][0], NTRAIN * DIM, 1, -1, 1);
    for (int i = 0; i < NTEST; i++)
        for (int j = 0; j < DIM; j++) test_rows[i][j] = 0.1 * i + 1e-9 * j;
    for (int i = 0; i < NTEST; i++)
        for (int j = 0; j < K; j++) neighbors[i][j] = (i * 7 + j * 3) % NTRAIN;
    for (int k = 0; k < 12; k++) bytes[k / 3][k % 3] = (uint8_t)(k * 20);
    for (int k = 0; k < 6; k++) longs[k / 2][k % 2] = (int64_t)k << 40;
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(file >= 0);
    put(file, "train", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, (hsize_t[]){NTRAIN, DIM}, train);
    put(file, "test", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, (hsize_t[]){NTEST, DIM}, test_rows);
    put(file, "neighbors", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, (hsize_t[]){NTEST, K}, neighbors);
    /* big-endian on disk: HDF5 converts on the way in and out */
    put(file, "distances", H5T_IEEE_F32BE, H5T_NATIVE_FLOAT, 2, (hsize_t[]){NTEST, K}, train);
    put(file, "bytes", H5T_STD_U8LE, H5T_NATIVE_UINT8, 2, (hsize_t[]){4, 3}, bytes);
    put(file, "longs", H5T_STD_I64LE, H5T_NATIVE_INT64, 2, (hsize_t[]){3, 2}, longs);
    put(file, "cube", H5T_STD_U8LE, H5T_NATIVE_UINT8, 3, (hsize_t[]){2, 2, 3}, bytes);
    put(file, "shorts", H5T_STD_I16LE, H5T_NATIVE_UINT8, 2, (hsize_t[]){2, 3}, bytes);
    H5Fclose(file);
}

static char spec[600];

static const char *name_in(const char *file, const char *set)
{
    snprintf(spec, sizeof spec, "%s:%s", file, set);
    return spec;
}

static void test_hdf5_read(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s", sml_test_path("ann.hdf5"));
    write_ann_file(path);
    int64_t rows, cols;
    simil_dtype dtype;
    SML_ASSERT_OK(simil_matrix_info(name_in(path, "train"), &rows, &cols, &dtype));
    assert_true(rows == NTRAIN && cols == DIM && dtype == SIMIL_DTYPE_FLOAT32);
    simil_matrix m;
    SML_ASSERT_OK(simil_matrix_read(name_in(path, "train"), 0, -1, &m));
    assert_memory_equal(m.data, train, sizeof train);
    simil_matrix_free(&m);
    SML_ASSERT_OK(simil_matrix_read(name_in(path, "train"), 17, 5, &m));
    assert_true(m.rows == 5 && m.cols == DIM);
    assert_memory_equal(m.data, train[17], 5 * sizeof train[0]);
    simil_matrix_free(&m);
    SML_ASSERT_OK(simil_matrix_read(name_in(path, "train"), NTRAIN, -1, &m));
    assert_int_equal(m.rows, 0);
    simil_matrix_free(&m);
    SML_ASSERT_OK(simil_matrix_read(name_in(path, "test"), 2, 3, &m));
    assert_true(m.rows == 3 && m.dtype == SIMIL_DTYPE_FLOAT32);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < DIM; j++)
            assert_true(((float *)m.data)[i * DIM + j] == (float)test_rows[2 + i][j]);
    simil_matrix_free(&m);
    SML_ASSERT_OK(simil_matrix_read(name_in(path, "neighbors"), 1, -1, &m));
    assert_true(m.rows == NTEST - 1 && m.cols == K && m.dtype == SIMIL_DTYPE_INT32);
    assert_memory_equal(m.data, neighbors[1], sizeof neighbors - sizeof neighbors[0]);
    simil_matrix_free(&m);
    SML_ASSERT_OK(simil_matrix_read_float(name_in(path, "neighbors"), 0, 1, &m));
    for (int j = 0; j < K; j++) assert_true(((float *)m.data)[j] == (float)neighbors[0][j]);
    simil_matrix_free(&m);
    SML_ASSERT_OK(simil_matrix_read(name_in(path, "distances"), 0, -1, &m));
    assert_memory_equal(m.data, train, NTEST * K * sizeof(float));
    simil_matrix_free(&m);
    SML_ASSERT_OK(simil_matrix_read(name_in(path, "bytes"), 0, -1, &m));
    assert_true(m.dtype == SIMIL_DTYPE_UINT8 && m.rows == 4 && m.cols == 3);
    assert_memory_equal(m.data, bytes, sizeof bytes);
    simil_matrix_free(&m);
    SML_ASSERT_OK(simil_matrix_read(name_in(path, "longs"), 0, -1, &m));
    assert_true(m.dtype == SIMIL_DTYPE_INT64);
    assert_memory_equal(m.data, longs, sizeof longs);
    simil_matrix_free(&m);
}

static void test_hdf5_errors(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s", sml_test_path("ann.h5"));
    write_ann_file(path);
    simil_matrix m;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_matrix_read(path, 0, -1, &m));
    assert_non_null(strstr(simil_last_error(), "distances, longs, neighbors, shorts, test, train"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_matrix_info(name_in(path, "base"), NULL, NULL, NULL));
    assert_non_null(strstr(simil_last_error(), "'base'"));
    assert_non_null(strstr(simil_last_error(), "train"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_matrix_read(name_in(path, "a/b"), 0, -1, &m));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_matrix_read(name_in(path, "train"), 40, 11, &m));
    assert_non_null(strstr(simil_last_error(), "50 rows"));
    SML_ASSERT_STATUS(SIMIL_ERR_CORRUPT, simil_matrix_read(name_in(path, "cube"), 0, -1, &m));
    SML_ASSERT_STATUS(SIMIL_ERR_CORRUPT, simil_matrix_read(name_in(path, "shorts"), 0, -1, &m));
    SML_ASSERT_STATUS(SIMIL_ERR_IO,
                      simil_matrix_read(name_in(sml_test_path("none.hdf5"), "train"), 0, -1, &m));
    SML_ASSERT_STATUS(SIMIL_ERR_UNSUPPORTED, simil_matrix_write(name_in(path, "x"), &m));
    /* not HDF5, and HDF5 cut short */
    const char *fake = sml_test_path("fake.hdf5");
    FILE *f = fopen(fake, "wb");
    fputs("not an hdf5 file at all", f);
    fclose(f);
    SML_ASSERT_STATUS(SIMIL_ERR_CORRUPT, simil_matrix_read(name_in(fake, "train"), 0, -1, &m));
    f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *all = sml_test_malloc((size_t)len);
    assert_int_equal(fread(all, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    const char *cut = sml_test_path("cut.hdf5");
    for (long n = 0; n < len; n += 97) {
        f = fopen(cut, "wb");
        fwrite(all, 1, (size_t)n, f);
        fclose(f);
        simil_status s = simil_matrix_read(name_in(cut, "train"), 0, -1, &m);
        if (s != SIMIL_ERR_CORRUPT && s != SIMIL_ERR_INVALID_ARGUMENT)
            fail_msg("hdf5 cut at %ld of %ld: %s (%s)", n, len, simil_status_name(s),
                     simil_last_error());
    }
    free(all);
}

/* A dataset of NTRAIN x DIM float32 with the creation properties dcpl,
 * written through H5Dwrite only in rows [0, written). */
static void put_layout(hid_t file, const char *name, hid_t dcpl, hsize_t written)
{
    hsize_t dims[2] = {NTRAIN, DIM};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t set = H5Dcreate2(file, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(set >= 0);
    if (written > 0) {
        hsize_t start[2] = {0, 0}, count[2] = {written, DIM};
        hid_t mem = H5Screate_simple(2, count, NULL);
        assert_true(H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL) >= 0);
        assert_true(H5Dwrite(set, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, train) >= 0);
        H5Sclose(mem);
    }
    H5Dclose(set);
    H5Sclose(space);
}

/* Layouts: chunked and compressed data reads like contiguous data; data that
 * was declared but never stored (which HDF5 would read as fill values) is
 * refused as damaged, and data kept in an external file is not followed. */
static void test_hdf5_layouts(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s", sml_test_path("layouts.hdf5"));
    sml_test_fill_uniform(&train[0][0], NTRAIN * DIM, 3, -1, 1);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(file >= 0);
    hid_t packed = H5Pcreate(H5P_DATASET_CREATE);
    assert_true(H5Pset_chunk(packed, 2, (hsize_t[]){7, 5}) >= 0);
    assert_true(H5Pset_shuffle(packed) >= 0);
    assert_true(H5Pset_deflate(packed, 6) >= 0);
    put_layout(file, "packed", packed, NTRAIN);
    put_layout(file, "sparse", packed, 20); /* rows 21.. never written */
    H5Pclose(packed);
    put_layout(file, "unwritten", H5P_DEFAULT, 0);
    hid_t outside = H5Pcreate(H5P_DATASET_CREATE);
    assert_true(H5Pset_external(outside, "elsewhere.bin", 0, NTRAIN * DIM * 4) >= 0);
    put_layout(file, "outside", outside, 0);
    H5Pclose(outside);
    H5Fclose(file);

    simil_matrix m;
    SML_ASSERT_OK(simil_matrix_read(name_in(path, "packed"), 0, -1, &m));
    assert_memory_equal(m.data, train, sizeof train);
    simil_matrix_free(&m);
    SML_ASSERT_OK(simil_matrix_read(name_in(path, "packed"), 13, 9, &m));
    assert_memory_equal(m.data, train[13], 9 * sizeof train[0]);
    simil_matrix_free(&m);
    SML_ASSERT_STATUS(SIMIL_ERR_CORRUPT, simil_matrix_info(name_in(path, "sparse"), NULL, NULL, NULL));
    assert_non_null(strstr(simil_last_error(), "chunks"));
    SML_ASSERT_STATUS(SIMIL_ERR_CORRUPT, simil_matrix_read(name_in(path, "unwritten"), 0, -1, &m));
    assert_null(m.data);
    SML_ASSERT_STATUS(SIMIL_ERR_UNSUPPORTED, simil_matrix_read(name_in(path, "outside"), 0, -1, &m));
    assert_non_null(strstr(simil_last_error(), "other files"));
}

/* A root attribute "distance": a fixed-length string (as HDF5's C tools
 * write it) when fixed, else a variable-length UTF-8 one (as h5py writes
 * Python strings, and so ann-benchmarks' files). */
static void put_distance(const char *path, const char *value, int fixed)
{
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(file >= 0);
    hid_t type = H5Tcopy(H5T_C_S1), space = H5Screate(H5S_SCALAR);
    if (fixed) {
        H5Tset_size(type, strlen(value));
    } else {
        H5Tset_size(type, H5T_VARIABLE);
        H5Tset_cset(type, H5T_CSET_UTF8);
    }
    if (H5Aexists(file, "distance") > 0) H5Adelete(file, "distance");
    hid_t attr = H5Acreate2(file, "distance", type, space, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(attr >= 0);
    assert_true(H5Awrite(attr, type, fixed ? (const void *)value : (const void *)&value) >= 0);
    H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(file);
}

static void test_hdf5_metric(void **state)
{
    (void)state;
    static const struct {
        const char *value;
        simil_metric metric;
    } cases[] = {{"euclidean", SIMIL_METRIC_L2}, {"angular", SIMIL_METRIC_COSINE},
                 {"Angular", SIMIL_METRIC_COSINE}, {"ip", SIMIL_METRIC_IP},
                 {"dot", SIMIL_METRIC_IP}};
    char path[512];
    snprintf(path, sizeof path, "%s", sml_test_path("metric.hdf5"));
    write_ann_file(path);
    simil_metric metric = SIMIL_METRIC_IP;
    int declared = 7;
    SML_ASSERT_OK(simil_dataset_metric(path, &metric, &declared));
    assert_int_equal(declared, 0);
    assert_int_equal(metric, SIMIL_METRIC_IP);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int fixed = 0; fixed < 2; fixed++) {
            put_distance(path, cases[i].value, fixed);
            metric = (simil_metric)-1;
            SML_ASSERT_OK(simil_dataset_metric(name_in(path, "test"), &metric, &declared));
            if (declared != 1 || metric != cases[i].metric)
                fail_msg("distance '%s' (fixed %d): declared %d, metric %d", cases[i].value, fixed,
                         declared, (int)metric);
        }
    put_distance(path, "hamming", 0);
    SML_ASSERT_STATUS(SIMIL_ERR_UNSUPPORTED, simil_dataset_metric(path, &metric, &declared));
    assert_non_null(strstr(simil_last_error(), "'hamming'"));
    assert_int_equal(declared, 0);
    /* other formats declare none; a missing HDF5 file is an I/O error */
    SML_ASSERT_OK(simil_dataset_metric("whatever.fvecs", &metric, &declared));
    assert_int_equal(declared, 0);
    SML_ASSERT_STATUS(SIMIL_ERR_IO,
                      simil_dataset_metric(sml_test_path("none.hdf5"), &metric, &declared));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hdf5_read),
        cmocka_unit_test(test_hdf5_errors),
        cmocka_unit_test(test_hdf5_layouts),
        cmocka_unit_test(test_hdf5_metric),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

static void test_hdf5_unsupported(void **state)
{
    (void)state;
    simil_matrix m;
    SML_ASSERT_STATUS(SIMIL_ERR_UNSUPPORTED, simil_matrix_read("x.hdf5:train", 0, -1, &m));
    assert_non_null(strstr(simil_last_error(), "built without HDF5"));
    assert_non_null(strstr(simil_last_error(), "libhdf5-dev"));
    SML_ASSERT_STATUS(SIMIL_ERR_UNSUPPORTED, simil_matrix_info("y.h5:test", NULL, NULL, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_UNSUPPORTED, simil_matrix_read("z.hdf5", 0, -1, &m));
    simil_metric metric;
    int declared;
    SML_ASSERT_STATUS(SIMIL_ERR_UNSUPPORTED, simil_dataset_metric("z.hdf5", &metric, &declared));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hdf5_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
