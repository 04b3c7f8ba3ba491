// cuda_stream.cuh: the CUDA backend's ops for streaming data through the
// GPU (core/backend.h: pinned buffers, the copier, the shadow refill) and
// its generator of docs/datasets.md (cuda_generate.cu).
#pragma once

#include "core/backend.h"

namespace sml {

simil_status stream_pinned_alloc(sml_backend *b, size_t bytes, void **host);
void stream_pinned_free(sml_backend *b, void *host);
int stream_host_pinned(sml_backend *b, const void *host, size_t bytes);
simil_status copier_open(sml_backend *b, void **copier);
simil_status copier_upload(sml_backend *b, void *copier, int lane, void *mem, const void *host,
                           size_t bytes);
simil_status copier_wait(sml_backend *b, void *copier, int lane);
void copier_close(sml_backend *b, void *copier);
simil_status copier_check(sml_backend *b, void *copier, int lane, const float *mem, int64_t n,
                          int64_t dim, int bound_norms);
simil_status copier_checked(sml_backend *b, void *copier, int lane, int64_t *bad);
simil_status shadow_refill(sml_backend *b, void *shadow, const float *base, int64_t n,
                           int64_t dim);

simil_status generator_open(sml_backend *b, const char *kind, int64_t dim, uint64_t seed,
                            void **gen);
simil_status generator_fill(sml_backend *b, void *gen, int64_t first, int64_t n, float *mem);
void generator_close(sml_backend *b, void *gen);

}  // namespace sml
