/* section_mem.h: index file sections whose payload is an array in backend
 * memory (a GPU's, or the host's for the CPU backend).  They stream through a
 * bounded host buffer, so saving or loading a large GPU index never needs a
 * host copy of a whole array. */
#ifndef SML_SECTION_MEM_H
#define SML_SECTION_MEM_H

#include "core/backend.h"
#include "core/file_io.h"

/* One section of tag holding bytes of backend memory mem. */
simil_status sml_section_write_mem(sml_writer *w, uint32_t tag, sml_backend *b,
                                   const void *mem, uint64_t bytes);
/* Read the next section, which must carry tag and hold exactly bytes, into
 * backend memory mem (SIMIL_ERR_CORRUPT otherwise). */
simil_status sml_section_read_mem(sml_reader *r, uint32_t tag, sml_backend *b, void *mem,
                                  uint64_t bytes);
/* The same into host memory (what sml_section_read_mem does on the CPU). */
simil_status sml_section_read_host(sml_reader *r, uint32_t tag, void *host, uint64_t bytes);

#endif
