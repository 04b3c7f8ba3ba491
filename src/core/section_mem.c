/* section_mem.c: index file sections of backend memory (section_mem.h). */
#include "core/section_mem.h"

#include "core/alloc.h"
#include "core/error.h"

/* Backend memory moves through a host buffer of this size. */
static const size_t sml_stream_chunk = (size_t)64 << 20;

simil_status sml_section_write_mem(sml_writer *w, uint32_t tag, sml_backend *b, const void *mem,
                                   uint64_t bytes)
{
    SML_TRY(sml_section_begin(w, tag, bytes));
    if (sml_writer_measuring(w)) {
        /* a dry run: nothing to download */
        sml_writer_skip(w, bytes);
        return sml_section_end(w);
    }
    if (b->gpu < 0) {
        SML_TRY(sml_writer_write(w, mem, bytes));
        return sml_section_end(w);
    }
    size_t chunk = bytes < sml_stream_chunk ? (size_t)bytes : sml_stream_chunk;
    void *buf;
    SML_TRY(sml_alloc(&buf, chunk ? chunk : 1, 1, "a save buffer"));
    simil_status s = SIMIL_OK;
    for (uint64_t done = 0; done < bytes && s == SIMIL_OK; done += chunk) {
        size_t m = bytes - done < chunk ? (size_t)(bytes - done) : chunk;
        s = b->ops->mem_download(b, buf, (const char *)mem + done, m);
        if (s == SIMIL_OK) s = sml_writer_write(w, buf, m);
    }
    sml_free(buf);
    SML_TRY(s);
    return sml_section_end(w);
}

/* Open the next section, which must carry tag and hold exactly bytes. */
static simil_status sml_section_open_sized(sml_reader *r, uint32_t tag, uint64_t bytes)
{
    uint64_t length;
    SML_TRY(sml_section_open(r, tag, &length));
    SML_RETURN_IF(length != bytes, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: a section holds %llu bytes, %llu expected", r->path,
                  (unsigned long long)length, (unsigned long long)bytes);
    return SIMIL_OK;
}

simil_status sml_section_read_host(sml_reader *r, uint32_t tag, void *host, uint64_t bytes)
{
    SML_TRY(sml_section_open_sized(r, tag, bytes));
    SML_TRY(sml_section_read(r, host, bytes));
    return sml_section_close(r);
}

simil_status sml_section_read_mem(sml_reader *r, uint32_t tag, sml_backend *b, void *mem,
                                  uint64_t bytes)
{
    if (b->gpu < 0) return sml_section_read_host(r, tag, mem, bytes);
    SML_TRY(sml_section_open_sized(r, tag, bytes));
    size_t chunk = bytes < sml_stream_chunk ? (size_t)bytes : sml_stream_chunk;
    void *buf;
    SML_TRY(sml_alloc(&buf, chunk ? chunk : 1, 1, "a load buffer"));
    simil_status s = SIMIL_OK;
    for (uint64_t done = 0; done < bytes && s == SIMIL_OK; done += chunk) {
        size_t m = bytes - done < chunk ? (size_t)(bytes - done) : chunk;
        s = sml_section_read(r, buf, m);
        if (s == SIMIL_OK) s = b->ops->mem_upload(b, (char *)mem + done, buf, m);
    }
    sml_free(buf);
    SML_TRY(s);
    return sml_section_close(r);
}
