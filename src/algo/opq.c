/* opq.c: optimized product quantization (Ge et al.): a rotation R, trained by
 * alternating a product quantizer on the rotated data with an orthogonal
 * Procrustes step.
 *
 * With Y = X R^T (n x d_out) and Yq its PQ reconstruction, the best R for a
 * fixed Yq maximizes trace(R X^T Yq): for the SVD X^T Yq = U S V^T, R^T = U V^T
 * (d x d_out, orthonormal columns).  The SVD is LAPACK's sgesdd from OpenBLAS.
 * Training runs on the host: the sample is at most 65,536 vectors and the
 * matrices are d x d. */
#include "algo/opq.h"

#include <math.h>
#include <string.h>

#include "algo/pq.h"
#include "core/alloc.h"
#include "core/blas.h"
#include "core/error.h"

enum { SML_OPQ_ITERATIONS = 20, SML_OPQ_PQ_ITERATIONS = 4, SML_OPQ_MAX_TRAIN = 65536 };

/* Rows of the GEMM blocks (core/blas.h, sml_sgemm_rows): vectors rotated per
 * block, and rows of the d x d products.  128 rotated rows a block, so that a
 * call of a few thousand rows (OPQ's vectors, RR XFBQ's rows being added,
 * 4,096 a call) spreads over every thread: with 4,096 a block, such a call
 * ran on one thread (queries of 784 dimensions, when they were rotated here:
 * 18 ms of a 26 ms search of 2,048 on a 16-core host). */
enum { SML_OPQ_ROWS = 128, SML_OPQ_BLOCK = 64 };

/* sgesdd (divide and conquer) rather than sgesvd: at d = 784 one SVD took
 * 0.16 s of CPU against 1.29 s, and OPQ runs one per iteration. */
simil_status sml_opq_procrustes(int d, int dout, const float *a, float *rt)
{
    /* Column-major view of row-major a (d x dout) is its transpose (dout x d):
     * SVD of A^T = V S U^T gives U V^T from the transposed factors. */
    const int m = dout, n = d, lda = dout, ldu = dout, ldvt = d;
    const int least = m < n ? m : n;
    float *copy = NULL, *s = NULL, *u = NULL, *vt = NULL, *work = NULL;
    int *iwork = NULL;
    SML_TRY(sml_blas_ready(1));
    simil_status st = sml_alloc((void **)&copy, (size_t)m * n, sizeof(float), "OPQ SVD");
    if (st == SIMIL_OK) st = sml_alloc((void **)&s, (size_t)least, sizeof(float), "OPQ SVD");
    if (st == SIMIL_OK) st = sml_alloc((void **)&u, (size_t)m * m, sizeof(float), "OPQ SVD");
    if (st == SIMIL_OK) st = sml_alloc((void **)&vt, (size_t)n * n, sizeof(float), "OPQ SVD");
    if (st == SIMIL_OK) st = sml_alloc((void **)&iwork, (size_t)least, 8 * sizeof(int), "OPQ SVD");
    int info = 0, lwork = -1;
    float query = 0;
    if (st == SIMIL_OK) {
        memcpy(copy, a, sizeof(float) * (size_t)m * n);
        sml_sgesdd("A", &m, &n, copy, &lda, s, u, &ldu, vt, &ldvt, &query, &lwork, iwork, &info);
        lwork = (int)query + 1;
        st = sml_alloc((void **)&work, (size_t)lwork, sizeof(float), "OPQ SVD");
    }
    if (st == SIMIL_OK) {
        sml_sgesdd("A", &m, &n, copy, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, &info);
        if (info != 0) st = sml_error(SIMIL_ERR_INTERNAL, "OPQ: the SVD failed (info %d)", info);
    }
    if (st == SIMIL_OK) {
        /* column-major: A^T = u (m x m) s vt (n x n); A = vt^T s u^T, so
         * U_A = vt^T (first dout columns) and V_A = u.  R^T = U_A V_A^T:
         * rt[i][j] = sum_t vt[i ldvt + t] u[t ldu + j] over t < dout, which
         * is the row-major product of vt's first dout columns and u. */
        st = sml_sgemm_rows(0, 0, d, dout, dout, 1.0f, vt, ldvt, u, ldu, 0.0f, rt, dout,
                            SML_OPQ_BLOCK);
    }
    sml_free(copy);
    sml_free(s);
    sml_free(u);
    sml_free(vt);
    sml_free(work);
    sml_free(iwork);
    return st;
}

simil_status sml_opq_apply(int64_t n, int64_t d, int64_t dout, const float *rt, const float *x,
                           float *y)
{
    if (n == 0) return SIMIL_OK;
    /* y (n x dout) = x (n x d) . rt (d x dout) */
    return sml_sgemm_rows(0, 0, n, dout, d, 1.0f, x, d, rt, dout, 0.0f, y, dout, SML_OPQ_ROWS);
}

simil_status sml_opq_unapply(int64_t n, int64_t d, int64_t dout, const float *rt, const float *y,
                             float *x)
{
    if (n == 0) return SIMIL_OK;
    return sml_sgemm_rows(0, 1, n, d, dout, 1.0f, y, dout, rt, dout, 0.0f, x, d, SML_OPQ_ROWS);
}

/* PQ codes of y through the backend's encoder (a single list with a zero
 * centroid), decoded back into yq. */
static simil_status sml_opq_quantize(sml_backend *b, const sml_pq *pq, int64_t n, const float *y,
                                     uint8_t *codes, const int64_t *lists, float *yq)
{
    const size_t code_size = sml_pq_code_size(pq);
    const size_t cb_bytes = sizeof(float) * (size_t)(pq->m * pq->ksub * pq->dsub);
    const size_t zero_bytes = sizeof(float) * (size_t)pq->dim;
    float *mem = NULL;
    simil_status s = b->ops->mem_alloc(b, cb_bytes + zero_bytes, (void **)&mem);
    float *zero = mem ? mem + pq->m * pq->ksub * pq->dsub : NULL;
    if (s == SIMIL_OK) s = b->ops->mem_upload(b, mem, pq->centroids, cb_bytes);
    if (s == SIMIL_OK) {
        float *host_zero;
        s = sml_calloc((void **)&host_zero, (size_t)pq->dim, sizeof(float), "OPQ");
        if (s == SIMIL_OK) s = b->ops->mem_upload(b, zero, host_zero, zero_bytes);
        sml_free(host_zero);
    }
    sml_pq_encode_args enc = {
        .x = y, .n = n, .dim = pq->dim, .lists = lists, .coarse = zero, .codebooks = mem,
        .m = pq->m, .ksub = pq->ksub, .dsub = pq->dsub, .codes = codes, .code_size = code_size,
    };
    if (s == SIMIL_OK) s = b->ops->pq_encode(b, &enc);
    if (s == SIMIL_OK) sml_pq_decode(pq, n, codes, code_size, yq);
    b->ops->mem_free(b, mem);
    return s;
}

simil_status sml_opq_train(sml_backend *b, int64_t n, int64_t d, int64_t dout, int64_t m,
                           const float *x, float *rt)
{
    if (n > SML_OPQ_MAX_TRAIN) n = SML_OPQ_MAX_TRAIN; /* the data's first rows */
    /* start from the identity's first dout columns */
    memset(rt, 0, sizeof(float) * (size_t)(d * dout));
    for (int64_t i = 0; i < dout; i++) rt[i * dout + i] = 1.0f;
    sml_pq pq;
    SML_TRY(sml_pq_init(&pq, dout, m, 8));
    float *y = NULL, *yq = NULL, *xty = NULL;
    uint8_t *codes = NULL;
    int64_t *lists = NULL;
    simil_status s = sml_alloc((void **)&y, (size_t)(n * dout), sizeof(float), "OPQ");
    if (s == SIMIL_OK) s = sml_alloc((void **)&yq, (size_t)(n * dout), sizeof(float), "OPQ");
    if (s == SIMIL_OK) s = sml_alloc((void **)&xty, (size_t)(d * dout), sizeof(float), "OPQ");
    if (s == SIMIL_OK) s = sml_alloc((void **)&codes, (size_t)n, sml_pq_code_size(&pq), "OPQ");
    if (s == SIMIL_OK) s = sml_calloc((void **)&lists, (size_t)n, sizeof *lists, "OPQ");
    /* progress: one unit per sub-quantizer trained, m per iteration */
    sml_pq_train_params pp;
    sml_pq_train_params_init(&pp, &pq, SML_OPQ_PQ_ITERATIONS, 1234);
    pp.stage = "train OPQ";
    pp.total = SML_OPQ_ITERATIONS * m;
    for (int it = 0; it < SML_OPQ_ITERATIONS && s == SIMIL_OK; it++) {
        s = sml_opq_apply(n, d, dout, rt, x, y);
        pp.seed = 1234 + (uint64_t)it;
        pp.done = it * m;
        if (s == SIMIL_OK) s = sml_pq_train(b, &pq, n, y, &pp);
        if (s == SIMIL_OK) s = sml_opq_quantize(b, &pq, n, y, codes, lists, yq);
        if (s != SIMIL_OK) break;
        /* X^T Yq: d x dout */
        s = sml_sgemm_rows(1, 0, d, dout, n, 1.0f, x, d, yq, dout, 0.0f, xty, dout,
                           SML_OPQ_BLOCK);
        if (s == SIMIL_OK) s = sml_opq_procrustes((int)d, (int)dout, xty, rt);
    }
    sml_free(y);
    sml_free(yq);
    sml_free(xty);
    sml_free(codes);
    sml_free(lists);
    sml_pq_free(&pq);
    return s;
}
