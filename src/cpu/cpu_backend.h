/* cpu_backend.h: the CPU backend's constructor. */
#ifndef SML_CPU_BACKEND_H
#define SML_CPU_BACKEND_H

#include "core/backend.h"

simil_status sml_cpu_backend_open(sml_backend **backend);

#endif
