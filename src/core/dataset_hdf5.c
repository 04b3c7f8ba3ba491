/* dataset_hdf5.c: 2-d datasets of ann-benchmarks HDF5 files ("FILE.hdf5:NAME",
 * NAME being train, test, neighbors or distances), when simil is built with
 * HDF5 (SIMIL_HAVE_HDF5); otherwise both entry points say how to get it.
 *
 * A range of rows is read as a hyperslab.  HDF5 converts the stored type to
 * the one asked for: float64 arrives as float32, and any byte order works.
 * HDF5 prints its error stack by default; the library never prints, so each
 * call turns that off for its own thread and restores it afterwards. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/dataset_formats.h"
#include "core/error.h"

#if !defined(SIMIL_HAVE_HDF5)

static simil_status sml_hdf5_missing(const char *spec)
{
    return sml_error(SIMIL_ERR_UNSUPPORTED,
                     "cannot read '%s': simil was built without HDF5; install libhdf5-dev "
                     "(the serial version) and rebuild simil",
                     spec);
}

simil_status sml_hdf5_info(const char *spec, int64_t *rows, int64_t *cols, simil_dtype *dtype)
{
    (void)rows;
    (void)cols;
    (void)dtype;
    return sml_hdf5_missing(spec);
}

simil_status sml_hdf5_read(const char *spec, int64_t first, int64_t count, simil_matrix *out)
{
    (void)first;
    (void)count;
    (void)out;
    return sml_hdf5_missing(spec);
}

simil_status sml_hdf5_attribute(const char *spec, const char *name, char *out, size_t size,
                                int *found)
{
    (void)name;
    (void)out;
    (void)size;
    (void)found;
    return sml_hdf5_missing(spec);
}

#else

#include <hdf5.h>

enum { SML_HDF5_NAMES = 512 };

typedef struct sml_hdf5 {
    char *file;       /* the file part of the spec */
    const char *name; /* the dataset part, inside spec */
    const char *spec;
    hid_t fid, did, sid;
    int64_t rows, cols;
    simil_dtype dtype;
    hid_t mem_type;
    size_t stored_size; /* bytes per element in the file */
    H5E_auto2_t saved_func;
    void *saved_data;
} sml_hdf5;

typedef struct sml_hdf5_names {
    char text[SML_HDF5_NAMES];
    size_t len;
} sml_hdf5_names;

static herr_t sml_hdf5_add_name(hid_t group, const char *name, const H5L_info_t *info, void *ctx)
{
    (void)group;
    (void)info;
    sml_hdf5_names *names = ctx;
    size_t room = sizeof names->text - names->len;
    int n = snprintf(names->text + names->len, room, "%s%s", names->len ? ", " : "", name);
    if (n < 0 || (size_t)n >= room) {
        strcpy(names->text + sizeof names->text - 4, "...");
        return 1;
    }
    names->len += (size_t)n;
    return 0;
}

/* The names at the top of the file, for messages. */
static void sml_hdf5_list(hid_t fid, sml_hdf5_names *names)
{
    names->len = 0;
    strcpy(names->text, "(none)");
    hsize_t at = 0;
    H5Literate(fid, H5_INDEX_NAME, H5_ITER_INC, &at, sml_hdf5_add_name, names);
}

static simil_status sml_hdf5_no_dataset(sml_hdf5 *h, const char *why)
{
    sml_hdf5_names names;
    sml_hdf5_list(h->fid, &names);
    if (h->name == NULL || h->name[0] == '\0')
        return sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                         "'%s' names no dataset: write FILE:NAME, where NAME is one of %s", h->spec,
                         names.text);
    return sml_error(SIMIL_ERR_INVALID_ARGUMENT, "'%s' %s '%s'; it has %s", h->file, why, h->name,
                     names.text);
}

static simil_status sml_hdf5_open_file(sml_hdf5 *h)
{
    FILE *probe = fopen(h->file, "rb");
    SML_RETURN_IF(probe == NULL, SIMIL_ERR_IO, "cannot open '%s': %s", h->file, strerror(errno));
    fclose(probe);
    SML_RETURN_IF(H5Fis_hdf5(h->file) <= 0, SIMIL_ERR_CORRUPT, "'%s' is not an HDF5 file", h->file);
    h->fid = H5Fopen(h->file, H5F_ACC_RDONLY, H5P_DEFAULT);
    SML_RETURN_IF(h->fid < 0, SIMIL_ERR_CORRUPT, "'%s' is damaged: HDF5 cannot open it", h->file);
    return SIMIL_OK;
}

/* Map the stored type to a simil dtype and the memory type HDF5 converts to.
 * Only HDF5's standard layouts are taken: libhdf5 1.10 converts a damaged
 * layout (an exponent field or a bit offset past the element) differently in
 * a whole read and in a read of some rows, so such a type is refused. */
static simil_status sml_hdf5_type(sml_hdf5 *h)
{
    /* H5T_* are not constants (each opens the library), so the table is built here */
    const struct {
        hid_t stored;
        simil_dtype dtype;
        hid_t mem;
    } known[] = {
        {H5T_IEEE_F32LE, SIMIL_DTYPE_FLOAT32, H5T_NATIVE_FLOAT},
        {H5T_IEEE_F32BE, SIMIL_DTYPE_FLOAT32, H5T_NATIVE_FLOAT},
        {H5T_IEEE_F64LE, SIMIL_DTYPE_FLOAT32, H5T_NATIVE_FLOAT},
        {H5T_IEEE_F64BE, SIMIL_DTYPE_FLOAT32, H5T_NATIVE_FLOAT},
        {H5T_STD_U8LE, SIMIL_DTYPE_UINT8, H5T_NATIVE_UINT8},
        {H5T_STD_U8BE, SIMIL_DTYPE_UINT8, H5T_NATIVE_UINT8},
        {H5T_STD_I32LE, SIMIL_DTYPE_INT32, H5T_NATIVE_INT32},
        {H5T_STD_I32BE, SIMIL_DTYPE_INT32, H5T_NATIVE_INT32},
        {H5T_STD_I64LE, SIMIL_DTYPE_INT64, H5T_NATIVE_INT64},
        {H5T_STD_I64BE, SIMIL_DTYPE_INT64, H5T_NATIVE_INT64},
    };
    hid_t tid = H5Dget_type(h->did);
    SML_RETURN_IF(tid < 0, SIMIL_ERR_CORRUPT, "'%s' is damaged: dataset '%s' has no type", h->file,
                  h->name);
    H5T_class_t cls = H5Tget_class(tid);
    size_t size = H5Tget_size(tid);
    h->mem_type = -1;
    for (size_t i = 0; i < sizeof known / sizeof known[0] && h->mem_type < 0; i++) {
        if (H5Tequal(tid, known[i].stored) <= 0) continue;
        h->dtype = known[i].dtype;
        h->mem_type = known[i].mem;
        h->stored_size = size;
    }
    H5Tclose(tid);
    SML_RETURN_IF(h->mem_type < 0, SIMIL_ERR_CORRUPT,
                  "'%s': dataset '%s' has a type simil does not read (class %d, %zu bytes); "
                  "it reads IEEE float32 and float64, uint8, int32 and int64",
                  h->file, h->name, (int)cls, size);
    return SIMIL_OK;
}

static simil_status sml_hdf5_shape(sml_hdf5 *h)
{
    h->sid = H5Dget_space(h->did);
    SML_RETURN_IF(h->sid < 0, SIMIL_ERR_CORRUPT, "'%s' is damaged: dataset '%s' has no shape",
                  h->file, h->name);
    int rank = H5Sget_simple_extent_ndims(h->sid);
    SML_RETURN_IF(rank != 2, SIMIL_ERR_CORRUPT,
                  "'%s': dataset '%s' has %d dimensions; simil reads 2-d datasets", h->file,
                  h->name, rank);
    hsize_t dims[2];
    H5Sget_simple_extent_dims(h->sid, dims, NULL);
    SML_RETURN_IF(dims[0] > INT64_MAX || dims[1] > INT64_MAX, SIMIL_ERR_CORRUPT,
                  "'%s': dataset '%s' is too large", h->file, h->name);
    h->rows = (int64_t)dims[0];
    h->cols = (int64_t)dims[1];
    size_t bytes;
    return sml_dataset_bytes(h->spec, h->rows, h->cols, simil_dtype_size(h->dtype), &bytes);
}

/* The data a dataset declares must be stored, and inside the file.  A damaged
 * dataspace can declare terabytes in a 2 KB file, and libhdf5 1.10 reads a
 * contiguous dataset that runs past the end of the file as zeros in a whole
 * read but fails on some rows of it, so both are refused before anything is
 * allocated.  Data in external or virtual files is not read: a damaged or
 * hostile file could point anywhere on disk. */
static simil_status sml_hdf5_storage(sml_hdf5 *h)
{
    size_t declared;
    SML_TRY(sml_dataset_bytes(h->spec, h->rows, h->cols, h->stored_size, &declared));
    hid_t plist = H5Dget_create_plist(h->did);
    SML_RETURN_IF(plist < 0, SIMIL_ERR_CORRUPT, "'%s' is damaged: dataset '%s' has no layout",
                  h->file, h->name);
    H5D_layout_t layout = H5Pget_layout(plist);
    int external = H5Pget_external_count(plist);
    hsize_t chunk[2] = {0, 0};
    int chunk_rank = layout == H5D_CHUNKED ? H5Pget_chunk(plist, 2, chunk) : 0;
    H5Pclose(plist);
    SML_RETURN_IF(external != 0 || layout == H5D_VIRTUAL, SIMIL_ERR_UNSUPPORTED,
                  "'%s': dataset '%s' keeps its data in other files, which simil does not read",
                  h->file, h->name);
    if (declared == 0) return SIMIL_OK;
    hsize_t stored = H5Dget_storage_size(h->did);
    if (layout == H5D_CONTIGUOUS || layout == H5D_COMPACT) {
        SML_RETURN_IF(stored != declared, SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: dataset '%s' declares %zu bytes but stores %llu",
                      h->file, h->name, declared, (unsigned long long)stored);
    }
    if (layout == H5D_CONTIGUOUS) {
        /* The end is the smaller of the file's size and the end of its
         * allocated space (EOA) that the superblock records: libhdf5 refuses
         * raw reads past the EOA, but only for the rows that start past it,
         * so a damaged EOA would make a whole read succeed (with zeros) and a
         * read of some rows fail. */
        haddr_t at = H5Dget_offset(h->did);
        hsize_t file_size = 0;
        haddr_t eoa = HADDR_UNDEF;
        int known = at != HADDR_UNDEF && H5Fget_filesize(h->fid, &file_size) >= 0 &&
                    H5Fget_eoa(h->fid, &eoa) >= 0 && eoa != HADDR_UNDEF;
        hsize_t end = known && eoa < file_size ? (hsize_t)eoa : file_size;
        SML_RETURN_IF(!known || at > end || end - at < declared, SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: dataset '%s' runs past the end of the file (%zu bytes "
                      "from offset %llu in a file whose data ends at %llu)",
                      h->file, h->name, declared, (unsigned long long)at,
                      (unsigned long long)end);
    } else if (layout == H5D_CHUNKED) {
        /* Unwritten chunks would read as fill values: every chunk must be there.
         * (libhdf5 1.10.8 counts no chunks for H5S_ALL, hence the dataspace.) */
        SML_RETURN_IF(chunk_rank != 2 || chunk[0] == 0 || chunk[1] == 0, SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: dataset '%s' has no valid chunk shape", h->file, h->name);
        hsize_t want = ((hsize_t)h->rows + chunk[0] - 1) / chunk[0] *
                       (((hsize_t)h->cols + chunk[1] - 1) / chunk[1]);
        hsize_t have = 0;
        SML_RETURN_IF(H5Dget_num_chunks(h->did, h->sid, &have) < 0 || have != want,
                      SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: dataset '%s' stores %llu of its %llu chunks", h->file,
                      h->name, (unsigned long long)have, (unsigned long long)want);
    } else {
        SML_RETURN_IF(layout != H5D_COMPACT, SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: dataset '%s' has an unknown layout %d", h->file, h->name,
                      (int)layout);
    }
    return SIMIL_OK;
}

static simil_status sml_hdf5_open_dataset(sml_hdf5 *h)
{
    if (h->name == NULL || h->name[0] == '\0') return sml_hdf5_no_dataset(h, "");
    if (H5Lexists(h->fid, h->name, H5P_DEFAULT) <= 0)
        return sml_hdf5_no_dataset(h, "has no dataset");
    h->did = H5Dopen2(h->fid, h->name, H5P_DEFAULT);
    if (h->did < 0) return sml_hdf5_no_dataset(h, "cannot open as a dataset");
    SML_TRY(sml_hdf5_type(h));
    SML_TRY(sml_hdf5_shape(h));
    return sml_hdf5_storage(h);
}

static simil_status sml_hdf5_parse_spec(sml_hdf5 *h, const char *spec)
{
    const char *colon = sml_hdf5_split(spec);
    size_t n = colon != NULL ? (size_t)(colon - spec) : strlen(spec);
    SML_TRY(sml_alloc((void **)&h->file, n + 1, 1, "a file name"));
    memcpy(h->file, spec, n);
    h->file[n] = '\0';
    h->name = colon != NULL ? colon + 1 : NULL;
    return SIMIL_OK;
}

static void sml_hdf5_close(sml_hdf5 *h)
{
    if (h->sid > 0) H5Sclose(h->sid);
    if (h->did > 0) H5Dclose(h->did);
    if (h->fid > 0) H5Fclose(h->fid);
    H5Eset_auto2(H5E_DEFAULT, h->saved_func, h->saved_data);
    sml_free(h->file);
}

/* Open the file of spec, and its dataset when with_dataset is set. */
static simil_status sml_hdf5_open_as(sml_hdf5 *h, const char *spec, int with_dataset)
{
    memset(h, 0, sizeof *h);
    h->spec = spec;
    h->fid = h->did = h->sid = -1;
    H5Eget_auto2(H5E_DEFAULT, &h->saved_func, &h->saved_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    simil_status s = sml_hdf5_parse_spec(h, spec);
    if (s == SIMIL_OK) s = sml_hdf5_open_file(h);
    if (s == SIMIL_OK && with_dataset) s = sml_hdf5_open_dataset(h);
    if (s != SIMIL_OK) sml_hdf5_close(h);
    return s;
}

static simil_status sml_hdf5_open(sml_hdf5 *h, const char *spec)
{
    return sml_hdf5_open_as(h, spec, 1);
}

simil_status sml_hdf5_info(const char *spec, int64_t *rows, int64_t *cols, simil_dtype *dtype)
{
    sml_hdf5 h;
    SML_TRY(sml_hdf5_open(&h, spec));
    *rows = h.rows;
    *cols = h.cols;
    *dtype = h.dtype;
    sml_hdf5_close(&h);
    return SIMIL_OK;
}

static simil_status sml_hdf5_slab(sml_hdf5 *h, int64_t first, int64_t count, void *dst)
{
    if (count == 0 || h->cols == 0) return SIMIL_OK;
    hsize_t start[2] = {(hsize_t)first, 0}, size[2] = {(hsize_t)count, (hsize_t)h->cols};
    hid_t mem = H5Screate_simple(2, size, NULL);
    herr_t e = mem < 0 ? -1 : H5Sselect_hyperslab(h->sid, H5S_SELECT_SET, start, NULL, size, NULL);
    if (e >= 0) e = H5Dread(h->did, h->mem_type, mem, h->sid, H5P_DEFAULT, dst);
    if (mem >= 0) H5Sclose(mem);
    SML_RETURN_IF(e < 0, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: HDF5 failed to read rows [%" PRId64 ", %" PRId64
                  ") of dataset '%s'",
                  h->file, first, first + count, h->name);
    return SIMIL_OK;
}

simil_status sml_hdf5_read(const char *spec, int64_t first, int64_t count, simil_matrix *out)
{
    sml_hdf5 h;
    SML_TRY(sml_hdf5_open(&h, spec));
    simil_status s = sml_dataset_range(spec, h.rows, first, &count);
    if (s == SIMIL_OK) s = sml_dataset_alloc(out, count, h.cols, h.dtype);
    if (s == SIMIL_OK) s = sml_hdf5_slab(&h, first, count, out->data);
    if (s != SIMIL_OK) simil_matrix_free(out);
    sml_hdf5_close(&h);
    return s;
}

/* A string attribute of the root group, stored with a fixed or a variable
 * length (h5py writes Python strings as variable-length UTF-8). */
static simil_status sml_hdf5_read_string(sml_hdf5 *h, hid_t aid, const char *name, char *out,
                                         size_t size)
{
    hid_t tid = H5Aget_type(aid), mem = -1;
    herr_t e = -1;
    SML_RETURN_IF(tid < 0, SIMIL_ERR_CORRUPT, "'%s' is damaged: attribute '%s' has no type",
                  h->file, name);
    if (H5Tget_class(tid) == H5T_STRING && H5Tis_variable_str(tid) > 0) {
        char *text = NULL;
        mem = H5Tcopy(H5T_C_S1);
        if (mem >= 0 && H5Tset_size(mem, H5T_VARIABLE) >= 0 &&
            H5Tset_cset(mem, H5Tget_cset(tid)) >= 0)
            e = H5Aread(aid, mem, &text);
        if (e >= 0 && text != NULL) snprintf(out, size, "%s", text);
        if (e >= 0 && text != NULL) H5free_memory(text);
        if (e >= 0 && text == NULL) out[0] = '\0';
    } else if (H5Tget_class(tid) == H5T_STRING) {
        size_t len = H5Tget_size(tid);
        char *text = NULL;
        mem = H5Tcopy(H5T_C_S1);
        if (len < (size_t)1 << 20 && mem >= 0 && H5Tset_size(mem, len + 1) >= 0 &&
            sml_alloc((void **)&text, len + 1, 1, "an HDF5 attribute") == SIMIL_OK)
            e = H5Aread(aid, mem, text);
        if (e >= 0) snprintf(out, size, "%.*s", (int)len, text);
        sml_free(text);
    }
    if (mem >= 0) H5Tclose(mem);
    int is_string = H5Tget_class(tid) == H5T_STRING;
    H5Tclose(tid);
    SML_RETURN_IF(!is_string, SIMIL_ERR_CORRUPT, "'%s': attribute '%s' is not a string", h->file,
                  name);
    SML_RETURN_IF(e < 0, SIMIL_ERR_CORRUPT, "'%s' is damaged: cannot read attribute '%s'",
                  h->file, name);
    return SIMIL_OK;
}

simil_status sml_hdf5_attribute(const char *spec, const char *name, char *out, size_t size,
                                int *found)
{
    sml_hdf5 h;
    *found = 0;
    out[0] = '\0';
    SML_TRY(sml_hdf5_open_as(&h, spec, 0));
    simil_status s = SIMIL_OK;
    if (H5Aexists(h.fid, name) > 0) {
        hid_t aid = H5Aopen(h.fid, name, H5P_DEFAULT);
        s = aid < 0 ? sml_error(SIMIL_ERR_CORRUPT, "'%s' is damaged: cannot open attribute '%s'",
                                h.file, name)
                    : sml_hdf5_read_string(&h, aid, name, out, size);
        if (aid >= 0) H5Aclose(aid);
        *found = s == SIMIL_OK;
    }
    sml_hdf5_close(&h);
    return s;
}

#endif
