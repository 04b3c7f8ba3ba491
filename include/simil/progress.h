/* simil/progress.h: progress reports from long calls (training, adding, k-NN
 * graphs).  The library never prints; it calls the function installed here,
 * and the simil tool prints a line on stderr when stderr is a terminal. */
#ifndef SIMIL_PROGRESS_H
#define SIMIL_PROGRESS_H

#include <stdint.h>

#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* stage: what is running, e.g. "add".  done and total count work units of
 * that stage (total >= 1).  Called on the thread that made the library call,
 * at most a few times a second, and once with done == total at the end. */
typedef void (*simil_progress_fn)(const char *stage, int64_t done, int64_t total,
                                  void *user);

/* Install fn for the whole process (NULL to stop).  Not thread-safe with
 * respect to running calls: set it before starting work. */
SIMIL_API void simil_set_progress(simil_progress_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif
