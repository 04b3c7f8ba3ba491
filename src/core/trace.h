/* trace.h: where the time of a call goes, for whoever tunes simil.  With the
 * environment variable SIMIL_TRACE set, each mark prints to stderr the
 * milliseconds since the previous mark of the same thread:
 *   simil trace: <what> <ms>
 * Unset (the default), a mark costs one load and a branch.  Where a GPU
 * stream runs behind the host, the GPU code's marks wait for it first
 * (cuda_util.cuh, trace_mark), so that its work is counted where it is
 * issued; that wait changes the overlap, so traced totals are not the
 * untraced ones (docs/benchmarks.md, "Tracing a call"). */
#ifndef SML_TRACE_H
#define SML_TRACE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Nonzero where SIMIL_TRACE is set (read once). */
int sml_trace_on(void);

/* The time since this thread's last mark, as "what"; restarts the clock.  A
 * null what restarts it silently. */
void sml_trace_mark(const char *what);

#ifdef __cplusplus
}
#endif
#endif
