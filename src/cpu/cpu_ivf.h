/* cpu_ivf.h: inverted-list scans on the CPU, and what they share.
 *
 * Every scan (cpu_ivf_flat.c, cpu_pq.c, cpu_xfbq.c) has the same frame:
 * threads take queries; a query walks the rows of its probed lists into its
 * own top-k (cpu_select.h), which sml_cpu_ivf_finish writes out.  The frame's
 * parts live here: the probes (the caller's, or found by the coarse search),
 * the number of results worth keeping, and the finished rows.  A new code
 * type's scan is one more file with its per-row arithmetic. */
#ifndef SML_CPU_IVF_H
#define SML_CPU_IVF_H

#include "core/backend.h"
#include "cpu/cpu_select.h"

/* The probes of a scan: the caller's (a->probes.lists set), or the nprobe
 * nearest lists of each query found now with the coarse k-NN (and their
 * coarse keys).  Free them with sml_cpu_ivf_probes_free. */
simil_status sml_cpu_ivf_probes(sml_backend *b, const sml_ivf_scan_args *a, sml_ivf_probes *out);
void sml_cpu_ivf_probes_free(const sml_ivf_scan_args *a, sml_ivf_probes *probes);

/* The most rows a query scans: the largest sum of its probed lists' sizes. */
int64_t sml_cpu_ivf_most(const sml_ivf_scan_args *a, const sml_ivf_probes *probes);

/* Results worth keeping per query: k, or fewer where no query scans k rows
 * (`most`, at least 1), so that the top-k buffers stay small for a large k. */
static inline int64_t sml_cpu_ivf_kept(int64_t k, int64_t most)
{
    const int64_t kept = k < most ? k : most;
    return kept < 1 ? 1 : kept;
}

/* Query q's row of results from its top-k of `kept`: ranks past kept get -1
 * and +inf, and IP keys (-<x, y>) turn back into similarities. */
void sml_cpu_ivf_finish(const sml_ivf_scan_args *a, int64_t q, int64_t kept, sml_topk *t);

simil_status sml_cpu_ivf_flat_scan(sml_backend *b, const sml_ivf_scan_args *args);
simil_status sml_cpu_ivf_pq_scan(sml_backend *b, const sml_ivf_pq_scan_args *args);
simil_status sml_cpu_sq_scan(sml_backend *b, const sml_sq_scan_args *args);
simil_status sml_cpu_pq_encode(sml_backend *b, const sml_pq_encode_args *args);

#endif
