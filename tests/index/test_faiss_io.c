/* test_faiss_io.c: Faiss index files.  make_faiss_files.py (run with Debian's
 * python3-faiss) writes Faiss indexes and Faiss's own search results; simil
 * loads each file and must find the same neighbours: Flat and IVF-Flat ids
 * equal except at ties (distances within 1e-4 relative to the row's largest),
 * IVF-PQ distances within 1e-3 and ids equal except at ties within that.
 * Types simil does not read give SIMIL_ERR_UNSUPPORTED naming the Faiss code;
 * files cut at every length give SIMIL_ERR_CORRUPT, and flipped bytes never
 * anything but OK, CORRUPT or UNSUPPORTED.  simil_index_save_faiss is checked
 * the other way round: Faiss reads the files it writes and its search agrees
 * with simil's.  Every test skips, saying so, where faiss does not import;
 * where it does not but SIMIL_FAISS_FILES names a folder of files the script
 * made (a GPU machine without Faiss, say), the reading tests use those. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/test_util.h"

#ifndef SML_FAISS_SCRIPT
#error "SML_FAISS_SCRIPT must name tests/index/make_faiss_files.py"
#endif

enum { K = 10, NPROBE = 4 }; /* as in make_faiss_files.py */
static const double flat_tol = 1e-4, pq_tol = 1e-3;
static int have_faiss;       /* the script runs: files in the temporary folder */
static const char *files_dir; /* where the Faiss files are, or NULL */

static int script(const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' %s", SML_FAISS_SCRIPT, args);
    return system(cmd);
}

static int make_files(void **state)
{
    (void)state;
    have_faiss = script("check >/dev/null 2>&1") == 0;
    if (!have_faiss) {
        files_dir = getenv("SIMIL_FAISS_FILES");
        printf("# /usr/bin/python3 cannot import faiss (Debian: apt install python3-faiss): "
               "skipping %s\n", files_dir ? "the writing tests" : "every test");
        return 0;
    }
    files_dir = sml_test_tmpdir();
    char args[1024];
    snprintf(args, sizeof args, "gen '%s' 2>/dev/null", files_dir);
    return script(args) == 0 ? 0 : -1;
}

#define REQUIRE_FAISS()                                     \
    do {                                                    \
        if (!have_faiss) skip();                            \
    } while (0)

#define REQUIRE_FILES()                                     \
    do {                                                    \
        if (files_dir == NULL) skip();                      \
    } while (0)

/* A file the script made. */
static const char *data_path(const char *name)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", files_dir, name);
    return path;
}

static simil_matrix npy(const char *name, const char *suffix)
{
    char file[256];
    snprintf(file, sizeof file, "%s.%s.npy", name, suffix);
    simil_matrix m;
    SML_ASSERT_OK(simil_matrix_read(data_path(file), 0, -1, &m));
    return m;
}

/* Results against reference results of the same queries: at every rank the
 * distances agree within tol x the row's largest |distance|, and the ids too
 * unless the reference has a near tie there (or it is the last rank, tied
 * with a neighbour the reference did not return). */
static void check_same(const char *ctx, int64_t nq, const float *d, const int64_t *l,
                       const float *rd, const int64_t *rl, double tol)
{
    for (int64_t q = 0; q < nq; q++) {
        const float *dq = d + q * K, *rdq = rd + q * K;
        const int64_t *lq = l + q * K, *rlq = rl + q * K;
        double scale = 1e-6;
        for (int r = 0; r < K; r++)
            if (rlq[r] >= 0 && fabs(rdq[r]) > scale) scale = fabs(rdq[r]);
        for (int r = 0; r < K; r++) {
            if (rlq[r] < 0) {
                if (lq[r] != -1) fail_msg("%s: query %ld rank %d: id %ld, expected none", ctx,
                                          (long)q, r, (long)lq[r]);
                continue;
            }
            if (fabs((double)dq[r] - rdq[r]) > tol * scale)
                fail_msg("%s: query %ld rank %d: distance %.7g, Faiss %.7g (tol %g x %g)", ctx,
                         (long)q, r, (double)dq[r], (double)rdq[r], tol, scale);
            if (lq[r] == rlq[r]) continue;
            int tie = r == K - 1 || fabs((double)rdq[r] - rdq[r + 1]) <= tol * scale ||
                      (r > 0 && fabs((double)rdq[r] - rdq[r - 1]) <= tol * scale);
            if (!tie)
                fail_msg("%s: query %ld rank %d: id %ld, Faiss %ld (distance %.7g, no tie)", ctx,
                         (long)q, r, (long)lq[r], (long)rlq[r], (double)rdq[r]);
        }
    }
}

static void search(const simil_index *index, const simil_matrix *q, float *d, int64_t *l)
{
    simil_search_params *p = sml_test_params("");
    SML_ASSERT_OK(simil_search_params_set_int(p, "nprobe", NPROBE));
    SML_ASSERT_OK(simil_index_search(index, q->rows, q->data, K, p, d, l));
    simil_search_params_destroy(p);
}

/* Load NAME.faiss on device and compare its search with Faiss's: at
 * nprobe NPROBE, or with the index's own default nprobe when own_nprobe. */
static void check_read_nprobe(const char *name, const char *device, const char *desc,
                              simil_metric metric, double tol, int own_nprobe)
{
    char file[256], ctx[256];
    snprintf(file, sizeof file, "%s.faiss", name);
    snprintf(ctx, sizeof ctx, "%s on %s (K=%d nprobe=%s)", name, device, K,
             own_nprobe ? "the file's" : "4");
    simil_index *index = NULL;
    SML_ASSERT_OK(simil_index_load(&index, data_path(file), device));
    assert_string_equal(simil_index_description(index), desc);
    assert_int_equal(simil_index_metric(index), metric);
    simil_matrix q = npy(name, "q"), rd = npy(name, "D"), rl = npy(name, "I");
    assert_int_equal(rl.dtype, SIMIL_DTYPE_INT64);
    assert_int_equal(rd.cols, K);
    float *d = sml_test_malloc(sizeof(float) * (size_t)(q.rows * K));
    int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)(q.rows * K));
    if (own_nprobe) SML_ASSERT_OK(simil_index_search(index, q.rows, q.data, K, NULL, d, l));
    else search(index, &q, d, l);
    check_same(ctx, q.rows, d, l, rd.data, rl.data, tol);
    free(d);
    free(l);
    simil_matrix_free(&q);
    simil_matrix_free(&rd);
    simil_matrix_free(&rl);
    simil_index_destroy(index);
}

static void check_read_on(const char *name, const char *device, const char *desc,
                          simil_metric metric, double tol)
{
    check_read_nprobe(name, device, desc, metric, tol, 0);
}

static void check_read(const char *name, const char *desc, simil_metric metric, double tol)
{
    check_read_on(name, "cpu", desc, metric, tol);
    if (simil_gpu_count() > 0) check_read_on(name, "gpu", desc, metric, tol);
}

static void test_read_flat(void **state)
{
    (void)state;
    REQUIRE_FILES();
    check_read("flat_l2", "Flat", SIMIL_METRIC_L2, flat_tol);
    check_read("flat_ip", "Flat", SIMIL_METRIC_IP, flat_tol);
    check_read("idmap_flat", "Flat", SIMIL_METRIC_L2, flat_tol);
}

static void test_read_ivf_flat(void **state)
{
    (void)state;
    REQUIRE_FILES();
    check_read("ivfflat_l2", "IVF16,Flat", SIMIL_METRIC_L2, flat_tol);
    check_read("ivfflat_ip", "IVF16,Flat", SIMIL_METRIC_IP, flat_tol);
    check_read("ivfflat_sparse", "IVF16,Flat", SIMIL_METRIC_L2, flat_tol);
    check_read("idmap2_ivfflat", "IVF16,Flat", SIMIL_METRIC_L2, flat_tol);
    check_read("legacy_ivfflat", "IVF16,Flat", SIMIL_METRIC_L2, flat_tol);
}

/* The nprobe a Faiss file carries is the default of the loaded index: a
 * search that does not set nprobe visits as many lists as Faiss's does. */
static void test_read_nprobe(void **state)
{
    (void)state;
    REQUIRE_FILES();
    simil_index *index = NULL;
    SML_ASSERT_OK(simil_index_load(&index, data_path("ivfflat_nprobe6.faiss"), "cpu"));
    assert_int_equal(simil_index_nprobe(index), 6);
    simil_index_destroy(index);
    check_read_nprobe("ivfflat_nprobe6", "cpu", "IVF16,Flat", SIMIL_METRIC_L2, flat_tol, 1);
    if (simil_gpu_count() > 0)
        check_read_nprobe("ivfflat_nprobe6", "gpu", "IVF16,Flat", SIMIL_METRIC_L2, flat_tol, 1);
}

static void test_read_ivf_pq(void **state)
{
    (void)state;
    REQUIRE_FILES();
    check_read("ivfpq_l2", "IVF16,PQ8x8", SIMIL_METRIC_L2, pq_tol);
    check_read("ivfpq_ip", "IVF16,PQ8x8", SIMIL_METRIC_IP, pq_tol);
    check_read("legacy_ivfpq", "IVF16,PQ8x8", SIMIL_METRIC_L2, pq_tol);
    check_read("ivfpq4_l2", "IVF16,PQ8x4", SIMIL_METRIC_L2, pq_tol);
}

/* IndexIVFPQ with by_residual = false (L2; its codes are of the vectors, not
 * of their residuals): searched as Faiss searches it; saved in both formats
 * and loaded back to the same results; extended with the queries, each coded
 * as itself, so that with every list probed a query's nearest neighbour is its
 * own code (PQ picks the nearest codeword of each part), at the distance of
 * its reconstruction. */
static void check_write(const char *name, const simil_index *index, const simil_matrix *q,
                        const char *faiss_type, double tol);

static void check_noresidual_add(simil_index *index, const simil_matrix *q)
{
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * (size_t)q->rows);
    for (int64_t i = 0; i < q->rows; i++) ids[i] = 1000000 + i;
    SML_ASSERT_OK(simil_index_add(index, q->rows, q->data, ids));
    float *d = sml_test_malloc(sizeof(float) * (size_t)(q->rows * K));
    int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)(q->rows * K));
    simil_search_params *p = sml_test_params("");
    SML_ASSERT_OK(simil_search_params_set_int(p, "nprobe", 16));
    SML_ASSERT_OK(simil_index_search(index, q->rows, q->data, K, p, d, l));
    simil_search_params_destroy(p);
    const float *x = q->data;
    float rec[64];
    assert_true(q->cols <= 64);
    for (int64_t i = 0; i < q->rows; i++) {
        SML_ASSERT_OK(simil_index_reconstruct(index, ids[i], rec));
        double want = 0;
        for (int64_t t = 0; t < q->cols; t++) {
            const double e = (double)x[i * q->cols + t] - rec[t];
            want += e * e;
        }
        if (fabs(d[i * K] - want) > pq_tol * (1.0 + want))
            fail_msg("query %ld: nearest at %.6g, its own code at %.6g", (long)i,
                     (double)d[i * K], want);
    }
    free(ids);
    free(d);
    free(l);
}

/* The index loaded from path (on the CPU) holds as many vectors as index and
 * searches to the same results. */
static void check_loaded_same(const char *ctx, const simil_index *index, const char *path,
                              const simil_matrix *q)
{
    simil_index *back;
    SML_ASSERT_OK(simil_index_load(&back, path, "cpu"));
    assert_int_equal(simil_index_size(back), simil_index_size(index));
    float *d = sml_test_malloc(sizeof(float) * (size_t)(q->rows * K));
    float *d2 = sml_test_malloc(sizeof(float) * (size_t)(q->rows * K));
    int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)(q->rows * K));
    int64_t *l2 = sml_test_malloc(sizeof(int64_t) * (size_t)(q->rows * K));
    search(index, q, d, l);
    search(back, q, d2, l2);
    check_same(ctx, q->rows, d2, l2, d, l, 1e-6);
    simil_index_destroy(back);
    free(d);
    free(d2);
    free(l);
    free(l2);
}

/* Saved by simil and loaded back, the same results as the index. */
static void check_simil_round_trip(const char *ctx, const simil_index *index,
                                   const simil_matrix *q)
{
    const char *path = sml_test_path("noresidual.simil");
    SML_ASSERT_OK(simil_index_save(index, path));
    check_loaded_same(ctx, index, path, q);
}

/* An inner-product IndexIVFPQ with by_residual = false: its keys are the
 * query's dot products with the decoded vectors, without the coarse
 * similarity, on the CPU; saved in both formats and loaded back to the same
 * results.  The GPU's scans add the coarse similarity: it refuses the file. */
static void test_read_noresidual_ip(void **state)
{
    (void)state;
    REQUIRE_FILES();
    check_read_on("ivfpq_noresidual_ip", "cpu", "IVF16,PQ8x8", SIMIL_METRIC_IP, pq_tol);
    simil_index *index;
    SML_ASSERT_OK(simil_index_load(&index, data_path("ivfpq_noresidual_ip.faiss"), "cpu"));
    simil_matrix q = npy("ivfpq_noresidual_ip", "q");
    check_simil_round_trip("IP by_residual = false, saved by simil and loaded", index, &q);
    if (have_faiss) check_write("w_noresidual_ip", index, &q, "IndexIVFPQ", pq_tol);
    if (simil_gpu_count() > 0) {
        simil_index *gpu = (simil_index *)0x1;
        SML_ASSERT_STATUS(SIMIL_ERR_UNSUPPORTED,
                          simil_index_load(&gpu, data_path("ivfpq_noresidual_ip.faiss"), "gpu"));
        assert_null(gpu);
        if (strstr(simil_last_error(), "by_residual = false") == NULL)
            fail_msg("GPU load of ivfpq_noresidual_ip: '%s'", simil_last_error());
        const char *path = sml_test_path("noresidual_ip.simil");
        SML_ASSERT_OK(simil_index_save(index, path));
        gpu = (simil_index *)0x1;
        SML_ASSERT_STATUS(SIMIL_ERR_UNSUPPORTED, simil_index_load(&gpu, path, "gpu"));
        assert_null(gpu);
    }
    simil_index_destroy(index);
    simil_matrix_free(&q);
}

static void test_read_noresidual(void **state)
{
    (void)state;
    REQUIRE_FILES();
    check_read("ivfpq_noresidual", "IVF16,PQ8x8", SIMIL_METRIC_L2, pq_tol);
    simil_index *index, *back;
    SML_ASSERT_OK(simil_index_load(&index, data_path("ivfpq_noresidual.faiss"), "cpu"));
    simil_matrix q = npy("ivfpq_noresidual", "q");
    const char *path = sml_test_path("noresidual.simil");
    SML_ASSERT_OK(simil_index_save(index, path));
    SML_ASSERT_OK(simil_index_load(&back, path, "cpu"));
    float *d = sml_test_malloc(sizeof(float) * (size_t)(q.rows * K));
    float *d2 = sml_test_malloc(sizeof(float) * (size_t)(q.rows * K));
    int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)(q.rows * K));
    int64_t *l2 = sml_test_malloc(sizeof(int64_t) * (size_t)(q.rows * K));
    search(index, &q, d, l);
    search(back, &q, d2, l2);
    check_same("by_residual = false, saved by simil and loaded", q.rows, d2, l2, d, l, 1e-6);
    simil_index_destroy(back);
    if (have_faiss) check_write("w_noresidual", index, &q, "IndexIVFPQ", pq_tol);
    check_noresidual_add(index, &q);
    if (simil_gpu_count() > 0) {
        simil_index_destroy(index);
        SML_ASSERT_OK(simil_index_load(&index, data_path("ivfpq_noresidual.faiss"), "gpu"));
        check_noresidual_add(index, &q);
    }
    simil_index_destroy(index);
    simil_matrix_free(&q);
    free(d);
    free(d2);
    free(l);
    free(l2);
}

/* IndexPreTransform with an OPQ rotation around an IVF-PQ: simil's OPQ. */
static void test_read_opq(void **state)
{
    (void)state;
    REQUIRE_FILES();
    check_read("opq_ivfpq", "OPQ8_32,IVF16,PQ8x8", SIMIL_METRIC_L2, pq_tol);
    check_read("idmap_opq_ivfpq4_ip", "OPQ8_16,IVF16,PQ8x4", SIMIL_METRIC_IP, pq_tol);
}

/* IndexHNSWFlat loads as Flat over its vectors: exact search, which the
 * reference files hold (Faiss's IndexFlat over the same vectors). */
static void test_read_hnsw(void **state)
{
    (void)state;
    REQUIRE_FILES();
    check_read("hnsw_l2", "Flat", SIMIL_METRIC_L2, flat_tol);
    check_read("hnsw_ip", "Flat", SIMIL_METRIC_IP, flat_tol);
    simil_index *index = NULL;
    SML_ASSERT_OK(simil_index_load(&index, data_path("idmap_hnsw_empty.faiss"), "cpu"));
    assert_int_equal(simil_index_size(index), 0);
    simil_index_destroy(index);
}

/* Descriptions name every object read, also of files simil does not load. */
static void expect_described(const char *file, const char *words)
{
    char text[512];
    SML_ASSERT_OK(simil_faiss_describe(data_path(file), text, sizeof text));
    if (strstr(text, words) == NULL) fail_msg("%s: '%s' does not say '%s'", file, text, words);
}

static void test_describe(void **state)
{
    (void)state;
    REQUIRE_FILES();
    expect_described("flat_l2.faiss", "IndexFlatL2: d=20, ntotal=1000, metric l2");
    expect_described("idmap2_ivfflat.faiss",
                     "IndexIDMap2 > IndexIVFFlat (nlist 16, nprobe 1): d=32, ntotal=3000");
    expect_described("ivfflat_nprobe6.faiss", "(nlist 16, nprobe 6)");
    expect_described("ivfpq4_l2.faiss", "IndexIVFPQ (nlist 16, nprobe 1, M 8, nbits 4, by_residual)");
    expect_described("opq_ivfpq.faiss", "IndexPreTransform [LinearTransform 32 -> 32] > IndexIVFPQ");
    expect_described("hnsw_l2.faiss", "IndexHNSWFlat (M 8, ");
    expect_described("hnsw_l2.faiss", "> IndexFlatL2: d=16, ntotal=800");
    expect_described("unsupported_hnswpq.faiss", "IndexHNSWPQ");
    expect_described("unsupported_hnswpq.faiss", "d=16, ntotal=30, metric l2");
    expect_described("ivfpq_noresidual_ip.faiss", "nbits 8, by_residual = false)");
    expect_described("ivfpq_noresidual.faiss", "nbits 8, by_residual = false)");
    expect_described("unsupported_pca.faiss", "IndexPreTransform [transform 'Pcam']");
    expect_described("sq8_l2.faiss", "IndexScalarQuantizer (QT_8bit): d=24, ntotal=3000");
    expect_described("ivfsqfp16_ip.faiss", "(nlist 16, nprobe 1, QT_fp16): d=24");
    expect_described("unsupported_sq4.faiss", "IndexScalarQuantizer (QT_4bit)");
    expect_described("ivfsq8_noresidual_l2.faiss", "QT_8bit), by_residual = false");
    /* a simil file is not a Faiss file; a missing file is an I/O error */
    char text[64];
    simil_index *index;
    const char *own = sml_test_path("own.simil");
    SML_ASSERT_OK(simil_index_create(&index, 4, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_save(index, own));
    simil_index_destroy(index);
    SML_ASSERT_STATUS(SIMIL_ERR_CORRUPT, simil_faiss_describe(own, text, sizeof text));
    SML_ASSERT_STATUS(SIMIL_ERR_IO,
                      simil_faiss_describe(sml_test_path("nothing-here"), text, sizeof text));
}

/* Scalar quantizers: simil decodes Faiss's codes to the same floats, so the
 * distances agree to float rounding.  bf16 files exist where Faiss has the
 * type (>= 1.9).  ivf: 0 flat, 1 IVF of residual codes, 2 IVF with
 * by_residual = false (codes of the vectors, keyed without the centroid). */
static void test_read_sq(void **state)
{
    (void)state;
    REQUIRE_FILES();
    const char *types[][2] = {{"sq8", "SQ8"}, {"sqfp16", "SQfp16"}, {"sqbf16", "SQbf16"}};
    for (int t = 0; t < 3; t++) {
        for (int ivf = 0; ivf < 3; ivf++) {
            for (int m = 0; m < 2; m++) {
                char name[64], desc[64], file[80];
                snprintf(name, sizeof name, "%s%s%s_%s", ivf ? "ivf" : "", types[t][0],
                         ivf == 2 ? "_noresidual" : "", m ? "ip" : "l2");
                snprintf(desc, sizeof desc, "%s%s", ivf ? "IVF16," : "", types[t][1]);
                snprintf(file, sizeof file, "%s.faiss", name);
                FILE *f = fopen(data_path(file), "rb");
                if (f == NULL) {
                    assert_int_equal(t, 2); /* only bf16 may be missing */
                    printf("# %s: this Faiss has no QT_bf16, not tested\n", name);
                    continue;
                }
                fclose(f);
                check_read(name, desc, m ? SIMIL_METRIC_IP : SIMIL_METRIC_L2, pq_tol);
            }
        }
    }
    check_read("idmap_sq8", "SQ8", SIMIL_METRIC_L2, pq_tol);
}

/* IndexIVFScalarQuantizer with by_residual = false, beyond Faiss's search:
 * saved by simil and loaded back to the same results; vectors added after
 * loading are coded as themselves, so that each query added finds itself, at
 * the distance of its reconstruction, which is near the query. */
static void test_read_sq_noresidual(void **state)
{
    (void)state;
    REQUIRE_FILES();
    const char *names[] = {"ivfsq8_noresidual_l2", "ivfsqfp16_noresidual_l2",
                           "ivfsq8_noresidual_ip"};
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
        char file[80];
        snprintf(file, sizeof file, "%s.faiss", names[n]);
        simil_index *index;
        SML_ASSERT_OK(simil_index_load(&index, data_path(file), "cpu"));
        simil_matrix q = npy(names[n], "q");
        check_simil_round_trip(names[n], index, &q);
        if (simil_index_metric(index) == SIMIL_METRIC_L2) {
            int64_t *ids = sml_test_malloc(sizeof(int64_t) * (size_t)q.rows);
            for (int64_t i = 0; i < q.rows; i++) ids[i] = 1000000 + i;
            SML_ASSERT_OK(simil_index_add(index, q.rows, q.data, ids));
            float *d = sml_test_malloc(sizeof(float) * (size_t)(q.rows * K));
            int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)(q.rows * K));
            simil_search_params *p = sml_test_params("");
            SML_ASSERT_OK(simil_search_params_set_int(p, "nprobe", 16));
            SML_ASSERT_OK(simil_index_search(index, q.rows, q.data, K, p, d, l));
            simil_search_params_destroy(p);
            float rec[64];
            assert_true(q.cols <= 64);
            for (int64_t i = 0; i < q.rows; i++) {
                const float *x = (const float *)q.data + i * q.cols;
                SML_ASSERT_OK(simil_index_reconstruct(index, ids[i], rec));
                double err = 0, norm = 0;
                for (int64_t t = 0; t < q.cols; t++) {
                    err += ((double)x[t] - rec[t]) * ((double)x[t] - rec[t]);
                    norm += (double)x[t] * x[t];
                }
                if (err > 1e-3 * norm)
                    fail_msg("%s: query %ld added, reconstructed %.6g away (norm^2 %.6g)",
                             names[n], (long)i, err, norm);
                int found = 0;
                for (int r = 0; r < K; r++)
                    if (l[i * K + r] == ids[i]) {
                        found = 1;
                        if (fabs(d[i * K + r] - err) > pq_tol * (1.0 + err))
                            fail_msg("%s: query %ld finds itself at %.6g, its code is %.6g away",
                                     names[n], (long)i, (double)d[i * K + r], err);
                    }
                if (!found) fail_msg("%s: query %ld added, not found", names[n], (long)i);
            }
            free(ids);
            free(d);
            free(l);
        }
        simil_index_destroy(index);
        simil_matrix_free(&q);
    }
}

static void expect_unsupported(const char *file, const char *words)
{
    simil_index *index = (simil_index *)0x1;
    SML_ASSERT_STATUS(SIMIL_ERR_UNSUPPORTED, simil_index_load(&index, data_path(file), "cpu"));
    assert_null(index);
    if (strstr(simil_last_error(), words) == NULL)
        fail_msg("%s: message '%s' does not say '%s'", file, simil_last_error(), words);
}

static void test_read_unsupported(void **state)
{
    (void)state;
    REQUIRE_FILES();
    expect_unsupported("unsupported_hnswpq.faiss", "Faiss index type 'IHNp' (IndexHNSWPQ)");
    expect_unsupported("unsupported_pq.faiss", "'IxPq'");
    expect_unsupported("unsupported_nbits2.faiss", "nbits=2");
    expect_unsupported("unsupported_pca.faiss", "'Pcam'");
    expect_unsupported("unsupported_opq_ivfflat.faiss", "around a Faiss IVF-Flat index");
    expect_unsupported("unsupported_sq4.faiss", "scalar quantizer of type 1");
}

static unsigned char *slurp(const char *path, long *size)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    *size = (long)st.st_size;
    unsigned char *buf = sml_test_malloc((size_t)*size + 8);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, (size_t)*size, f), (size_t)*size);
    fclose(f);
    return buf;
}

static void spill(const char *path, const unsigned char *buf, long size)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
}

/* The whole file loads; every cut (every step-th length) is CORRUPT; with
 * flip_step, every flip_step-th byte flipped may give OK, CORRUPT or
 * UNSUPPORTED only. */
static void check_damage(const char *file, long step, long flip_step)
{
    long size;
    unsigned char *bytes = slurp(data_path(file), &size);
    const char *bad = sml_test_path("damaged.faiss");
    simil_index *index;
    SML_ASSERT_OK(simil_index_load(&index, data_path(file), "cpu"));
    simil_index_destroy(index);
    for (long cut = 0; cut < size; cut += step) {
        spill(bad, bytes, cut);
        index = (simil_index *)0x1;
        simil_status s = simil_index_load(&index, bad, "cpu");
        if (s != SIMIL_ERR_CORRUPT)
            fail_msg("%s cut at %ld of %ld: %s (%s)", file, cut, size, simil_status_name(s),
                     simil_last_error());
        assert_null(index);
    }
    memset(bytes + size, 0, 8);
    spill(bad, bytes, size + 8);
    SML_ASSERT_STATUS(SIMIL_ERR_CORRUPT, simil_index_load(&index, bad, "cpu"));
    for (long at = 0; flip_step > 0 && at < size; at += flip_step) {
        bytes[at] ^= 0x5a;
        spill(bad, bytes, size);
        bytes[at] ^= 0x5a;
        simil_status s = simil_index_load(&index, bad, "cpu");
        if (s == SIMIL_OK) simil_index_destroy(index);
        else if (s != SIMIL_ERR_CORRUPT && s != SIMIL_ERR_UNSUPPORTED)
            fail_msg("%s flipped at %ld of %ld: %s (%s)", file, at, size, simil_status_name(s),
                     simil_last_error());
    }
    free(bytes);
}

static void test_read_damaged(void **state)
{
    (void)state;
    REQUIRE_FILES();
    const char *tiny[] = {"tiny_flat.faiss", "tiny_idmap.faiss", "tiny_ivfflat.faiss",
                          "tiny_ivfflat_sparse.faiss", "tiny_legacy_ivfflat.faiss",
                          "tiny_sq8.faiss", "tiny_ivfsqfp16.faiss",
                          "tiny_ivfsq8_noresidual.faiss"};
    for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; i++) check_damage(tiny[i], 1, 1);
    /* most bytes of these are PQ codebooks: flip some of those */
    check_damage("tiny_ivfpq.faiss", 1, 7);
    check_damage("tiny_hnsw.faiss", 1, 1);
    check_damage("tiny_opq.faiss", 1, 7);
    check_damage("tiny_legacy_ivfpq.faiss", 1, 7);
    check_damage("idmap2_ivfflat.faiss", 997, 0);
    check_damage("ivfpq_l2.faiss", 101, 0);
}

/* ---- writing ---- */

/* Save index for Faiss as NAME.faiss, let Faiss search it, compare with
 * simil's own search of index and of the file loaded back. */
static void check_write(const char *name, const simil_index *index, const simil_matrix *q,
                        const char *faiss_type, double tol)
{
    char file[256], ctx[256], args[1024];
    snprintf(file, sizeof file, "%s.faiss", name);
    snprintf(ctx, sizeof ctx, "%s written as %s (K=%d nprobe=%d)", name, faiss_type, K, NPROBE);
    SML_ASSERT_OK(simil_index_save_faiss(index, sml_test_path(file)));
    snprintf(file, sizeof file, "%s.q.npy", name);
    SML_ASSERT_OK(simil_matrix_write(sml_test_path(file), q));
    snprintf(args, sizeof args, "search '%s' %s %d %d", sml_test_tmpdir(), name, K, NPROBE);
    assert_int_equal(script(args), 0);
    snprintf(file, sizeof file, "%s.type.txt", name);
    char type[64] = "";
    FILE *f = fopen(sml_test_path(file), "r");
    assert_non_null(f);
    assert_non_null(fgets(type, sizeof type, f));
    fclose(f);
    if (strncmp(type, faiss_type, strlen(faiss_type)) != 0)
        fail_msg("%s: Faiss read a %s", ctx, type);
    simil_matrix rd = npy(name, "D"), rl = npy(name, "I");
    float *d = sml_test_malloc(sizeof(float) * (size_t)(q->rows * K));
    int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)(q->rows * K));
    search(index, q, d, l);
    check_same(ctx, q->rows, d, l, rd.data, rl.data, tol);
    free(d);
    free(l);
    /* and simil reads its own Faiss file back to the same results */
    snprintf(file, sizeof file, "%s.faiss", name);
    check_loaded_same(ctx, index, sml_test_path(file), q);
    simil_matrix_free(&rd);
    simil_matrix_free(&rl);
}

enum { WN = 3000, WD = 24, WQ = 30 };

static simil_index *built_on(const char *device, const char *desc, simil_metric metric,
                             const float *x, int shuffle_ids)
{
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, WD, desc, metric, device));
    SML_ASSERT_OK(simil_index_train(index, WN, x));
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * WN);
    for (int64_t i = 0; i < WN; i++) ids[i] = shuffle_ids ? (i * 7919) % WN * 3 + 40 : i;
    SML_ASSERT_OK(simil_index_add(index, WN, x, ids));
    free(ids);
    return index;
}

static simil_index *built(const char *desc, simil_metric metric, const float *x, int shuffle_ids)
{
    return built_on("cpu", desc, metric, x, shuffle_ids);
}

static void test_write(void **state)
{
    (void)state;
    REQUIRE_FAISS();
    float *x = sml_test_malloc(sizeof(float) * WN * WD);
    sml_test_fill_uniform(x, WN * WD, 77, -1, 1);
    simil_matrix q = {.rows = WQ, .cols = WD, .dtype = SIMIL_DTYPE_FLOAT32};
    q.data = sml_test_malloc(sizeof(float) * WQ * WD);
    sml_test_fill_uniform(q.data, WQ * WD, 78, -1, 1);
    struct {
        const char *name, *desc;
        simil_metric metric;
        int shuffle;
        const char *faiss_type;
        double tol;
    } cases[] = {
        {"w_flat_l2", "Flat", SIMIL_METRIC_L2, 0, "IndexFlat", flat_tol},
        {"w_flat_ip_ids", "Flat", SIMIL_METRIC_IP, 1, "IndexIDMap2", flat_tol},
        {"w_ivfflat_ids", "IVF16,Flat", SIMIL_METRIC_L2, 1, "IndexIVFFlat", flat_tol},
        {"w_ivfflat_ip", "IVF16,Flat", SIMIL_METRIC_IP, 0, "IndexIVFFlat", flat_tol},
        {"w_ivfpq", "IVF16,PQ8x8", SIMIL_METRIC_L2, 1, "IndexIVFPQ", pq_tol},
        {"w_ivfpq_ip", "IVF16,PQ8x8", SIMIL_METRIC_IP, 0, "IndexIVFPQ", pq_tol},
        {"w_pq", "PQ6", SIMIL_METRIC_L2, 0, "IndexIVFPQ", pq_tol},
        {"w_ivfpq4", "IVF16,PQ8x4", SIMIL_METRIC_L2, 1, "IndexIVFPQ", pq_tol},
        {"w_ivfpq6_ip", "IVF16,PQ6x6", SIMIL_METRIC_IP, 0, "IndexIVFPQ", pq_tol},
        {"w_opq", "OPQ6,IVF16,PQ6", SIMIL_METRIC_L2, 1, "IndexPreTransform", pq_tol},
        {"w_opq4_ip", "OPQ4_12,IVF16,PQ4x4", SIMIL_METRIC_IP, 0, "IndexPreTransform", pq_tol},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        simil_index *index = built(cases[i].desc, cases[i].metric, x, cases[i].shuffle);
        check_write(cases[i].name, index, &q, cases[i].faiss_type, cases[i].tol);
        simil_index_destroy(index);
    }
    /* cosine: written as inner product over the normalized vectors; Faiss
     * searches normalized queries */
    simil_index *index = built("Flat", SIMIL_METRIC_COSINE, x, 1);
    sml_test_normalize(q.data, WQ, WD);
    check_write("w_flat_cosine", index, &q, "IndexIDMap2", flat_tol);
    simil_index_destroy(index);
    free(q.data);
    free(x);
}

/* Without Faiss: an index saved for Faiss on each device loads back (on the
 * CPU) to the same search results. */
static void test_write_round_trip(void **state)
{
    (void)state;
    float *x = sml_test_malloc(sizeof(float) * WN * WD);
    float *q = sml_test_malloc(sizeof(float) * WQ * WD);
    sml_test_fill_uniform(x, WN * WD, 79, -1, 1);
    sml_test_fill_uniform(q, WQ * WD, 80, -1, 1);
    simil_matrix qm = {.rows = WQ, .cols = WD, .dtype = SIMIL_DTYPE_FLOAT32, .data = q};
    const char *devices[] = {"cpu", "gpu"};
    const char *descs[] = {"Flat", "IVF16,Flat", "IVF16,PQ6", "PQ4", "IVF16,PQ6x5",
                           "OPQ6_12,IVF16,PQ6x4"};
    const char *path = sml_test_path("round.faiss");
    float d[WQ * K], d2[WQ * K];
    int64_t l[WQ * K], l2[WQ * K];
    for (int dev = 0; dev < (simil_gpu_count() > 0 ? 2 : 1); dev++)
        for (size_t i = 0; i < sizeof descs / sizeof descs[0]; i++) {
            char ctx[128];
            snprintf(ctx, sizeof ctx, "%s on %s, saved for Faiss and loaded", descs[i],
                     devices[dev]);
            simil_index *index = built_on(devices[dev], descs[i], SIMIL_METRIC_L2, x, 1), *back;
            SML_ASSERT_OK(simil_index_save_faiss(index, path));
            SML_ASSERT_OK(simil_index_load(&back, path, "cpu"));
            const char *want[] = {"Flat", "IVF16,Flat", "IVF16,PQ6x8", "IVF1,PQ4x8",
                                  "IVF16,PQ6x5", "OPQ6_12,IVF16,PQ6x4"};
            assert_string_equal(simil_index_description(back), want[i]);
            search(index, &qm, d, l);
            search(back, &qm, d2, l2);
            check_same(ctx, WQ, d2, l2, d, l, i < 2 ? flat_tol : pq_tol);
            simil_index_destroy(index);
            simil_index_destroy(back);
        }
    free(x);
    free(q);
}

/* The index's default nprobe goes into the Faiss file and comes back. */
static void test_write_nprobe(void **state)
{
    (void)state;
    float *x = sml_test_malloc(sizeof(float) * WN * WD);
    sml_test_fill_uniform(x, WN * WD, 81, -1, 1);
    const char *path = sml_test_path("nprobe.faiss");
    simil_index *index = built("IVF16,Flat", SIMIL_METRIC_L2, x, 0), *back;
    assert_int_equal(simil_index_nprobe(index), 1);
    SML_ASSERT_OK(simil_index_set_nprobe(index, 7));
    SML_ASSERT_OK(simil_index_save_faiss(index, path));
    SML_ASSERT_OK(simil_index_load(&back, path, "cpu"));
    assert_int_equal(simil_index_nprobe(back), 7);
    simil_index_destroy(back);
    simil_index_destroy(index);
    free(x);
}

static void test_write_errors(void **state)
{
    (void)state;
    simil_index *index;
    const char *path = sml_test_path("refused.faiss");
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_save_faiss(NULL, path));
    SML_ASSERT_OK(simil_index_create(&index, 8, "IVF4,Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_save_faiss(index, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_NOT_TRAINED, simil_index_save_faiss(index, path));
    simil_index_destroy(index);
    /* refused for what they are, before any training (simil_index_check_faiss) */
    const struct {
        const char *desc, *words;
    } refused[] = {{"IVF4,PQ4,Refine", "IndexRefineFlat"},
                   {"XFBQ", "no Faiss counterpart"},
                   {"Shards2,IVF4,Flat", "IndexShards"},
                   {"SQ8", "does not write them yet"},
                   {"IVF4,SQfp16", "IndexIVFScalarQuantizer"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        SML_ASSERT_OK(simil_index_create(&index, 8, refused[i].desc, SIMIL_METRIC_L2, "cpu"));
        SML_ASSERT_STATUS(SIMIL_ERR_UNSUPPORTED, simil_index_check_faiss(index));
        if (strstr(simil_last_error(), refused[i].words) == NULL)
            fail_msg("%s: '%s' does not say '%s'", refused[i].desc, simil_last_error(),
                     refused[i].words);
        SML_ASSERT_STATUS(SIMIL_ERR_UNSUPPORTED, simil_index_save_faiss(index, path));
        simil_index_destroy(index);
    }
    const char *accepted[] = {"Flat", "IVF4,Flat", "IVF4,PQ4x6", "OPQ4,IVF4,PQ4", "PQ2x4"};
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
        SML_ASSERT_OK(simil_index_create(&index, 8, accepted[i], SIMIL_METRIC_COSINE, "cpu"));
        SML_ASSERT_OK(simil_index_check_faiss(index));
        simil_index_destroy(index);
    }
    struct stat st;
    assert_int_not_equal(stat(path, &st), 0); /* nothing was written */
    /* a folder that does not exist: IO error, nothing left behind */
    SML_ASSERT_OK(simil_index_create(&index, 8, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_index_save_faiss(index, sml_test_path("no/such.faiss")));
    /* an empty Flat is a valid Faiss file, and loads back empty */
    SML_ASSERT_OK(simil_index_save_faiss(index, path));
    simil_index_destroy(index);
    SML_ASSERT_OK(simil_index_load(&index, path, "cpu"));
    assert_int_equal(simil_index_size(index), 0);
    simil_index_destroy(index);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_flat),     cmocka_unit_test(test_read_ivf_flat),
        cmocka_unit_test(test_read_ivf_pq),   cmocka_unit_test(test_read_sq),
        cmocka_unit_test(test_read_noresidual),
        cmocka_unit_test(test_read_noresidual_ip), cmocka_unit_test(test_read_sq_noresidual),
        cmocka_unit_test(test_read_unsupported),
        cmocka_unit_test(test_read_nprobe),   cmocka_unit_test(test_write_nprobe),
        cmocka_unit_test(test_read_opq),      cmocka_unit_test(test_read_hnsw),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_read_damaged),  cmocka_unit_test(test_write),
        cmocka_unit_test(test_write_round_trip), cmocka_unit_test(test_write_errors),
    };
    return cmocka_run_group_tests(tests, make_files, NULL);
}
