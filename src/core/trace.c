/* trace.c: SIMIL_TRACE's marks (trace.h). */
#include "core/trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int trace_state; /* 0: not read yet, 1: off, 2: on */
static pthread_once_t trace_once = PTHREAD_ONCE_INIT;

static void trace_read(void)
{
    const char *v = getenv("SIMIL_TRACE");
    trace_state = v != NULL && v[0] != '\0' && v[0] != '0' ? 2 : 1;
}

int sml_trace_on(void)
{
    pthread_once(&trace_once, trace_read);
    return trace_state == 2;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

void sml_trace_mark(const char *what)
{
    static _Thread_local double last;
    if (!sml_trace_on()) return;
    const double t = now_ms();
    if (what != NULL && last > 0) fprintf(stderr, "simil trace: %s %.3f\n", what, t - last);
    last = t;
}
