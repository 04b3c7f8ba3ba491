/* file_io.h: atomic file writing, checked reading, and checksummed sections.
 *
 * A writer writes to a temporary file in the target's folder; commit flushes,
 * fsyncs, renames it over the target and fsyncs the folder, so a reader sees
 * either the complete old file or the complete new one.  Abort removes the
 * temporary file.
 *
 * A writer killed before commit leaves its temporary file behind.  Temporary
 * files are named PATH.tmp-<pid>-XXXXXX and locked (flock) while written;
 * opening a writer for PATH first removes the PATH.tmp-<pid>-* files whose
 * writer is gone: no live process has that pid and no one holds the lock.  A
 * concurrent writer's file is never touched (its pid is alive, and it holds
 * the lock); a pid reused since the kill only delays the removal.
 *
 * A reader turns every short read into SIMIL_ERR_CORRUPT naming the file.
 *
 * Sections (used by index files) are [u32 tag][u32 zero][u64 length] payload
 * [u32 crc32 of payload][u32 crc32 of the 16 header bytes]; readers check both
 * checksums and refuse a length that runs past the end of the file. */
#ifndef SML_FILE_IO_H
#define SML_FILE_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sml_writer sml_writer;

simil_status sml_writer_open(sml_writer **w, const char *path);
simil_status sml_writer_write(sml_writer *w, const void *data, size_t bytes);

/* A writer that writes nothing and counts the bytes: a dry run of a save
 * tells how large the file will be before any of it is written.  Writers
 * of data that is costly to produce (downloads from a GPU) check
 * sml_writer_measuring and write sml_writer_skip's count instead. */
simil_status sml_writer_open_measure(sml_writer **w);
int sml_writer_measuring(const sml_writer *w);
void sml_writer_skip(sml_writer *w, uint64_t bytes);
uint64_t sml_writer_bytes(const sml_writer *w);

/* SIMIL_ERR_IO, with a message naming path and both sizes, unless the file
 * system that holds path's folder has bytes free (for the calling user). */
simil_status sml_file_space_check(const char *path, uint64_t bytes);

/* Tests: the free bytes the space check sees for a folder, instead of
 * statvfs's (NULL: statvfs again). */
void sml_file_free_space_hook(uint64_t (*fn)(const char *folder));
/* Finish: flush, fsync, rename over the target.  Frees w, even on failure (then
 * the temporary file is removed and the target is untouched). */
simil_status sml_writer_commit(sml_writer *w);
/* Give up: remove the temporary file and free w.  NULL does nothing. */
void sml_writer_abort(sml_writer *w);
const char *sml_writer_path(const sml_writer *w);

typedef struct sml_reader {
    FILE *file;
    const char *path;  /* owned by the caller, for messages */
    uint64_t size;     /* file size in bytes */
    uint64_t offset;   /* current position */
    /* the open section, if any */
    uint32_t section_tag;
    uint64_t section_left;
    uint32_t section_crc;
} sml_reader;

simil_status sml_reader_open(sml_reader *r, const char *path);
void sml_reader_close(sml_reader *r);
/* Read exactly bytes, or fail with SIMIL_ERR_CORRUPT ("truncated"). */
simil_status sml_reader_read(sml_reader *r, void *data, size_t bytes);
simil_status sml_reader_seek(sml_reader *r, uint64_t offset);

/* Four-character section tags, e.g. SML_TAG('V','E','C','S'). */
#define SML_TAG(a, b, c, d) \
    ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)

/* Write a section of exactly length payload bytes: begin, writes, end. */
simil_status sml_section_begin(sml_writer *w, uint32_t tag, uint64_t length);
simil_status sml_section_end(sml_writer *w);
/* A whole section from one buffer. */
simil_status sml_section_write(sml_writer *w, uint32_t tag, const void *data, uint64_t length);

/* Open the next section; it must carry tag.  *length gets its payload size. */
simil_status sml_section_open(sml_reader *r, uint32_t tag, uint64_t *length);
/* Read payload bytes of the open section. */
simil_status sml_section_read(sml_reader *r, void *data, size_t bytes);
/* Check that the payload was read to its end and that its checksum matches. */
simil_status sml_section_close(sml_reader *r);

uint32_t sml_crc32(uint32_t crc, const void *data, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
