/* cuda_stub.c: the CUDA backend of builds without CUDA: no devices, and a
 * clear error for anyone who asks for one. */
#include "cuda/cuda_backend.h"

#include "core/error.h"

int sml_cuda_device_count(void) { return 0; }

int sml_cuda_built(void) { return 0; }

int sml_cuda_pointer_is_device(const void *p) { return 0; }

int sml_cuda_pointer_device(const void *p) { return 0; }

simil_status sml_cuda_backend_open(int gpu, sml_backend **backend)
{
    *backend = NULL;
    return sml_error(SIMIL_ERR_NO_DEVICE,
                     "GPU %d requested, but this simil was built without CUDA; rebuild with "
                     "-DSIMIL_CUDA=ON on a machine with nvcc, or use the CPU (device \"cpu\")",
                     gpu);
}

simil_status sml_cuda_memory_info(int gpu, size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    return sml_error(SIMIL_ERR_NO_DEVICE,
                     "GPU %d: this simil was built without CUDA, and has no GPU memory", gpu);
}

long long sml_cuda_fallback_queries(void) { return 0; }

long long sml_cuda_live_allocations(void) { return 0; }

void sml_cuda_select_force(int design, int warps)
{
    (void)design;
    (void)warps;
}

int sml_cuda_select_built(int design, int64_t k) { return 0; }

const char *sml_cuda_select_design_name(int design) { return "none (built without CUDA)"; }

int sml_cuda_select_choice(int64_t rows, int64_t cols, int64_t k, int *warps) { return -1; }

simil_status sml_cuda_select_rows(int design, int warps, int64_t rows, int64_t cols,
                                  const float *d_values, int64_t k, float *d_keys,
                                  int32_t *d_idx, void *d_workspace, size_t workspace_bytes)
{
    return sml_error(SIMIL_ERR_NO_DEVICE, "this simil was built without CUDA");
}

size_t sml_cuda_select_rows_workspace(int design, int64_t rows, int64_t cols, int64_t k)
{
    return 0;
}

void sml_cuda_knn_small_max(long long nq) { (void)nq; }

void sml_cuda_knn_small_tensor(int on) { (void)on; }
void sml_cuda_knn_small_one_launch(int on) { (void)on; }
void sml_cuda_replay(int on) { (void)on; }
void sml_cuda_replay_counts(long long *hits, long long *builds, long long *direct,
                            long long *dropped)
{
    *hits = *builds = *direct = *dropped = 0;
}
void sml_cuda_ivf_thin_staged(int on) { (void)on; }
void sml_cuda_ivf_pq_coarse_tables(int on) { (void)on; }

void sml_cuda_ivf_small_max(long long nq) { (void)nq; }
void sml_cuda_ivf_coarse_many_max(long long nq) { (void)nq; }
simil_status sml_cuda_xfbq_rotate(const float *d_x, const float *d_r, int64_t dim, int64_t n,
                                  float *d_y)
{
    (void)d_x, (void)d_r, (void)dim, (void)n, (void)d_y;
    return sml_error(SIMIL_ERR_NO_DEVICE, "this simil was built without CUDA");
}
void sml_cuda_xfbq_tensor(int mode) { (void)mode; }

void sml_cuda_lanes(int lanes) { (void)lanes; }

simil_status sml_cuda_coarse_select(int64_t nq, int64_t n, int64_t np, int l2, const float *d_keys,
                                    int64_t *d_probes, float *d_distances)
{
    (void)nq, (void)n, (void)np, (void)l2, (void)d_keys, (void)d_probes, (void)d_distances;
    return sml_error(SIMIL_ERR_NO_DEVICE, "this simil was built without CUDA");
}
