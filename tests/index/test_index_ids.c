/* test_index_ids.c: ids in index files.
 *   - simil files whose ids contradict themselves (next_id 0 or n-1 while
 *     ids 0..n-1 are stored, a list id of 2^63-1 or >= next_id), edited with
 *     their checksums recomputed, are refused as damaged by every type;
 *   - a Refine file whose refinement ids (RFID) disagree with its inner index
 *     is refused, and every file a Refine index saves, after removes too,
 *     loads;
 *   - Faiss files holding the id 2^63-1 (which Faiss allows) load: sequential
 *     numbering is then refused with a clear error, explicit ids still add,
 *     and simil and Faiss files round-trip. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file_io.h"
#include "util/test_util.h"

enum { N = 300, D = 8, HEAD_AT = 16, SECTION_HEAD = 24 };

/* Offset of the payload of the nth section tagged tag (0: the first), and its
 * length; fails the test when there is none. */
static long section(const unsigned char *buf, long size, const char *tag, int nth,
                    uint64_t *length)
{
    for (long at = HEAD_AT; at + SECTION_HEAD <= size;) {
        uint64_t len;
        memcpy(&len, buf + at + 8, 8);
        if (memcmp(buf + at, tag, 4) == 0 && nth-- == 0) {
            *length = len;
            return at + SECTION_HEAD;
        }
        at += SECTION_HEAD + (long)len + 4;
    }
    fail_msg("no section %s in the file", tag);
    return -1;
}

/* Recompute the checksum of the section whose payload starts at `at`. */
static void fix_crc(unsigned char *buf, long at, uint64_t length)
{
    uint32_t crc = sml_crc32(0, buf + at, (size_t)length);
    memcpy(buf + at + (long)length, &crc, 4);
}

/* Overwrite the int64 at payload offset `field` of the nth section tag and
 * recompute its checksum. */
static void edit_i64(unsigned char *buf, long size, const char *tag, int nth, long field,
                     int64_t value)
{
    uint64_t length = 0;
    long at = section(buf, size, tag, nth, &length);
    assert_true(field + 8 <= (long)length);
    memcpy(buf + at + field, &value, 8);
    fix_crc(buf, at, length);
}

static int64_t read_i64(const unsigned char *buf, long size, const char *tag, long field)
{
    uint64_t length = 0;
    long at = section(buf, size, tag, 0, &length);
    int64_t v;
    memcpy(&v, buf + at + field, 8);
    return v;
}

/* The HEAD section's payload: metric, trained (u32), dim, ntotal, next_id. */
enum { HEAD_NEXT_ID = 24 };

/* An index of desc holding N vectors with ids 0..N-1 (sequential). */
static simil_index *build(const char *desc, const float *x)
{
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, D, desc, SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_train(index, N, x));
    SML_ASSERT_OK(simil_index_add(index, N, x, NULL));
    return index;
}

static void expect_corrupt(const char *ctx, const char *desc, const unsigned char *buf,
                           long size)
{
    const char *path = sml_test_path("edited.simil");
    sml_test_write_file(path, buf, size);
    simil_index *index = NULL;
    simil_status s = simil_index_load(&index, path, "cpu");
    if (s != SIMIL_ERR_CORRUPT)
        fail_msg("%s, %s: load returned %s (%s), expected SIMIL_ERR_CORRUPT", desc, ctx,
                 simil_status_name(s), simil_last_error());
    assert_null(index);
}

static void test_contradictory_ids(void **state)
{
    (void)state;
    float *x = sml_test_malloc(sizeof(float) * N * D);
    sml_test_fill_uniform(x, N * D, 29, -1, 1);
    const char *descs[] = {"Flat",        "IVF4,Flat",        "IVF4,PQ4x4",
                           "OPQ4,IVF4,PQ4", "IVF4,PQ4,Refine", "IVF4,XFBQ",
                           "XFBQ",        "Shards2,IVF4,Flat"};
    for (size_t t = 0; t < sizeof descs / sizeof descs[0]; t++) {
        simil_index *index = build(descs[t], x);
        const char *path = sml_test_path("good.simil");
        SML_ASSERT_OK(simil_index_save(index, path));
        simil_index_destroy(index);
        long size;
        unsigned char *good = sml_test_read_file(path, &size), *buf = sml_test_malloc((size_t)size);
        assert_int_equal(read_i64(good, size, "HEAD", HEAD_NEXT_ID), N);
        /* the file as saved loads */
        SML_ASSERT_OK(simil_index_load(&index, path, "cpu"));
        assert_int_equal(simil_index_size(index), N);
        simil_index_destroy(index);
        const int64_t next_ids[] = {0, N - 1};
        for (int i = 0; i < 2; i++) {
            memcpy(buf, good, (size_t)size);
            edit_i64(buf, size, "HEAD", 0, HEAD_NEXT_ID, next_ids[i]);
            if (strncmp(descs[t], "Shards", 6) == 0) {
                /* each shard's header carries its own next_id, after ntotal */
                for (int sh = 0; sh < 2; sh++) {
                    uint64_t len;
                    long at = section(buf, size, "SHRD", sh, &len);
                    int64_t v;
                    memcpy(&v, buf + at + 8, 8);
                    if (v > next_ids[i]) edit_i64(buf, size, "SHRD", sh, 8, next_ids[i]);
                }
            }
            char ctx[64];
            snprintf(ctx, sizeof ctx, "next_id %" PRId64 " with ids 0..%d", next_ids[i], N - 1);
            expect_corrupt(ctx, descs[t], buf, size);
        }
        /* one stored id of 2^63-1, or of next_id */
        const char *id_tag = strcmp(descs[t], "Flat") == 0 || strcmp(descs[t], "XFBQ") == 0
                                 ? "IDS "
                                 : "LIDS";
        const int64_t bad_ids[] = {INT64_MAX, N, -1};
        for (int i = 0; i < 3; i++) {
            memcpy(buf, good, (size_t)size);
            edit_i64(buf, size, id_tag, 0, 8 * 7, bad_ids[i]);
            char ctx[64];
            snprintf(ctx, sizeof ctx, "a stored id of %" PRId64 ", next_id %d", bad_ids[i], N);
            expect_corrupt(ctx, descs[t], buf, size);
        }
        free(good);
        free(buf);
    }
    free(x);
}

/* Refine: the RFID section against the inner index. */
static void test_refine_ids(void **state)
{
    (void)state;
    float *x = sml_test_malloc(sizeof(float) * N * D);
    sml_test_fill_uniform(x, N * D, 31, -1, 1);
    simil_index *index = build("IVF4,PQ4,Refine", x);
    const char *path = sml_test_path("refine.simil");
    SML_ASSERT_OK(simil_index_save(index, path));
    long size;
    unsigned char *good = sml_test_read_file(path, &size), *buf = sml_test_malloc((size_t)size);
    /* -1; an id the inner index does not hold (twice 5, no 7); the same id
     * in both the inner lists and RFID but out of range */
    const int64_t rfid[] = {-1, 5, N + 3};
    for (int i = 0; i < 3; i++) {
        memcpy(buf, good, (size_t)size);
        edit_i64(buf, size, "RFID", 0, 8 * 7, rfid[i]);
        char ctx[64];
        snprintf(ctx, sizeof ctx, "RFID id %" PRId64 " where the inner index holds 7", rfid[i]);
        expect_corrupt(ctx, "IVF4,PQ4,Refine", buf, size);
    }
    /* every save loads, also after removes (ids removed twice, or absent) */
    const int64_t gone[] = {7, 7, 11, 299, 5000};
    int64_t removed = 0;
    SML_ASSERT_OK(simil_index_remove(index, 5, gone, &removed));
    assert_int_equal(removed, 3);
    SML_ASSERT_OK(simil_index_save(index, path));
    simil_index *back;
    SML_ASSERT_OK(simil_index_load(&back, path, "cpu"));
    assert_int_equal(simil_index_size(back), N - 3);
    float d[3];
    int64_t l[3];
    SML_ASSERT_OK(simil_index_search(back, 1, x + 8 * D, 3, NULL, d, l));
    assert_int_equal(l[0], 8);
    SML_ASSERT_OK(simil_index_search(back, 1, x + 7 * D, 3, NULL, d, l));
    assert_true(l[0] != 7 && l[1] != 7 && l[2] != 7);
    simil_index_destroy(back);
    simil_index_destroy(index);
    free(good);
    free(buf);
    free(x);
}

/* A Faiss file of desc (Flat through an IDMap2, or IVF1,Flat whose one list
 * ends with the last id added) holding ids 0..N-2 and 2^63-1. */
static void faiss_with_largest_id(const char *desc, const float *x, const char *path)
{
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, D, desc, SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_train(index, N, x));
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * N);
    for (int i = 0; i < N; i++) ids[i] = i;
    ids[N - 1] = INT64_MAX - 1; /* the largest id add takes; patched below */
    SML_ASSERT_OK(simil_index_add(index, N, x, ids));
    SML_ASSERT_OK(simil_index_save_faiss(index, path));
    simil_index_destroy(index);
    free(ids);
    long size;
    unsigned char *buf = sml_test_read_file(path, &size);
    int64_t last;
    memcpy(&last, buf + size - 8, 8);
    assert_int_equal(last, INT64_MAX - 1); /* the file ends with the last id */
    const int64_t largest = INT64_MAX;
    memcpy(buf + size - 8, &largest, 8);
    sml_test_write_file(path, buf, size);
    free(buf);
}

static void test_faiss_largest_id(void **state)
{
    (void)state;
    float *x = sml_test_malloc(sizeof(float) * (N + 2) * D);
    sml_test_fill_uniform(x, (N + 2) * D, 37, -1, 1);
    const char *descs[] = {"Flat", "IVF1,Flat"};
    for (int t = 0; t < 2; t++) {
        const char *faiss = sml_test_path("largest.faiss");
        faiss_with_largest_id(descs[t], x, faiss);
        simil_index *index;
        SML_ASSERT_OK(simil_index_load(&index, faiss, "cpu"));
        assert_int_equal(simil_index_size(index), N);
        float d[2];
        int64_t l[2];
        SML_ASSERT_OK(simil_index_search(index, 1, x + (N - 1) * D, 1, NULL, d, l));
        assert_int_equal(l[0], INT64_MAX);
        /* no sequential id is left; explicit ids still add */
        SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(index, 1, x + N * D, NULL));
        assert_non_null(strstr(simil_last_error(), "pass ids explicitly"));
        const int64_t id = 1000;
        SML_ASSERT_OK(simil_index_add(index, 1, x + N * D, &id));
        /* a simil file round-trips, and so does a Faiss file */
        const char *path = sml_test_path("largest.simil");
        SML_ASSERT_OK(simil_index_save(index, path));
        SML_ASSERT_OK(simil_index_save_faiss(index, faiss));
        simil_index_destroy(index);
        const char *files[] = {path, faiss};
        for (int f = 0; f < 2; f++) {
            SML_ASSERT_OK(simil_index_load(&index, files[f], "cpu"));
            assert_int_equal(simil_index_size(index), N + 1);
            SML_ASSERT_OK(simil_index_search(index, 1, x + (N - 1) * D, 1, NULL, d, l));
            assert_int_equal(l[0], INT64_MAX);
            SML_ASSERT_OK(simil_index_search(index, 1, x + N * D, 1, NULL, d, l));
            assert_int_equal(l[0], 1000);
            SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                              simil_index_add(index, 1, x + (N + 1) * D, NULL));
            const int64_t removed_id = INT64_MAX;
            int64_t removed = 0;
            SML_ASSERT_OK(simil_index_remove(index, 1, &removed_id, &removed));
            assert_int_equal(removed, 1);
            simil_index_destroy(index);
        }
    }
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contradictory_ids),
        cmocka_unit_test(test_refine_ids),
        cmocka_unit_test(test_faiss_largest_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
