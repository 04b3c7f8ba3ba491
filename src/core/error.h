/* error.h: raising errors inside the library.
 *
 * sml_error() records a formatted per-thread message and returns the code, so
 * that a failing check is one line:
 *     SML_RETURN_IF(k <= 0, SIMIL_ERR_INVALID_ARGUMENT, "k=%" PRId64 " must be >= 1", k);
 *     SML_TRY(sml_file_read(f, buf, n));
 * SML_TRY forwards a callee's status; the callee already set the message. */
#ifndef SML_ERROR_H
#define SML_ERROR_H

#include <inttypes.h>

#include "simil/status.h"

#if defined(__GNUC__)
#define SML_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SML_PRINTF(f, a)
#endif

#ifdef __cplusplus
extern "C" {
#endif

simil_status sml_error(simil_status status, const char *fmt, ...) SML_PRINTF(2, 3);

/* Prefix the current message with "context: ", keeping the status.  Used where a
 * low-level error needs the name of the file or the operation around it. */
simil_status sml_error_context(simil_status status, const char *fmt, ...) SML_PRINTF(2, 3);

void sml_error_clear(void);

#ifdef __cplusplus
}
#endif

#define SML_RETURN_IF(cond, status, ...)            \
    do {                                            \
        if (cond) return sml_error((status), __VA_ARGS__); \
    } while (0)

#define SML_TRY(expr)                          \
    do {                                       \
        simil_status sml_try_s_ = (expr);      \
        if (sml_try_s_ != SIMIL_OK) return sml_try_s_; \
    } while (0)

#endif
