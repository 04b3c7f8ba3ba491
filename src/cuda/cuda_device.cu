// cuda_device.cu: device discovery for the CUDA backend.  The runtime is linked
// statically, so on a machine without a driver cudaGetDeviceCount fails and
// simil runs on the CPU.
#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda/cuda_backend.h"

extern "C" int sml_cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return count;
}

extern "C" int sml_cuda_built(void) { return 1; }

extern "C" simil_status sml_cuda_backend_open(int gpu, sml_backend **backend)
{
    *backend = nullptr;
    int count = sml_cuda_device_count();
    if (gpu >= count)
        return sml_error(SIMIL_ERR_NO_DEVICE,
                         "GPU %d requested, but %d GPU%s usable (no driver or device?); use "
                         "--device cpu",
                         gpu, count, count == 1 ? " is" : "s are");
    return sml_error(SIMIL_ERR_UNSUPPORTED, "the GPU backend is not built yet; use --device cpu");
}
