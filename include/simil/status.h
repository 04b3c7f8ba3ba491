/* simil/status.h: status codes, the per-thread error message, and the version.
 *
 * Every public function that can fail returns a simil_status.  SIMIL_OK is 0
 * and every error is negative; a code's value never changes once released.
 * After an error, simil_last_error() says what was wrong, with the values. */
#ifndef SIMIL_STATUS_H
#define SIMIL_STATUS_H

#if defined(_WIN32)
#define SIMIL_API __declspec(dllexport)
#elif defined(__GNUC__)
#define SIMIL_API __attribute__((visibility("default")))
#else
#define SIMIL_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define SIMIL_VERSION_MAJOR 0
#define SIMIL_VERSION_MINOR 1
#define SIMIL_VERSION_PATCH 0
#define SIMIL_VERSION_NUMBER \
    (SIMIL_VERSION_MAJOR * 10000 + SIMIL_VERSION_MINOR * 100 + SIMIL_VERSION_PATCH)

typedef enum simil_status {
    SIMIL_OK = 0,
    SIMIL_ERR_INVALID_ARGUMENT = -1, /* a bad value: NULL, k <= 0, NaN, wrong dim */
    SIMIL_ERR_OUT_OF_MEMORY = -2,    /* host or device memory ran out */
    SIMIL_ERR_UNSUPPORTED = -3,      /* valid, but not built (yet) or not available */
    SIMIL_ERR_NO_DEVICE = -4,        /* a GPU was asked for and none is usable */
    SIMIL_ERR_IO = -5,               /* the operating system refused a file operation */
    SIMIL_ERR_CORRUPT = -6,          /* a file is truncated, damaged or not ours */
    SIMIL_ERR_NOT_TRAINED = -7,      /* the index needs train() first */
    SIMIL_ERR_DEVICE = -8,           /* the GPU driver or runtime failed */
    SIMIL_ERR_INTERNAL = -9,         /* a bug in simil: please report it */
    SIMIL_ERR_REMOTE = -10           /* another process of a distributed job failed */
} simil_status;

/* The code's name, such as "SIMIL_ERR_IO".  Never NULL. */
SIMIL_API const char *simil_status_name(simil_status status);

/* The message of the last error raised on the calling thread, or "" if none.
 * Valid until the next simil call on this thread. */
SIMIL_API const char *simil_last_error(void);

/* "MAJOR.MINOR.PATCH" of the library actually loaded. */
SIMIL_API const char *simil_version_string(void);
SIMIL_API int simil_version_number(void);

#ifdef __cplusplus
}
#endif
#endif
