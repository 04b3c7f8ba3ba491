// cuda_knn_small.cuh: exact search of small batches (cuda_knn_small.cu),
// which knn_locked (cuda_knn.cu) hands the searches it takes.
#pragma once

#include "cuda/cuda_device.cuh"

namespace sml {

// Whether knn_small takes this search: the base has an fp16 shadow, k <= 128,
// nq is at most the small-batch limit (sml_cuda_knn_small_max) and a query
// row fits in shared memory.
bool knn_small_takes(const sml_knn_args *a);

// Exact k-NN of a small batch, with the results of the batch path.  Caller
// holds dev->lock and has joined the caller's stream, as for knn_locked;
// add: per base row, the term added to its key (the squared norms for L2,
// null for IP); allow: the rows a filter allows (bit r of word r / 32,
// rows_allowed in cuda_filter.cuh), or null for all: the scan reads no
// refused row; queries_on_device and outputs_on_device say where the
// caller's arrays are.
simil_status knn_small(Device *dev, const sml_knn_args *a, const float *add,
                       const uint32_t *allow, bool queries_on_device, bool outputs_on_device);

// Adds n to the queries the fast path re-ran in fp32 (cuda_knn.cu keeps the
// count that sml_cuda_fallback_queries reports).
void knn_count_fallbacks(long long n);

}  // namespace sml
