/* fuzz_index_file.c: simil_index_load on arbitrary files.
 *
 * Input: one flags byte, then the file.  Flags bit 0 set: before the file is
 * written, the checksums of every section whose length fits are recomputed,
 * so that mutations get past the CRC checks and reach the header and the
 * index types' loaders behind them (else nearly every mutation dies at a CRC).
 *
 * Load must give SIMIL_OK, SIMIL_ERR_CORRUPT, or SIMIL_ERR_UNSUPPORTED for a
 * well-formed file of an index type this build does not have (e.g. XFBQ).
 * A loaded, trained index must then search (every label -1 or a stored id),
 * take one more vector, drop one, save, and load back with the same shape.
 *
 * A Flat index always loads trained (it has nothing to train).  Files
 * describing an index whose fixed parameters (IVF centroids, PQ codebooks)
 * would pass 4 MB are not loaded: the library allows up to 4 GiB, which is
 * correct but would slow fuzzing to a crawl; SIMIL_FUZZ_NO_WORKAROUNDS=1
 * loads them anyway. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

enum { SML_FUZZ_MAX_SEARCH_DIM = 1 << 14, SML_FUZZ_K = 8 };

static uint32_t crc32_bytes(const uint8_t *p, size_t n)
{
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int b = 0; b < 8; b++) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
    }
    return ~crc;
}

/* Sections: [u32 tag][u32 0][u64 length][u32 head crc][u32 0] payload [u32 crc],
 * after 16 bytes of magic and version (src/core/file_io.h). */
static void repair_checksums(uint8_t *p, size_t n)
{
    size_t at = 16;
    while (at + 24 <= n) {
        uint64_t len;
        memcpy(&len, p + at + 8, 8);
        uint32_t head = crc32_bytes(p + at, 16);
        memcpy(p + at + 16, &head, 4);
        if (len > n - at - 24 || n - at - 24 - len < 4) break;
        uint32_t body = crc32_bytes(p + at + 24, (size_t)len);
        memcpy(p + at + 24 + len, &body, 4);
        at += 24 + (size_t)len + 4;
    }
}

static void check_search(const simil_index *index, int64_t *first_label)
{
    int64_t n = simil_index_size(index), dim = simil_index_dim(index);
    *first_label = -1;
    if (n == 0 && dim > SML_FUZZ_MAX_SEARCH_DIM) return;
    int64_t k = n + 2 < SML_FUZZ_K ? n + 2 : SML_FUZZ_K;
    float *q = calloc((size_t)dim, sizeof *q);
    float d[SML_FUZZ_K];
    int64_t l[SML_FUZZ_K];
    if (q == NULL) abort();
    sml_fuzz_expect("search", simil_index_search(index, 1, q, k, NULL, d, l), 1, SIMIL_OK);
    float *v = malloc((size_t)dim * sizeof *v);
    if (v == NULL) abort();
    for (int64_t j = 0; j < k; j++) {
        if (l[j] == -1) continue;
        if (l[j] < 0) sml_fuzz_fail("search returned label %lld", (long long)l[j]);
        /* every label names a stored vector */
        sml_fuzz_expect("reconstruct of a returned label",
                        simil_index_reconstruct(index, l[j], v), 1, SIMIL_OK);
        if (*first_label < 0) *first_label = l[j];
    }
    free(v);
    free(q);
}

static void exercise(simil_index *index)
{
    int64_t n = simil_index_size(index), dim = simil_index_dim(index);
    if (n < 0 || dim < 1 || simil_index_description(index)[0] == '\0')
        sml_fuzz_fail("loaded index has n=%lld dim=%lld", (long long)n, (long long)dim);
    if (!simil_index_is_trained(index)) {
        /* an untrained IVF is legitimate: it needs train() before use */
        if (strcmp(simil_index_description(index), "Flat") == 0)
            sml_fuzz_fail("index '%s' loaded untrained, and train cannot change that",
                          simil_index_description(index));
        return;
    }
    int64_t label;
    check_search(index, &label);
    if (dim > SML_FUZZ_MAX_SEARCH_DIM && n == 0) return;
    float *v = calloc((size_t)dim, sizeof *v);
    if (v == NULL) abort();
    simil_status s = simil_index_add(index, 1, v, NULL);
    /* sequential ids may overflow when the file's next id is near 2^63 */
    sml_fuzz_expect("add after load", s, 2, SIMIL_OK, SIMIL_ERR_INVALID_ARGUMENT);
    if (s == SIMIL_OK && simil_index_size(index) != n + 1)
        sml_fuzz_fail("add after load: size %lld, expected %lld",
                      (long long)simil_index_size(index), (long long)n + 1);
    free(v);
    if (label >= 0) {
        int64_t removed = 0;
        sml_fuzz_expect("remove", simil_index_remove(index, 1, &label, &removed), 1, SIMIL_OK);
        if (removed < 1) sml_fuzz_fail("remove of a returned label removed nothing");
    }
    const char *path = sml_fuzz_path("resaved.sidx");
    sml_fuzz_expect("save", simil_index_save(index, path), 1, SIMIL_OK);
    simil_index *again = NULL;
    sml_fuzz_expect("load of a saved index", simil_index_load(&again, path, "cpu"), 1, SIMIL_OK);
    if (simil_index_size(again) != simil_index_size(index) ||
        simil_index_dim(again) != simil_index_dim(index) ||
        simil_index_metric(again) != simil_index_metric(index) ||
        strcmp(simil_index_description(again), simil_index_description(index)) != 0)
        sml_fuzz_fail("an index saved and loaded back differs from the original");
    simil_index_destroy(again);
}

/* The description and dimension in the HEAD section, if the file has one. */
static int peek_head(const uint8_t *p, size_t n, char *desc, size_t cap, int64_t *dim)
{
    enum { AT = 16 + 24 }; /* magic, version, section header */
    uint32_t len;
    if (n < AT + 36) return 0;
    memcpy(dim, p + AT + 8, 8);
    memcpy(&len, p + AT + 32, 4);
    if (len >= cap || len > n - AT - 36) return 0;
    memcpy(desc, p + AT + 36, len);
    desc[len] = '\0';
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t *file = malloc(size);
    if (file == NULL) abort();
    memcpy(file, data + 1, size - 1);
    if (data[0] & 1) repair_checksums(file, size - 1);
    char desc[128];
    int64_t dim;
    if (peek_head(file, size - 1, desc, sizeof desc, &dim) &&
        sml_fuzz_params_too_large(desc, dim)) {
        free(file);
        return 0;
    }
    const char *path = sml_fuzz_write_file("input.sidx", file, size - 1);
    free(file);
    simil_index *index = NULL;
    simil_status s = simil_index_load(&index, path, "cpu");
    sml_fuzz_expect("simil_index_load", s, 3, SIMIL_OK, SIMIL_ERR_CORRUPT, SIMIL_ERR_UNSUPPORTED);
    if (s != SIMIL_OK) {
        if (index != NULL) sml_fuzz_fail("a failed load returned an index");
        return 0;
    }
    exercise(index);
    simil_index_destroy(index);
    return 0;
}
