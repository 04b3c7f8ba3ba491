/* test_index_file.c: saving and loading indexes: identical results after a
 * round trip, atomic replacement, and clean errors for truncated, damaged or
 * foreign files (every truncation length, every flipped byte of a small file). */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <inttypes.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/file_io.h"
#include "util/test_util.h"

enum { N = 40, D = 6, NQ = 5, K = 4 };

static simil_index *make_index(simil_metric metric, float *base)
{
    simil_index *index;
    sml_test_fill_uniform(base, N * D, 21, -2, 2);
    SML_ASSERT_OK(simil_index_create(&index, D, "Flat", metric, "cpu"));
    int64_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = 5 * i + 3;
    SML_ASSERT_OK(simil_index_add(index, N, base, ids));
    int64_t gone[2] = {8, 13};
    SML_ASSERT_OK(simil_index_remove(index, 2, gone, NULL));
    return index;
}

static long file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (long)st.st_size;
}

static void test_round_trip(void **state)
{
    (void)state;
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};
    for (int m = 0; m < 3; m++) {
        float base[N * D];
        simil_index *index = make_index(metrics[m], base);
        const char *path = sml_test_path("round.simil");
        SML_ASSERT_OK(simil_index_save(index, path));
        simil_index *loaded;
        SML_ASSERT_OK(simil_index_load(&loaded, path, "cpu"));
        assert_int_equal(simil_index_size(loaded), N - 2);
        assert_int_equal(simil_index_dim(loaded), D);
        assert_int_equal(simil_index_metric(loaded), metrics[m]);
        assert_string_equal(simil_index_description(loaded), "Flat");
        float d1[NQ * K], d2[NQ * K];
        int64_t l1[NQ * K], l2[NQ * K];
        SML_ASSERT_OK(simil_index_search(index, NQ, base, K, NULL, d1, l1));
        SML_ASSERT_OK(simil_index_search(loaded, NQ, base, K, NULL, d2, l2));
        assert_memory_equal(l1, l2, sizeof l1);
        assert_memory_equal(d1, d2, sizeof d1);
        /* sequential numbering continues where the saved index stopped */
        int64_t l3[1];
        float d3[1];
        SML_ASSERT_OK(simil_index_add(loaded, 1, base, NULL));
        SML_ASSERT_OK(simil_index_add(index, 1, base, NULL));
        SML_ASSERT_OK(simil_index_search(loaded, 1, base, 1, NULL, d3, l3));
        SML_ASSERT_OK(simil_index_search(index, 1, base, 1, NULL, d1, l1));
        assert_int_equal(l3[0], l1[0]);
        simil_index_destroy(loaded);
        simil_index_destroy(index);
    }
}

static void test_empty_round_trip(void **state)
{
    (void)state;
    simil_index *index, *loaded;
    SML_ASSERT_OK(simil_index_create(&index, 3, "Flat", SIMIL_METRIC_L2, "cpu"));
    const char *path = sml_test_path("empty.simil");
    SML_ASSERT_OK(simil_index_save(index, path));
    SML_ASSERT_OK(simil_index_load(&loaded, path, "cpu"));
    assert_int_equal(simil_index_size(loaded), 0);
    simil_index_destroy(loaded);
    simil_index_destroy(index);
}

static void test_truncated_and_damaged(void **state)
{
    (void)state;
    float base[N * D];
    simil_index *index = make_index(SIMIL_METRIC_L2, base);
    const char *good = sml_test_path("good.simil");
    SML_ASSERT_OK(simil_index_save(index, good));
    simil_index_destroy(index);
    long size;
    unsigned char *bytes = sml_test_read_file(good, &size);
    const char *bad = sml_test_path("bad.simil");
    simil_index *loaded;
    for (long cut = 0; cut < size; cut++) {
        sml_test_write_file(bad, bytes, cut);
        loaded = (simil_index *)0x1;
        simil_status s = simil_index_load(&loaded, bad, "cpu");
        if (s != SIMIL_ERR_CORRUPT) fail_msg("cut at %ld of %ld: %s", cut, size, simil_status_name(s));
        assert_null(loaded);
    }
    for (long at = 0; at < size; at++) {
        unsigned char *copy = sml_test_malloc((size_t)size);
        memcpy(copy, bytes, (size_t)size);
        copy[at] ^= 0x5a;
        sml_test_write_file(bad, copy, size);
        simil_status s = simil_index_load(&loaded, bad, "cpu");
        if (s != SIMIL_ERR_CORRUPT) fail_msg("flip at %ld of %ld: %s", at, size, simil_status_name(s));
        free(copy);
    }
    /* trailing garbage */
    unsigned char *longer = sml_test_malloc((size_t)size + 3);
    memcpy(longer, bytes, (size_t)size);
    memset(longer + size, 0, 3);
    sml_test_write_file(bad, longer, size + 3);
    SML_ASSERT_STATUS(SIMIL_ERR_CORRUPT, simil_index_load(&loaded, bad, "cpu"));
    free(longer);
    free(bytes);
    /* foreign and missing files */
    sml_test_write_file(bad, (const unsigned char *)"hello, this is not an index", 27);
    SML_ASSERT_STATUS(SIMIL_ERR_CORRUPT, simil_index_load(&loaded, bad, "cpu"));
    assert_non_null(strstr(simil_last_error(), "not a simil index"));
    SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_index_load(&loaded, sml_test_path("missing"), "cpu"));
    SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_index_load(&loaded, sml_test_tmpdir(), "cpu"));
}

/* The default nprobe: searches without one use it; it survives a save (a
 * version 2 file), and an index without one is saved as version 1.  A
 * version 2 file cut or flipped anywhere fails cleanly. */
static void test_nprobe_default(void **state)
{
    (void)state;
    enum { NB = 600, DIM = 8, NQ2 = 20, K2 = 10 };
    float *x = sml_test_malloc(sizeof(float) * NB * DIM);
    sml_test_fill_uniform(x, NB * DIM, 31, -1, 1);
    simil_index *index, *loaded, *flat;
    SML_ASSERT_OK(simil_index_create(&index, DIM, "IVF16,Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_train(index, NB, x));
    SML_ASSERT_OK(simil_index_add(index, NB, x, NULL));
    const char *path = sml_test_path("nprobe.simil");
    SML_ASSERT_OK(simil_index_save(index, path));
    long size;
    unsigned char *bytes = sml_test_read_file(path, &size);
    assert_int_equal(bytes[8], 1); /* no default set: version 1 */
    free(bytes);
    assert_int_equal(simil_index_nprobe(index), 1);
    SML_ASSERT_OK(simil_index_set_nprobe(index, 16));
    assert_int_equal(simil_index_nprobe(index), 16);
    /* nprobe 16 of 16 lists is exact: a search with no parameters is too */
    float d1[NQ2 * K2], d2[NQ2 * K2];
    int64_t l1[NQ2 * K2], l2[NQ2 * K2];
    SML_ASSERT_OK(simil_index_create(&flat, DIM, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_add(flat, NB, x, NULL));
    SML_ASSERT_OK(simil_index_search(flat, NQ2, x, K2, NULL, d1, l1));
    SML_ASSERT_OK(simil_index_search(index, NQ2, x, K2, NULL, d2, l2));
    assert_memory_equal(l1, l2, sizeof l1);
    SML_ASSERT_OK(simil_index_save(index, path));
    bytes = sml_test_read_file(path, &size);
    assert_int_equal(bytes[8], 2);
    SML_ASSERT_OK(simil_index_load(&loaded, path, "cpu"));
    assert_int_equal(simil_index_nprobe(loaded), 16);
    SML_ASSERT_OK(simil_index_search(loaded, NQ2, x, K2, NULL, d2, l2));
    assert_memory_equal(l1, l2, sizeof l1);
    simil_index_destroy(loaded);
    const char *bad = sml_test_path("nprobe-bad.simil");
    for (long cut = size - 64; cut < size; cut++) {
        sml_test_write_file(bad, bytes, cut);
        SML_ASSERT_STATUS(SIMIL_ERR_CORRUPT, simil_index_load(&loaded, bad, "cpu"));
    }
    free(bytes);
    /* bad values; indexes without inverted lists have no nprobe */
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_set_nprobe(index, -1));
    assert_int_equal(simil_index_nprobe(index), 16);
    SML_ASSERT_OK(simil_index_set_nprobe(index, 0));
    assert_int_equal(simil_index_nprobe(index), 1);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_set_nprobe(flat, 4));
    assert_int_equal(simil_index_nprobe(flat), 0);
    simil_index_destroy(flat);
    simil_index_destroy(index);
    free(x);
}

static void test_failed_save_keeps_old_file(void **state)
{
    (void)state;
    float base[N * D];
    simil_index *index = make_index(SIMIL_METRIC_L2, base);
    const char *path = sml_test_path("keep.simil");
    SML_ASSERT_OK(simil_index_save(index, path));
    long size;
    unsigned char *before = sml_test_read_file(path, &size);
    /* make the save fail part-way: a file size limit stops the write after
     * 200 bytes (EFBIG), long before the new file is complete */
    SML_ASSERT_OK(simil_index_add(index, N, base, NULL));
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old_limit, limit;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
    limit = old_limit;
    limit.rlim_cur = 200;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &limit), 0);
    simil_status s = simil_index_save(index, path);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
    assert_int_equal(s, SIMIL_ERR_IO);
    long after_size;
    unsigned char *after = sml_test_read_file(path, &after_size);
    assert_int_equal(after_size, size);
    assert_memory_equal(after, before, (size_t)size);
    free(after);
    /* an allocation failure at the start: also an error, old file intact */
    for (int64_t fail_at = 1; fail_at <= 3; fail_at++) {
        sml_alloc_fail_at(fail_at, 1);
        s = simil_index_save(index, path);
        sml_alloc_fail_at(0, 0);
        assert_int_equal(s, SIMIL_ERR_OUT_OF_MEMORY);
        after = sml_test_read_file(path, &after_size);
        assert_memory_equal(after, before, (size_t)size);
        free(after);
    }
    /* a folder that does not exist: an I/O error, nothing written */
    SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_index_save(index, sml_test_path("no/such/dir.simil")));
    /* no temporary files are left behind */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp-", sml_test_tmpdir());
    assert_int_not_equal(system(cmd), 0);
    free(before);
    simil_index_destroy(index);
}

/* Peak resident memory (kB) of a child that loads path, or -1 if the load
 * failed. */
static long load_peak_kb(const char *path)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        simil_index *index;
        simil_status s = simil_index_load(&index, path, "cpu");
        if (s == SIMIL_OK) simil_index_destroy(index);
        _exit(s == SIMIL_OK ? 0 : 1);
    }
    int status;
    struct rusage use;
    assert_int_equal(wait4(pid, &status, 0, &use), pid);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? use.ru_maxrss : -1;
}

/* Untrained index files are a few hundred bytes, and loading one must cost
 * about as little: nothing sized by the description (codebooks, centroids,
 * rotation, lists) is allocated before the file holds it.  An untrained PQ8
 * at dimension 2^22 used to allocate and zero 4 GiB of codebooks. */
static void test_untrained_file_loads_small(void **state)
{
    (void)state;
    const struct {
        const char *desc;
        int64_t dim;
    } cases[] = {
        {"PQ8", (int64_t)1 << 22},           /* 4 GiB of PQ codebooks */
        {"IVF16777216,Flat", 64},            /* 4 GiB of centroids, 384 MiB of lists */
        {"OPQ8_32768,IVF1,PQ8", 32768},      /* 4 GiB of rotation */
        {"IVF65536,XFBQ", 16384},            /* 4 GiB of centroids */
    };
    struct rusage self;
    getrusage(RUSAGE_SELF, &self);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        simil_index *index;
        SML_ASSERT_OK(simil_index_create(&index, cases[i].dim, cases[i].desc, SIMIL_METRIC_L2,
                                         "cpu"));
        const char *path = sml_test_path("untrained.simil");
        SML_ASSERT_OK(simil_index_save(index, path));
        simil_index_destroy(index);
        const long size = file_size(path), peak = load_peak_kb(path);
        if (peak < 0 || peak > self.ru_maxrss + 64 * 1024)
            fail_msg("%s at dim %" PRId64 ": loading the %ld-byte untrained file %s (peak "
                     "%ld kB, the test process %ld kB)",
                     cases[i].desc, cases[i].dim, size, peak < 0 ? "failed" : "took memory",
                     peak, self.ru_maxrss);
        SML_ASSERT_OK(simil_index_load(&index, path, "cpu"));
        assert_false(simil_index_is_trained(index));
        float x[2] = {0};
        SML_ASSERT_STATUS(SIMIL_ERR_NOT_TRAINED, simil_index_add(index, 0 + 1, x, NULL));
        SML_ASSERT_OK(simil_index_reset(index));
        simil_index_destroy(index);
    }
}

static uint64_t free_bytes;
static uint64_t fake_free_space(const char *folder)
{
    (void)folder;
    return free_bytes;
}

/* The free space is checked before anything is written, against the exact
 * size of the file (a dry run of the save): one byte short fails cleanly,
 * the exact size succeeds.  IVF indexes skip their codes in the dry run. */
static void test_disk_space(void **state)
{
    (void)state;
    const char *descs[] = {"Flat", "IVF4,Flat", "IVF4,PQ3x4", "PQ2x4"};
    float base[N * D];
    sml_test_fill_uniform(base, N * D, 5, -1, 1);
    for (int t = 0; t < 4; t++) {
        simil_index *index;
        SML_ASSERT_OK(simil_index_create(&index, D, descs[t], SIMIL_METRIC_L2, "cpu"));
        SML_ASSERT_OK(simil_index_train(index, N, base));
        SML_ASSERT_OK(simil_index_add(index, N, base, NULL));
        const char *path = sml_test_path("space.simil");
        SML_ASSERT_OK(simil_index_save(index, path));
        const long size = file_size(path);
        remove(path);
        sml_file_free_space_hook(fake_free_space);
        free_bytes = (uint64_t)size - 1;
        SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_index_save(index, path));
        assert_non_null(strstr(simil_last_error(), "not enough disk space"));
        assert_non_null(strstr(simil_last_error(), path));
        struct stat st;
        assert_int_not_equal(stat(path, &st), 0);
        free_bytes = (uint64_t)size;
        SML_ASSERT_OK(simil_index_save(index, path));
        sml_file_free_space_hook(NULL);
        if (file_size(path) != size)
            fail_msg("%s: %ld bytes after the space check, %ld before", descs[t], file_size(path),
                     size);
        remove(path);
        simil_index_destroy(index);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp-", sml_test_tmpdir());
    assert_int_not_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_empty_round_trip),
        cmocka_unit_test(test_truncated_and_damaged),
        cmocka_unit_test(test_nprobe_default),
        cmocka_unit_test(test_failed_save_keeps_old_file),
        cmocka_unit_test(test_untrained_file_loads_small),
        cmocka_unit_test(test_disk_space),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
