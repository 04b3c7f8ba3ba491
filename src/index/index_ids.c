/* index_ids.c: the id rules of index_internal.h (sml_id_fits) applied to the
 * ids a file holds.  Every index type's load calls it, so it lives apart
 * from the factory and the file formats, which call the types. */
#include "core/error.h"
#include "index/index_internal.h"

simil_status sml_ids_check(const char *path, int64_t n, const int64_t *ids, int64_t next_id)
{
    for (int64_t i = 0; i < n; i++)
        SML_RETURN_IF(!sml_id_fits(ids[i], next_id), SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: it holds the id %" PRId64 ", outside [0, %" PRId64
                      ") given by its next sequential id",
                      path, ids[i], next_id);
    return SIMIL_OK;
}
