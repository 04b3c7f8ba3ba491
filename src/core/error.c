/* error.c: status names and the per-thread error message. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SML_ERROR_MAX 1024

static _Thread_local char sml_error_message[SML_ERROR_MAX];

simil_status sml_error(simil_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sml_error_message, sizeof sml_error_message, fmt, ap);
    va_end(ap);
    return status;
}

simil_status sml_error_context(simil_status status, const char *fmt, ...)
{
    char context[SML_ERROR_MAX];
    char previous[SML_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
    memcpy(previous, sml_error_message, sizeof previous);
    /* Truncation is fine: the message is for people. */
    size_t n = strlen(context);
    if (n > SML_ERROR_MAX - 3) n = SML_ERROR_MAX - 3;
    memcpy(sml_error_message, context, n);
    memcpy(sml_error_message + n, ": ", 2);
    size_t rest = SML_ERROR_MAX - n - 3;
    size_t m = strnlen(previous, rest);
    memcpy(sml_error_message + n + 2, previous, m);
    sml_error_message[n + 2 + m] = '\0';
    return status;
}

void sml_error_clear(void) { sml_error_message[0] = '\0'; }

const char *simil_last_error(void) { return sml_error_message; }

const char *simil_status_name(simil_status status)
{
    switch (status) {
    case SIMIL_OK: return "SIMIL_OK";
    case SIMIL_ERR_INVALID_ARGUMENT: return "SIMIL_ERR_INVALID_ARGUMENT";
    case SIMIL_ERR_OUT_OF_MEMORY: return "SIMIL_ERR_OUT_OF_MEMORY";
    case SIMIL_ERR_UNSUPPORTED: return "SIMIL_ERR_UNSUPPORTED";
    case SIMIL_ERR_NO_DEVICE: return "SIMIL_ERR_NO_DEVICE";
    case SIMIL_ERR_IO: return "SIMIL_ERR_IO";
    case SIMIL_ERR_CORRUPT: return "SIMIL_ERR_CORRUPT";
    case SIMIL_ERR_NOT_TRAINED: return "SIMIL_ERR_NOT_TRAINED";
    case SIMIL_ERR_DEVICE: return "SIMIL_ERR_DEVICE";
    case SIMIL_ERR_INTERNAL: return "SIMIL_ERR_INTERNAL";
    case SIMIL_ERR_REMOTE: return "SIMIL_ERR_REMOTE";
    }
    return "SIMIL_ERR_UNKNOWN";
}

#define SML_STR2(x) #x
#define SML_STR(x) SML_STR2(x)

const char *simil_version_string(void)
{
    return SML_STR(SIMIL_VERSION_MAJOR) "." SML_STR(SIMIL_VERSION_MINOR) "." SML_STR(
        SIMIL_VERSION_PATCH);
}

int simil_version_number(void) { return SIMIL_VERSION_NUMBER; }
