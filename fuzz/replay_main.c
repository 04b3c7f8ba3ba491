/* replay_main.c: runs a fuzz target without libFuzzer, over files and
 * folders given on the command line (every regular file in a folder, in name
 * order).  The regression tests in tests/reliability use it, so a saved crash
 * input is replayed by the ordinary build and by CI's sanitizer build.
 *   replay_<target> PATH...     exit 0: every input was answered cleanly */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *data = malloc(size > 0 ? (size_t)size : 1);
    if (data == NULL || (size > 0 && fread(data, 1, (size_t)size, f) != (size_t)size)) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        fclose(f);
        free(data);
        return 1;
    }
    fclose(f);
    /* Printed first, so that a crash names the input that caused it. */
    fprintf(stderr, "replay: %s (%ld bytes)\n", path, size);
    LLVMFuzzerTestOneInput(data, (size_t)size);
    free(data);
    return 0;
}

static int skip_name(const char *name)
{
    return name[0] == '.' || strcmp(name, "README.md") == 0;
}

static int replay_path(const char *path, int *count)
{
    struct stat st;
    if (stat(path, &st) != 0) return 0; /* a target with no regressions yet */
    if (!S_ISDIR(st.st_mode)) {
        ++*count;
        return replay_file(path);
    }
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort);
    if (n < 0) {
        fprintf(stderr, "replay: cannot list %s\n", path);
        return 1;
    }
    int failed = 0;
    for (int i = 0; i < n; i++) {
        char child[4096];
        snprintf(child, sizeof child, "%s/%s", path, names[i]->d_name);
        if (!skip_name(names[i]->d_name) && stat(child, &st) == 0 && S_ISREG(st.st_mode)) {
            ++*count;
            failed |= replay_file(child);
        }
        free(names[i]);
    }
    free(names);
    return failed;
}

int main(int argc, char **argv)
{
    int failed = 0, count = 0;
    for (int i = 1; i < argc; i++) failed |= replay_path(argv[i], &count);
    fprintf(stderr, "replay: %d inputs answered cleanly\n", count);
    return failed;
}
