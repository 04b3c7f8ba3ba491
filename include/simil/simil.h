/* simil/simil.h: the whole public API of libsimil.  Include this one. */
#ifndef SIMIL_SIMIL_H
#define SIMIL_SIMIL_H

#include "simil/status.h"
#include "simil/search_params.h"
#include "simil/index.h"
#include "simil/dataset.h"
#include "simil/progress.h"
#include "simil/select.h"
#include "simil/stream.h"
#include "simil/kmeans.h"
#include "simil/faiss.h"
#include "simil/graph.h"

#endif
