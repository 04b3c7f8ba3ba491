/* simil/search_params.h: the settings of a search.
 *
 * A simil_search_params handle holds one value for every setting the library
 * knows (nprobe, threads, refine_factor, extra_distance, lut, ...); create
 * fills in the defaults, and a setting is changed by name:
 *
 *     simil_search_params *p;
 *     simil_search_params_create(&p);
 *     simil_search_params_set(p, "nprobe", "16");        from text, as the CLI does
 *     simil_search_params_set_float(p, "extra_distance", 0.01);
 *     simil_index_search(index, nq, queries, k, p, distances, labels);
 *     simil_search_params_destroy(p);
 *
 * The settings and their ranges are listed by simil_search_param_count() and
 * simil_search_param_get_info() (and in docs/index-types.md).  A setting an
 * index type does not use is accepted and ignored by its searches, so one
 * handle can serve indexes of every type; simil_index_uses_search_param()
 * tells whether an index reads it.  Later versions add settings without
 * changing this interface.
 *
 * Errors (SIMIL_ERR_INVALID_ARGUMENT, with simil_last_error() naming the
 * setting and what it accepts): an unknown name, a value that does not parse
 * or lies outside the setting's range, a typed setter of the wrong type.  A
 * call that fails leaves the handle as it was.
 *
 * A handle may be read by any number of searches at once; changing it while
 * a search reads it is the caller's race. */
#ifndef SIMIL_SEARCH_PARAMS_H
#define SIMIL_SEARCH_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct simil_search_params simil_search_params;

/* A new handle holding every setting's default.  On success *params is a
 * handle that the caller destroys. */
SIMIL_API simil_status simil_search_params_create(simil_search_params **params);

/* NULL is allowed and does nothing. */
SIMIL_API void simil_search_params_destroy(simil_search_params *params);

/* Set one setting from text: an integer ("16"), a number ("0.05", "1e-2"),
 * or one of an enum's names ("fp16"). */
SIMIL_API simil_status simil_search_params_set(simil_search_params *params, const char *name,
                                               const char *value);

/* Apply comma-separated name=value settings, e.g. "nprobe=16,lut=fp16", in
 * order.  If one fails, none is applied. */
SIMIL_API simil_status simil_search_params_parse(simil_search_params *params,
                                                 const char *settings);

/* Typed setters.  set_int takes integer and float settings; set_float takes
 * float settings.  Enum settings are set by name (simil_search_params_set). */
SIMIL_API simil_status simil_search_params_set_int(simil_search_params *params, const char *name,
                                                   int64_t value);
SIMIL_API simil_status simil_search_params_set_float(simil_search_params *params,
                                                     const char *name, double value);

/* The value of a setting as text, as simil_search_params_set takes it, into
 * value (size bytes with the terminating zero; SIMIL_ERR_INVALID_ARGUMENT if
 * it does not fit). */
SIMIL_API simil_status simil_search_params_get(const simil_search_params *params,
                                               const char *name, char *value, size_t size);

/* Typed getters: get_int reads integer settings, get_float integer and float
 * settings. */
SIMIL_API simil_status simil_search_params_get_int(const simil_search_params *params,
                                                   const char *name, int64_t *value);
SIMIL_API simil_status simil_search_params_get_float(const simil_search_params *params,
                                                     const char *name, double *value);

/* ---- Allowed ids (filtered search) ----
 *
 * A search with allowed ids returns only vectors whose id is allowed, as if
 * the index held those vectors alone.  Flat gives the true k nearest among
 * them; an approximate index (IVF, XFBQ) the k nearest among the allowed
 * vectors of the lists it scans (nprobe), so a filter that leaves few
 * vectors in those lists leaves slots empty (label -1) rather than scanning
 * more lists.  Sharded indexes pass the filter to every shard.  The ids are
 * copied into the handle; a later call replaces them.  A GPU index keeps the
 * last filter it was sent on the device: searches that reuse one handle
 * send its filter once.
 *
 * bitset: nbits bits, id i allowed iff bit i % 8 of byte i / 8 is set (the
 * layout of numpy.packbits(..., bitorder="little") and of cuVS's bitsets).
 * A search fails (SIMIL_ERR_INVALID_ARGUMENT) when the bitset is shorter than
 * the ids the index has held (see simil_index_add: one bit for every id below
 * one past the largest id ever added).
 * ids: n ids, ascending, no repeats, none negative; n = 0 allows nothing.
 * Ids no vector has are allowed and ignored. */
SIMIL_API simil_status simil_search_params_allow_bitset(simil_search_params *params,
                                                        int64_t nbits, const uint8_t *bitset);
SIMIL_API simil_status simil_search_params_allow_ids(simil_search_params *params, int64_t n,
                                                     const int64_t *ids);
/* Allow every id again (the default). */
SIMIL_API void simil_search_params_allow_all(simil_search_params *params);
/* 1 when params restricts the ids (a bitset or a list), else 0. */
SIMIL_API int simil_search_params_has_filter(const simil_search_params *params);

/* ---- What settings exist ---- */

typedef enum simil_param_type {
    SIMIL_PARAM_INT = 0,    /* a whole number */
    SIMIL_PARAM_FLOAT = 1,  /* a real number */
    SIMIL_PARAM_ENUM = 2    /* one of the names in choices */
} simil_param_type;

/* One setting.  The struct and its strings belong to the library and live as
 * long as the process; later versions may add fields at the end. */
typedef struct simil_search_param_info {
    const char *name;            /* e.g. "nprobe" */
    simil_param_type type;
    const char *default_value;   /* as simil_search_params_set takes it, e.g. "1" */
    const char *range;           /* what it accepts, e.g. "1 to 1073741824" or
                                    "auto, fp32 or fp16" */
    const char *index_types;     /* the index types that read it, e.g. "IVF" */
    const char *help;            /* one line */
    const char *const *choices;  /* SIMIL_PARAM_ENUM: the names, NULL-ended; else NULL */
} simil_search_param_info;

/* The number of settings, and the i-th for i in [0, count) (NULL outside). */
SIMIL_API int simil_search_param_count(void);
SIMIL_API const simil_search_param_info *simil_search_param_get_info(int i);

/* The setting called name, or NULL. */
SIMIL_API const simil_search_param_info *simil_search_param_find(const char *name);

#ifdef __cplusplus
}
#endif
#endif
