// cuda_ivf.cuh: what the IVF scan driver (cuda_ivf.cu) shares with the
// IVF-PQ distance kernels (cuda_ivf_pq.cu).
#pragma once

#include <cuda_runtime.h>

#include "core/backend.h"

namespace sml {

// IVF-Flat work: up to 32 pairs of one list against up to 64 of its vectors.
struct ScanTile {
    int list;
    int pair0;    // first pair (in the list-grouped pair order)
    int npairs;
    int vector0;  // first vector of the list
};

// IVF-PQ work: one (query, list) pair against up to kPqItemVectors vectors.
struct PqItem {
    int pair;
    int vector0;
};

// Large enough that one block usually covers a whole list, so that each
// pair's table is built once.
constexpr int kPqItemVectors = 8192;

// A batch's pairs and work in device memory, for the PQ kernels.
struct PqBatch {
    const PqItem *items;
    int nitems;
    const int *pair_query;      // query of each pair, within the batch
    const int *pair_list;
    const int *pair_cols;       // vectors in the pair's list
    const int *pair_base;       // first arena row of the list
    const long long *pair_out;  // where the pair's distances start
    const float *pair_key;      // coarse key (term 2)
    int nq;
    const float *queries;       // the batch's first query (device)
};

// The fused IVF-PQ scan (one block per query, selection in registers) serves
// searches with term-3 tables and k up to this.
constexpr int kPqFusedMaxK = 256;

// A batch of queries for the fused scan; the driver fills the batch's arrays
// (device memory), launch_pq_fused the rest from the search.
struct PqQueryScan {
    const float *queries;        // the batch's first query
    const int64_t *probes;       // nq x nprobe lists, -1 for none
    const float *probe_keys;     // nq x nprobe coarse keys (term 2, or -<x, c>) ...
    float probe_key_sign;        // ... times this (-1: <x, c> from the coarse search)
    int nprobe;
    const int64_t *list_offset;  // as the search has them (sml_ivf_scan_args)
    const int64_t *list_size;
    float *out_keys;             // nq x k, ascending
    int *out_idx;                // nq x k arena rows, -1 past the candidates
    // from the search
    int dim;
    const float *codebooks;
    int m, ksub, dsub;
    float term3_scale;
    const uint8_t *codes;
    int code_size;
    int term1_at;
    int k;
    float *codebooks_by_codeword;  // pq_fused_scratch_bytes of device memory
};

bool pq_fused(const sml_ivf_scan_args *a);
// Device scratch that launch_pq_fused needs beside the batch.
size_t pq_fused_scratch_bytes(const sml_ivf_scan_args *a);
simil_status launch_pq_fused(const sml_ivf_scan_args *a, PqQueryScan scan, int nq,
                             cudaStream_t st);

// Scratch floats the PQ distances need for a batch of nq queries.
size_t pq_scratch_floats(const sml_ivf_scan_args *a, int nq);

// Distances of every pair's vectors into distances (and, when rows is not
// null, their arena rows), through lookup tables.
simil_status launch_pq_distances(const sml_ivf_scan_args *a, const PqBatch &batch,
                                 float *scratch, float *distances, int *rows, cudaStream_t st);

}  // namespace sml
