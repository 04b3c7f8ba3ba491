/* device_select.c: from a device string to a backend, or to a placement over
 * several.
 *   "auto" or NULL: GPU 0 when one is usable, else the CPU (never an error);
 *   "cpu"; "gpu" (GPU 0) or "gpu:N": that GPU, or SIMIL_ERR_NO_DEVICE;
 *   "gpus": every GPU; "gpu:0,2,3": those GPUs; "cpu:N": N parts on the CPU;
 *   any list may end in "/rR": R replicas, each of count / R shards. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "index/index_internal.h"

/* A whole decimal number in [0, max], ending at *end. */
static int sml_device_number(const char *s, long max, char **end)
{
    errno = 0;
    long v = strtol(s, end, 10);
    if (*end == s || errno != 0 || v < 0 || v > max) return -1;
    return (int)v;
}

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
        int gpu = sml_device_number(device + 4, 1023, &end);
        if (gpu >= 0 && *end == '\0') return sml_cuda_backend_open(gpu, backend);
    }
    return sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                     "unknown device '%s'; use auto, cpu, gpu, gpu:N, gpus, gpu:0,1,... or cpu:N "
                     "(lists may end in /rR for R replicas)",
                     device);
}

simil_status sml_device_placement(const char *device, sml_placement *p)
{
    memset(p, 0, sizeof *p);
    p->replicas = 1;
    const char *d = device ? device : "auto";
    char list[256];
    SML_RETURN_IF(strlen(d) >= sizeof list, SIMIL_ERR_INVALID_ARGUMENT, "device string too long");
    strcpy(list, d);
    char *slash = strstr(list, "/r");
    if (slash != NULL) {
        char *end;
        p->replicas = sml_device_number(slash + 2, SML_MAX_PARTS, &end);
        SML_RETURN_IF(p->replicas < 1 || *end != '\0', SIMIL_ERR_INVALID_ARGUMENT,
                      "device '%s': write /r<replicas> at the end, e.g. gpus/r2", d);
        *slash = '\0';
    }
    if (strcmp(list, "gpus") == 0) {
        p->count = sml_cuda_device_count();
        SML_RETURN_IF(p->count == 0, SIMIL_ERR_NO_DEVICE,
                      "device 'gpus': no GPU is usable; use the CPU (device \"cpu\")");
        if (p->count > SML_MAX_PARTS) p->count = SML_MAX_PARTS;
        for (int i = 0; i < p->count; i++) snprintf(p->device[i], sizeof p->device[i], "gpu:%d", i);
    } else if (strncmp(list, "cpu:", 4) == 0) {
        char *end;
        p->count = sml_device_number(list + 4, SML_MAX_PARTS, &end);
        SML_RETURN_IF(p->count < 1 || *end != '\0', SIMIL_ERR_INVALID_ARGUMENT,
                      "device '%s': write cpu:<parts>, e.g. cpu:2", d);
        for (int i = 0; i < p->count; i++) strcpy(p->device[i], "cpu");
    } else if (strncmp(list, "gpu:", 4) == 0 && strchr(list, ',') != NULL) {
        const char *s = list + 4;
        for (;;) {
            char *end;
            int gpu = sml_device_number(s, 1023, &end);
            SML_RETURN_IF(gpu < 0 || (*end != ',' && *end != '\0') || p->count == SML_MAX_PARTS,
                          SIMIL_ERR_INVALID_ARGUMENT,
                          "device '%s': write gpu:<n>,<n>,..., e.g. gpu:0,1", d);
            snprintf(p->device[p->count++], sizeof p->device[0], "gpu:%d", gpu);
            if (*end == '\0') break;
            s = end + 1;
        }
    } else {
        SML_RETURN_IF(strlen(list) >= sizeof p->device[0], SIMIL_ERR_INVALID_ARGUMENT,
                      "unknown device '%s'", d);
        p->count = 1;
        strcpy(p->device[0], list);
    }
    SML_RETURN_IF(p->count % p->replicas != 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "device '%s': %d devices cannot form %d replicas of equal size", d, p->count,
                  p->replicas);
    return SIMIL_OK;
}
