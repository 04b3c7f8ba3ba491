/* test_crash_safety.c: a save killed at any moment leaves a whole index.
 *
 * Two Flat indexes of 64-d vectors, A (200,000 vectors) and B (the same plus
 * 1,000 more), are saved once to learn the file sizes and how long a save
 * takes.  Each trial forks a child that saves A, B, A, B, ... (B first in odd
 * trials) over the same path, and SIGKILLs it after a seeded random delay
 * spread uniformly over three saves.  The file at the path must then load and be exactly A or
 * exactly B: its size on disk, its vector count, and two probe searches (a
 * vector only B holds, and A's last vector) must all agree.
 *
 * A kill during a save leaves the writer's temporary file
 * (PATH.tmp-<pid>-XXXXXX, see src/core/file_io.h) behind until the next save
 * to PATH removes it (tests/core/test_file_io.c).  Load never looks at it,
 * since it only opens PATH.  The test checks
 * that every left-over temporary file either loads whole or fails cleanly
 * with SIMIL_ERR_CORRUPT, counts them, and deletes them.
 *
 * SIMIL_TEST_SEED sets the seed; SIMIL_TEST_QUICK=1 runs 10 trials. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/test_util.h"

enum { DIM = 64, NA = 200000, NB = NA + 1000, PROBE_B = NA + 500 };

static float *data; /* NB x DIM */

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static off_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_size;
}

/* The child: announce the start on the pipe, then save a and b in turn until
 * killed.  It never returns into cmocka. */
static void child_main(int announce, const simil_index *a, const simil_index *b, const char *path)
{
    /* Only this process, with the inherited indexes, runs from here on. */
    char go = 'g';
    if (write(announce, &go, 1) != 1) _exit(3);
    for (;;) {
        if (simil_index_save(a, path) != SIMIL_OK) _exit(4);
        if (simil_index_save(b, path) != SIMIL_OK) _exit(5);
    }
}

/* Which of A (0) and B (1) the loaded index is; fails the test if neither. */
static int identify(const simil_index *loaded, const char *what, int trial, uint64_t seed)
{
    int64_t n = simil_index_size(loaded);
    if (n != NA && n != NB)
        fail_msg("%s after kill %d (seed %llu) holds %lld vectors, neither A (%d) nor B (%d)",
                 what, trial, (unsigned long long)seed, (long long)n, NA, NB);
    float d[1];
    int64_t l[1];
    SML_ASSERT_OK(simil_index_search(loaded, 1, data + (size_t)PROBE_B * DIM, 1, NULL, d, l));
    int is_b = n == NB;
    if (is_b && (l[0] != PROBE_B || d[0] != 0.0f))
        fail_msg("%s after kill %d (seed %llu): B's probe found id %lld at %g", what, trial,
                 (unsigned long long)seed, (long long)l[0], (double)d[0]);
    if (!is_b && l[0] == PROBE_B)
        fail_msg("%s after kill %d (seed %llu): A holds B's probe", what, trial,
                 (unsigned long long)seed);
    SML_ASSERT_OK(simil_index_search(loaded, 1, data + (size_t)(NA - 1) * DIM, 1, NULL, d, l));
    if (l[0] != NA - 1 || d[0] != 0.0f)
        fail_msg("%s after kill %d (seed %llu): the last vector of A is missing (found %lld)",
                 what, trial, (unsigned long long)seed, (long long)l[0]);
    return is_b;
}

/* Check and delete the temporary files a killed save left; counts them in
 * whole[0] (refused as corrupt) and whole[1] (complete: killed after the
 * fsync, before the rename). */
static void sweep_temp_files(const char *folder, const char *base, int trial, uint64_t seed,
                             int whole[2])
{
    DIR *dir = opendir(folder);
    assert_non_null(dir);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.tmp-", base);
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
        simil_index *partial = NULL;
        simil_status s = simil_index_load(&partial, path, "cpu");
        whole[s == SIMIL_OK]++;
        if (s == SIMIL_OK) {
            identify(partial, "a left-over temporary file", trial, seed);
            simil_index_destroy(partial);
        } else if (s != SIMIL_ERR_CORRUPT) {
            fail_msg("left-over '%s' gave %s (%s), expected SIMIL_OK or SIMIL_ERR_CORRUPT", path,
                     simil_status_name(s), simil_last_error());
        }
        assert_int_equal(unlink(path), 0);
    }
    closedir(dir);
}

static void test_kill_during_save(void **state)
{
    (void)state;
    const char *env_seed = getenv("SIMIL_TEST_SEED");
    uint64_t seed = env_seed ? strtoull(env_seed, NULL, 10) : 20240611;
    const int trials = sml_test_quick() ? 10 : 50;
    data = sml_test_malloc(sizeof(float) * (size_t)NB * DIM);
    sml_test_fill_uniform(data, (int64_t)NB * DIM, 11, -1, 1);
    simil_index *a, *b;
    SML_ASSERT_OK(simil_index_create(&a, DIM, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_add(a, NA, data, NULL));
    SML_ASSERT_OK(simil_index_create(&b, DIM, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_add(b, NB, data, NULL));

    const char *folder = sml_test_tmpdir();
    const char *path = sml_test_path("crash.sidx");
    double t0 = now_seconds();
    SML_ASSERT_OK(simil_index_save(b, path));
    off_t size_b = file_size(path);
    double t1 = now_seconds();
    SML_ASSERT_OK(simil_index_save(a, path));
    off_t size_a = file_size(path);
    double save = (now_seconds() - t0) / 2;
    printf("seed %llu, %d trials; files: A %lld bytes, B %lld bytes; one save takes %.1f ms "
           "(B %.1f ms)\n",
           (unsigned long long)seed, trials, (long long)size_a, (long long)size_b, 1e3 * save,
           1e3 * (t1 - t0));

    int was_b = 0, outcomes[2][2] = {{0, 0}, {0, 0}}, leftovers[2] = {0, 0};
    double delay_min = 1e9, delay_max = 0;
    for (int trial = 0; trial < trials; trial++) {
        double delay = 3.0 * save * (double)(next_random(&seed) >> 11) * 0x1p-53;
        delay_min = delay < delay_min ? delay : delay_min;
        delay_max = delay > delay_max ? delay : delay_max;
        int pipe_fd[2];
        assert_int_equal(pipe(pipe_fd), 0);
        fflush(stdout);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(pipe_fd[0]);
            child_main(pipe_fd[1], trial % 2 ? b : a, trial % 2 ? a : b, path);
        }
        close(pipe_fd[1]);
        char go;
        assert_int_equal(read(pipe_fd[0], &go, 1), 1);
        close(pipe_fd[0]);
        struct timespec pause = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
        while (nanosleep(&pause, &pause) != 0 && errno == EINTR) continue;
        assert_int_equal(kill(pid, SIGKILL), 0);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL))
            fail_msg("trial %d: the saving child ended on its own (status %d)", trial, status);

        simil_index *loaded = NULL;
        simil_status s = simil_index_load(&loaded, path, "cpu");
        if (s != SIMIL_OK)
            fail_msg("trial %d (seed %llu, delay %.2f ms): the file does not load: %s (%s)",
                     trial, (unsigned long long)seed, 1e3 * delay, simil_status_name(s),
                     simil_last_error());
        int is_b = identify(loaded, "the file", trial, seed);
        simil_index_destroy(loaded);
        off_t size = file_size(path);
        if (size != (is_b ? size_b : size_a))
            fail_msg("trial %d: the file has %lld bytes, but holds %s (%lld bytes)", trial,
                     (long long)size, is_b ? "B" : "A", (long long)(is_b ? size_b : size_a));
        outcomes[was_b][is_b]++;
        was_b = is_b;
        sweep_temp_files(folder, "crash.sidx", trial, seed, leftovers);
    }
    printf("%d kills, delays %.2f to %.2f ms: the file held A %d times and B %d times "
           "(unchanged %d, replaced %d), never anything else; %d temporary files were left "
           "behind: %d cut short and refused as corrupt, %d complete\n",
           trials, 1e3 * delay_min, 1e3 * delay_max, outcomes[0][0] + outcomes[1][0],
           outcomes[0][1] + outcomes[1][1], outcomes[0][0] + outcomes[1][1],
           outcomes[0][1] + outcomes[1][0], leftovers[0] + leftovers[1], leftovers[0],
           leftovers[1]);
    /* The delays cover three saves, so with enough trials both must occur. */
    if (trials >= 20) {
        assert_true(outcomes[0][0] + outcomes[1][0] > 0);
        assert_true(outcomes[0][1] + outcomes[1][1] > 0);
    }
    simil_index_destroy(a);
    simil_index_destroy(b);
    free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_kill_during_save)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
