/* progress.c: the process-wide progress callback. */
#define _POSIX_C_SOURCE 200809L
#include "core/progress.h"

#include <stddef.h>
#include <time.h>

static simil_progress_fn sml_progress_fn;
static void *sml_progress_user;
static _Thread_local double sml_progress_last;
static _Thread_local int sml_progress_muted;

void sml_progress_mute(void) { sml_progress_muted++; }
void sml_progress_unmute(void) { sml_progress_muted--; }

void simil_set_progress(simil_progress_fn fn, void *user)
{
    sml_progress_fn = fn;
    sml_progress_user = user;
}

static double sml_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void sml_progress(const char *stage, int64_t done, int64_t total)
{
    simil_progress_fn fn = sml_progress_fn;
    if (fn == NULL || sml_progress_muted > 0) return;
    double now = sml_now();
    if (done < total && now - sml_progress_last < 0.2) return;
    sml_progress_last = now;
    fn(stage, done, total > 0 ? total : 1, sml_progress_user);
}
