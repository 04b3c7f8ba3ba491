/* cpu_ivf.h: inverted-list scans on the CPU. */
#ifndef SML_CPU_IVF_H
#define SML_CPU_IVF_H

#include "core/backend.h"

/* A scan called without probes: finds them with the coarse k-NN, then runs
 * scan on a copy of args that carries them. */
simil_status sml_cpu_ivf_scan_probed(sml_backend *b, const sml_ivf_scan_args *args,
                                     simil_status (*scan)(sml_backend *,
                                                          const sml_ivf_scan_args *));

simil_status sml_cpu_ivf_flat_scan(sml_backend *b, const sml_ivf_scan_args *args);
simil_status sml_cpu_ivf_pq_scan(sml_backend *b, const sml_ivf_scan_args *args);
simil_status sml_cpu_pq_encode(sml_backend *b, const sml_pq_encode_args *args);

#endif
