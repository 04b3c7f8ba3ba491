/* device_select.c: from a device string to a backend.
 *   "auto" or NULL: GPU 0 when one is usable, else the CPU (never an error);
 *   "cpu"; "gpu" (GPU 0) or "gpu:N": that GPU, or SIMIL_ERR_NO_DEVICE. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "cuda/cuda_backend.h"
#include "index/index_internal.h"

simil_status sml_device_open(const char *device, sml_backend **backend)
{
    *backend = NULL;
    if (device == NULL || strcmp(device, "auto") == 0) {
        if (sml_cuda_device_count() > 0) return sml_cuda_backend_open(0, backend);
        return sml_cpu_backend_open(backend);
    }
    if (strcmp(device, "cpu") == 0) return sml_cpu_backend_open(backend);
    if (strcmp(device, "gpu") == 0) return sml_cuda_backend_open(0, backend);
    if (strncmp(device, "gpu:", 4) == 0) {
        char *end;
        errno = 0;
        long gpu = strtol(device + 4, &end, 10);
        if (*end == '\0' && errno == 0 && gpu >= 0 && gpu < 1024 && end != device + 4)
            return sml_cuda_backend_open((int)gpu, backend);
        SML_RETURN_IF(*end == ',', SIMIL_ERR_UNSUPPORTED,
                      "device '%s': several GPUs in one index are not built yet", device);
    }
    SML_RETURN_IF(strcmp(device, "gpus") == 0, SIMIL_ERR_UNSUPPORTED,
                  "device '%s': several GPUs in one index are not built yet", device);
    return sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                     "unknown device '%s'; use auto, cpu, gpu or gpu:N", device);
}
