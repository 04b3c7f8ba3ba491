/* cpu_xfbq.h: the XFBQ scan on the CPU (backend.h, sml_xfbq_scan_args). */
#ifndef SML_CPU_XFBQ_H
#define SML_CPU_XFBQ_H

#include "core/backend.h"

simil_status sml_cpu_xfbq_scan(sml_backend *b, const sml_xfbq_scan_args *args);

/* Which popcount loop sml_cpu_xfbq_distances runs. */
typedef enum sml_xfbq_impl {
    SML_XFBQ_IMPL_AUTO = 0,    /* AVX-512 VPOPCNTDQ where the CPU has it, else scalar */
    SML_XFBQ_IMPL_SCALAR = 1,  /* one row at a time: POPCNT where present, else generic */
    SML_XFBQ_IMPL_AVX512 = 2   /* eight rows at a time; only where the CPU has it */
} sml_xfbq_impl;

/* 1 if the CPU runs the AVX-512 VPOPCNTDQ loop. */
int sml_cpu_xfbq_has_avx512(void);

/* D (xfbq.h) of the query code (query_bits x words words) against n rows,
 * rows + r * row_size holding base_bits x words words of code each. */
void sml_cpu_xfbq_distances(sml_xfbq_impl impl, const uint64_t *query, int query_bits,
                            const uint8_t *rows, size_t row_size, int base_bits, int64_t words,
                            int64_t n, uint32_t *out);

/* The batched loop (cpu_xfbq.c): D as a small-integer dot product on
 * AVX-512 VNNI, for several queries against the same rows. */
enum {
    SML_XFBQ_BATCH_TILE = 16,        /* rows turned into bytes at a time */
    SML_XFBQ_BATCH_MAX_WORDS = 64    /* dimensions up to 4,096 */
};

/* 1 if the CPU runs the batched loop. */
int sml_cpu_xfbq_has_vnni(void);
/* 1 if the batched loop takes codes of these widths. */
int sml_cpu_xfbq_batch_fits(int query_bits, int base_bits, int64_t words);
/* Bytes of scratch sml_cpu_xfbq_distances_batch needs for nq queries. */
size_t sml_cpu_xfbq_batch_scratch(int64_t nq, int64_t words);

/* D of nq query codes (query_bits x words words each, one after the other)
 * against the same n rows, as sml_cpu_xfbq_distances gives it: out[q *
 * out_stride + r].  Only where sml_cpu_xfbq_has_vnni and
 * sml_cpu_xfbq_batch_fits. */
void sml_cpu_xfbq_distances_batch(const uint64_t *queries, int64_t nq, int query_bits,
                                  const uint8_t *rows, size_t row_size, int base_bits,
                                  int64_t words, int64_t n, uint32_t *out, int64_t out_stride,
                                  void *scratch);

#endif
