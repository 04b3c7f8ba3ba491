/* test_file_io.c: temporary files of killed saves (src/core/file_io.h).
 * A writer killed before commit leaves PATH.tmp-<pid>-XXXXXX; the next
 * writer for PATH removes it, but never the file of a writer that is still
 * alive (its pid, or its lock held elsewhere), files of other targets, or
 * names it did not make.  Also through simil_index_save, after SIGKILLs. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/file_io.h"
#include "util/test_util.h"

/* The pid of a child that has exited and been reaped: no process has it
 * (unless reused at once, which the checks below would report). */
static pid_t dead_pid(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    return pid;
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("partial", f);
    fclose(f);
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Files in the test folder whose name starts with prefix. */
static int count_prefixed(const char *prefix)
{
    DIR *d = opendir(sml_test_tmpdir());
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* Start a writer for path in a child, write a little, and SIGKILL it before
 * commit: its temporary file stays behind. */
static void killed_writer(const char *path)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sml_writer *w;
        if (sml_writer_open(&w, path) != SIMIL_OK) _exit(1);
        if (sml_writer_write(w, "some bytes", 10) != SIMIL_OK) _exit(1);
        if (write(ready[1], "x", 1) != 1) _exit(1);
        pause();
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    close(ready[0]);
    close(ready[1]);
}

static void commit_once(const char *path)
{
    sml_writer *w;
    SML_ASSERT_OK(sml_writer_open(&w, path));
    SML_ASSERT_OK(sml_writer_write(w, "whole", 5));
    SML_ASSERT_OK(sml_writer_commit(w));
}

static void test_stale_temps_removed(void **state)
{
    (void)state;
    char path[1024], other[1024];
    snprintf(path, sizeof path, "%s", sml_test_path("target.simil"));
    snprintf(other, sizeof other, "%s", sml_test_path("target.simil2"));
    /* three killed writers: each one's open removed the file of the one
     * before, so one file is left */
    for (int i = 0; i < 3; i++) killed_writer(path);
    assert_int_equal(count_prefixed("target.simil.tmp-"), 1);
    /* files the cleaner must leave: a live pid (ours), a dead pid whose lock
     * someone holds, a name without a pid (older simil), another target's */
    const pid_t gone = dead_pid();
    char live[1200], locked[1200], legacy[1200], foreign[1200];
    snprintf(live, sizeof live, "%s.tmp-%ld-aaaaaa", path, (long)getpid());
    snprintf(locked, sizeof locked, "%s.tmp-%ld-bbbbbb", path, (long)gone);
    snprintf(legacy, sizeof legacy, "%s.tmp-cccccc", path);
    snprintf(foreign, sizeof foreign, "%s.tmp-%ld-dddddd", other, (long)gone);
    touch(live);
    touch(locked);
    touch(legacy);
    touch(foreign);
    int lock_fd = open(locked, O_RDONLY);
    assert_true(lock_fd >= 0);
    assert_int_equal(flock(lock_fd, LOCK_EX), 0);
    /* a writer of ours, open during the save */
    sml_writer *open_writer;
    SML_ASSERT_OK(sml_writer_open(&open_writer, path));
    commit_once(path);
    /* the killed writer's file is gone; live, locked, legacy and the open
     * writer's stay */
    assert_int_equal(count_prefixed("target.simil.tmp-"), 4);
    assert_true(exists(live) && exists(locked) && exists(legacy) && exists(foreign));
    SML_ASSERT_OK(sml_writer_write(open_writer, "later", 5));
    SML_ASSERT_OK(sml_writer_commit(open_writer));
    /* the lock released, the dead writer's file goes at the next save */
    close(lock_fd);
    commit_once(path);
    assert_false(exists(locked));
    assert_true(exists(live) && exists(legacy) && exists(foreign));
    unlink(live);
    unlink(legacy);
    unlink(foreign);
    assert_int_equal(count_prefixed("target.simil.tmp-"), 0);
}

/* The same through simil_index_save, as simil build --out does. */
static void test_index_save_after_kills(void **state)
{
    (void)state;
    enum { N = 20000, D = 32 };
    float *x = sml_test_malloc(sizeof(float) * N * D);
    sml_test_fill_uniform(x, N * D, 3, -1, 1);
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, D, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_add(index, N, x, NULL));
    const char *path = sml_test_path("saved.simil");
    int left = 0;
    for (int trial = 0; trial < 5; trial++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            for (;;) simil_index_save(index, path);
        }
        usleep(20000 + 15000 * (useconds_t)trial);
        kill(pid, SIGKILL);
        assert_int_equal(waitpid(pid, NULL, 0), pid);
        left += count_prefixed("saved.simil.tmp-");
    }
    SML_ASSERT_OK(simil_index_save(index, path));
    if (count_prefixed("saved.simil.tmp-") != 0)
        fail_msg("temporary files remain after a save (%d seen after the kills)", left);
    printf("# %d temporary files seen after the 5 kills; none after the next save\n", left);
    simil_index *back;
    SML_ASSERT_OK(simil_index_load(&back, path, "cpu"));
    assert_int_equal(simil_index_size(back), N);
    simil_index_destroy(back);
    simil_index_destroy(index);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stale_temps_removed),
        cmocka_unit_test(test_index_save_after_kills),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
