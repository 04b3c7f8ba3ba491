/* progress.h: reporting progress of long calls to the callback the user
 * installed with simil_set_progress().  Rate-limited so that hot loops can
 * call it freely. */
#ifndef SML_PROGRESS_H
#define SML_PROGRESS_H

#include <stdint.h>

#include "simil/progress.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Report done out of total for stage.  Calls through at most ~5 times a second,
 * except that done == total always goes through. */
void sml_progress(const char *stage, int64_t done, int64_t total);

#ifdef __cplusplus
}
#endif
#endif
