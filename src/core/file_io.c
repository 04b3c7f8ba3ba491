/* file_io.c: atomic writes (temp file, fsync, rename) and checked reads. */
#define _POSIX_C_SOURCE 200809L
#include "core/file_io.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

#include "core/alloc.h"
#include "core/error.h"

struct sml_writer {
    FILE *file;        /* NULL for a measuring writer */
    char *path;
    char *temp_path;
    uint64_t bytes;    /* written (or counted) so far */
    /* the open section */
    int in_section;
    uint64_t section_left;
    uint32_t section_crc;
};

/* On one thread on purpose, though zlib's crc32 runs at only 2-4 GB/s: a
 * save may run in a child forked after the parent used OpenMP (Python's
 * multiprocessing, test_crash_safety), where a new OpenMP team is not safe;
 * sliced on OpenMP threads, no save of test_crash_safety's forked children
 * finished (0 of 50, where a save takes 73 ms). */
uint32_t sml_crc32(uint32_t crc, const void *data, size_t bytes)
{
    const unsigned char *p = data;
    while (bytes > 0) {
        uInt chunk = bytes > (1u << 30) ? (1u << 30) : (uInt)bytes;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk;
        bytes -= chunk;
    }
    return crc;
}

static simil_status sml_io_error(const char *what, const char *path)
{
    return sml_error(SIMIL_ERR_IO, "%s '%s': %s", what, path, strerror(errno));
}

/* Whether the temporary file `name` in folder fd `dir` was left by a dead
 * writer: its name carries the writer's pid (PATH.tmp-<pid>-XXXXXX), no live
 * process has that pid, and no one holds its lock (a live writer on another
 * host or in another pid namespace would). */
static int sml_temp_is_stale(int dir, const char *name, const char *pid_text)
{
    char *end;
    errno = 0;
    long pid = strtol(pid_text, &end, 10);
    if (errno != 0 || end == pid_text || *end != '-' || strlen(end + 1) != 6 || pid <= 0 ||
        (pid_t)pid != pid)
        return 0;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) return 0;
    int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    int stale = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0;
    close(fd); /* releases the lock */
    return stale;
}

/* Remove the temporary files that killed saves to path left behind (see
 * sml_temp_is_stale).  Best effort: a folder that cannot be read is left. */
static void sml_remove_stale_temps(const char *path)
{
    char folder[4096], base[4096];
    if (strlen(path) >= sizeof folder) return;
    strcpy(folder, path);
    strcpy(base, path);
    const char *b = basename(base);
    char prefix[4096 + 8];
    snprintf(prefix, sizeof prefix, "%s.tmp-", b);
    const size_t plen = strlen(prefix);
    DIR *d = opendir(dirname(folder));
    if (d == NULL) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, plen) == 0 &&
            sml_temp_is_stale(dirfd(d), e->d_name, e->d_name + plen))
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

simil_status sml_writer_open(sml_writer **out, const char *path)
{
    *out = NULL;
    SML_RETURN_IF(path == NULL || path[0] == '\0', SIMIL_ERR_INVALID_ARGUMENT,
                  "no output file name given");
    sml_writer *w;
    SML_TRY(sml_calloc((void **)&w, 1, sizeof *w, "a file writer"));
    size_t n = strlen(path) + 40;
    simil_status s = sml_strdup(&w->path, path);
    if (s == SIMIL_OK) s = sml_alloc((void **)&w->temp_path, n, 1, "a file name");
    if (s != SIMIL_OK) {
        sml_free(w->path);
        sml_free(w);
        return s;
    }
    sml_remove_stale_temps(path);
    snprintf(w->temp_path, n, "%s.tmp-%ld-XXXXXX", path, (long)getpid());
    int fd = mkstemp(w->temp_path);
    if (fd < 0) {
        s = sml_io_error("cannot create a temporary file next to", path);
        sml_free(w->temp_path);
        sml_free(w->path);
        sml_free(w);
        return s;
    }
    fchmod(fd, 0644);
    /* held until the file is closed: a cleaner in another pid namespace or
     * on another host, where our pid means nothing, sees the file in use */
    (void)flock(fd, LOCK_EX | LOCK_NB);
    w->file = fdopen(fd, "wb");
    if (w->file == NULL) {
        s = sml_io_error("cannot open", w->temp_path);
        close(fd);
        unlink(w->temp_path);
        sml_free(w->temp_path);
        sml_free(w->path);
        sml_free(w);
        return s;
    }
    setvbuf(w->file, NULL, _IOFBF, 1 << 20);
    *out = w;
    return SIMIL_OK;
}

const char *sml_writer_path(const sml_writer *w) { return w->path; }

simil_status sml_writer_open_measure(sml_writer **out)
{
    *out = NULL;
    sml_writer *w;
    SML_TRY(sml_calloc((void **)&w, 1, sizeof *w, "a file writer"));
    simil_status s = sml_strdup(&w->path, "(measuring)");
    if (s != SIMIL_OK) {
        sml_free(w);
        return s;
    }
    *out = w;
    return SIMIL_OK;
}

int sml_writer_measuring(const sml_writer *w) { return w->file == NULL; }

uint64_t sml_writer_bytes(const sml_writer *w) { return w->bytes; }

void sml_writer_skip(sml_writer *w, uint64_t bytes)
{
    assert(w->file == NULL && (!w->in_section || bytes <= w->section_left));
    if (w->in_section) w->section_left -= bytes;
    w->bytes += bytes;
}

simil_status sml_writer_write(sml_writer *w, const void *data, size_t bytes)
{
    if (bytes == 0) return SIMIL_OK;
    if (w->in_section) {
        SML_RETURN_IF(bytes > w->section_left, SIMIL_ERR_INTERNAL,
                      "section overflow writing '%s'", w->path);
        w->section_left -= bytes;
        if (w->file != NULL) w->section_crc = sml_crc32(w->section_crc, data, bytes);
    }
    w->bytes += bytes;
    if (w->file == NULL) return SIMIL_OK;
    if (fwrite(data, 1, bytes, w->file) != bytes) return sml_io_error("cannot write", w->path);
    return SIMIL_OK;
}

static uint64_t (*sml_free_space_fn)(const char *folder);

void sml_file_free_space_hook(uint64_t (*fn)(const char *folder)) { sml_free_space_fn = fn; }

simil_status sml_file_space_check(const char *path, uint64_t bytes)
{
    char folder[4096];
    SML_RETURN_IF(strlen(path) >= sizeof folder, SIMIL_ERR_INVALID_ARGUMENT,
                  "the file name '%.64s...' is too long", path);
    strcpy(folder, path);
    const char *dir = dirname(folder);
    uint64_t have;
    if (sml_free_space_fn != NULL) {
        have = sml_free_space_fn(dir);
    } else {
        struct statvfs fs;
        if (statvfs(dir, &fs) != 0) return SIMIL_OK; /* unknown: let the writes tell */
        have = (uint64_t)fs.f_bavail * (uint64_t)fs.f_frsize;
    }
    SML_RETURN_IF(have < bytes, SIMIL_ERR_IO,
                  "not enough disk space to write '%s': it takes %.3f GB, and its file system "
                  "has %.3f GB free; free some space or write elsewhere (nothing was written)",
                  path, (double)bytes / 1e9, (double)have / 1e9);
    return SIMIL_OK;
}

static void sml_writer_free(sml_writer *w)
{
    sml_free(w->temp_path);
    sml_free(w->path);
    sml_free(w);
}

void sml_writer_abort(sml_writer *w)
{
    if (w == NULL) return;
    if (w->file != NULL) {
        fclose(w->file);
        unlink(w->temp_path);
    }
    sml_writer_free(w);
}

/* fsync the folder so that the rename itself survives a crash. */
static void sml_sync_parent(const char *path)
{
    char folder[4096];
    if (strlen(path) >= sizeof folder) return;
    strcpy(folder, path);
    int fd = open(dirname(folder), O_RDONLY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

simil_status sml_writer_commit(sml_writer *w)
{
    assert(w->file != NULL); /* a measuring writer is aborted, never committed */
    simil_status s = SIMIL_OK;
    if (w->in_section) s = sml_error(SIMIL_ERR_INTERNAL, "unfinished section in '%s'", w->path);
    if (s == SIMIL_OK && fflush(w->file) != 0) s = sml_io_error("cannot write", w->path);
    if (s == SIMIL_OK && fsync(fileno(w->file)) != 0) s = sml_io_error("cannot sync", w->path);
    if (fclose(w->file) != 0 && s == SIMIL_OK) s = sml_io_error("cannot close", w->path);
    if (s == SIMIL_OK && rename(w->temp_path, w->path) != 0)
        s = sml_io_error("cannot rename the temporary file onto", w->path);
    if (s != SIMIL_OK) {
        unlink(w->temp_path);
    } else {
        sml_sync_parent(w->path);
    }
    sml_writer_free(w);
    return s;
}

simil_status sml_section_begin(sml_writer *w, uint32_t tag, uint64_t length)
{
    SML_RETURN_IF(w->in_section, SIMIL_ERR_INTERNAL, "nested section in '%s'", w->path);
    unsigned char head[24];
    uint32_t zero = 0;
    memcpy(head, &tag, 4);
    memcpy(head + 4, &zero, 4);
    memcpy(head + 8, &length, 8);
    uint32_t head_crc = sml_crc32(0, head, 16);
    memcpy(head + 16, &head_crc, 4);
    memcpy(head + 20, &zero, 4);
    SML_TRY(sml_writer_write(w, head, sizeof head));
    w->in_section = 1;
    w->section_left = length;
    w->section_crc = 0;
    return SIMIL_OK;
}

simil_status sml_section_end(sml_writer *w)
{
    SML_RETURN_IF(!w->in_section || w->section_left != 0, SIMIL_ERR_INTERNAL,
                  "section of '%s' ended with %llu bytes unwritten", w->path,
                  (unsigned long long)w->section_left);
    w->in_section = 0;
    return sml_writer_write(w, &w->section_crc, 4);
}

simil_status sml_section_write(sml_writer *w, uint32_t tag, const void *data, uint64_t length)
{
    SML_TRY(sml_section_begin(w, tag, length));
    SML_TRY(sml_writer_write(w, data, length));
    return sml_section_end(w);
}

simil_status sml_reader_open(sml_reader *r, const char *path)
{
    memset(r, 0, sizeof *r);
    r->path = path;
    r->file = fopen(path, "rb");
    if (r->file == NULL) return sml_io_error("cannot open", path);
    struct stat st;
    if (fstat(fileno(r->file), &st) != 0) {
        simil_status s = sml_io_error("cannot stat", path);
        fclose(r->file);
        r->file = NULL;
        return s;
    }
    if (S_ISDIR(st.st_mode)) {
        fclose(r->file);
        r->file = NULL;
        return sml_error(SIMIL_ERR_IO, "'%s' is a folder, not a file", path);
    }
    r->size = (uint64_t)st.st_size;
    return SIMIL_OK;
}

void sml_reader_close(sml_reader *r)
{
    if (r->file != NULL) fclose(r->file);
    r->file = NULL;
}

simil_status sml_reader_read(sml_reader *r, void *data, size_t bytes)
{
    if (bytes == 0) return SIMIL_OK;
    SML_RETURN_IF(bytes > r->size - r->offset, SIMIL_ERR_CORRUPT,
                  "'%s' is truncated: needed %zu bytes at offset %llu, the file has %llu",
                  r->path, bytes, (unsigned long long)r->offset, (unsigned long long)r->size);
    size_t got = fread(data, 1, bytes, r->file);
    if (got != bytes) {
        if (ferror(r->file)) return sml_io_error("cannot read", r->path);
        return sml_error(SIMIL_ERR_CORRUPT, "'%s' is truncated at offset %llu", r->path,
                         (unsigned long long)(r->offset + got));
    }
    r->offset += bytes;
    return SIMIL_OK;
}

simil_status sml_reader_seek(sml_reader *r, uint64_t offset)
{
    SML_RETURN_IF(offset > r->size, SIMIL_ERR_CORRUPT,
                  "'%s' is truncated: offset %llu is past its end (%llu bytes)", r->path,
                  (unsigned long long)offset, (unsigned long long)r->size);
    if (fseeko(r->file, (off_t)offset, SEEK_SET) != 0) return sml_io_error("cannot seek in", r->path);
    r->offset = offset;
    return SIMIL_OK;
}

static void sml_tag_text(uint32_t tag, char text[5])
{
    for (int i = 0; i < 4; i++) {
        char c = (char)(tag >> (8 * i));
        text[i] = (c >= 32 && c < 127) ? c : '?';
    }
    text[4] = '\0';
}

simil_status sml_section_open(sml_reader *r, uint32_t tag, uint64_t *length)
{
    unsigned char head[24];
    SML_TRY(sml_reader_read(r, head, sizeof head));
    uint32_t got_tag, head_crc, pad;
    uint64_t len;
    memcpy(&pad, head + 20, 4);
    memcpy(&got_tag, head, 4);
    memcpy(&len, head + 8, 8);
    memcpy(&head_crc, head + 16, 4);
    char want[5], got[5];
    sml_tag_text(tag, want);
    sml_tag_text(got_tag, got);
    SML_RETURN_IF(sml_crc32(0, head, 16) != head_crc || pad != 0, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: bad checksum in a section header at offset %llu", r->path,
                  (unsigned long long)(r->offset - sizeof head));
    SML_RETURN_IF(got_tag != tag, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: expected section '%s' at offset %llu, found '%s'", r->path,
                  want, (unsigned long long)(r->offset - sizeof head), got);
    SML_RETURN_IF(len > r->size - r->offset || r->size - r->offset - len < 4, SIMIL_ERR_CORRUPT,
                  "'%s' is truncated: section '%s' claims %llu bytes, %llu remain", r->path,
                  want, (unsigned long long)len, (unsigned long long)(r->size - r->offset));
    r->section_tag = tag;
    r->section_left = len;
    r->section_crc = 0;
    *length = len;
    return SIMIL_OK;
}

simil_status sml_section_read(sml_reader *r, void *data, size_t bytes)
{
    char tag[5];
    sml_tag_text(r->section_tag, tag);
    SML_RETURN_IF(bytes > r->section_left, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: section '%s' is shorter than its contents need", r->path,
                  tag);
    SML_TRY(sml_reader_read(r, data, bytes));
    r->section_left -= bytes;
    r->section_crc = sml_crc32(r->section_crc, data, bytes);
    return SIMIL_OK;
}

simil_status sml_section_close(sml_reader *r)
{
    char tag[5];
    sml_tag_text(r->section_tag, tag);
    SML_RETURN_IF(r->section_left != 0, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: section '%s' has %llu unexpected bytes", r->path, tag,
                  (unsigned long long)r->section_left);
    uint32_t stored;
    SML_TRY(sml_reader_read(r, &stored, 4));
    SML_RETURN_IF(stored != r->section_crc, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: checksum mismatch in section '%s'", r->path, tag);
    return SIMIL_OK;
}
