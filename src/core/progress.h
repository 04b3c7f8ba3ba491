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

/* While muted (calls nest), this thread reports nothing: a long job that
 * drives other long calls reports its own stage only. */
void sml_progress_mute(void);
void sml_progress_unmute(void);

#ifdef __cplusplus
}
#endif
#endif
