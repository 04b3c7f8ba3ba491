/* backend.c: helpers every index uses on top of a backend's ops table. */
#include "core/backend.h"

#include "core/error.h"

void sml_backend_close(sml_backend *backend)
{
    if (backend != NULL) backend->ops->close(backend);
}

simil_status sml_mem_clone(sml_backend *b, void **fresh, const void *mem, size_t keep,
                           size_t bytes)
{
    *fresh = NULL;
    SML_TRY(b->ops->mem_alloc(b, bytes, fresh));
    if (keep == 0) return SIMIL_OK;
    simil_status s = b->ops->mem_copy(b, *fresh, mem, keep);
    if (s != SIMIL_OK) {
        b->ops->mem_free(b, *fresh);
        *fresh = NULL;
    }
    return s;
}
