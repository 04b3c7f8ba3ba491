/* fuzz_common.c: scratch files and status checks for the fuzz targets. */
#define _GNU_SOURCE
#include "fuzz_common.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char sml_fuzz_dir[512];

/* Remove the scratch folder and the files in it (targets make no folders). */
static void sml_fuzz_cleanup(void)
{
    DIR *dir = opendir(sml_fuzz_dir);
    if (dir != NULL) {
        struct dirent *e;
        char path[1024];
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(path, sizeof path, "%s/%s", sml_fuzz_dir, e->d_name);
            unlink(path);
        }
        closedir(dir);
    }
    rmdir(sml_fuzz_dir);
}

static const char *sml_fuzz_scratch(void)
{
    if (sml_fuzz_dir[0]) return sml_fuzz_dir;
    struct stat st;
    const char *base = getenv("TMPDIR");
    if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0)
        base = "/dev/shm";
    snprintf(sml_fuzz_dir, sizeof sml_fuzz_dir, "%s/simil-fuzz-XXXXXX", base ? base : "/tmp");
    if (mkdtemp(sml_fuzz_dir) == NULL) sml_fuzz_fail("cannot create a scratch folder");
    atexit(sml_fuzz_cleanup);
    return sml_fuzz_dir;
}

const char *sml_fuzz_path(const char *name)
{
    static char paths[4][1024];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, sizeof paths[0], "%s/%s", sml_fuzz_scratch(), name);
    return p;
}

const char *sml_fuzz_write_file(const char *name, const void *data, size_t size)
{
    const char *path = sml_fuzz_path(name);
    FILE *f = fopen(path, "wb");
    if (f == NULL) sml_fuzz_fail("cannot create %s", path);
    if ((size > 0 && fwrite(data, 1, size, f) != size) | (fclose(f) != 0))
        sml_fuzz_fail("cannot write %s", path);
    return path;
}

void sml_fuzz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("simil fuzz: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void sml_fuzz_expect(const char *what, simil_status status, int count, ...)
{
    va_list ap;
    va_start(ap, count);
    int ok = 0;
    for (int i = 0; i < count; i++) ok |= va_arg(ap, int) == (int)status;
    va_end(ap);
    if (!ok)
        sml_fuzz_fail("%s returned %s (%s), which it must not for any input", what,
                      simil_status_name(status), simil_last_error());
}

uint64_t sml_fuzz_touch(const void *data, size_t size)
{
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}
