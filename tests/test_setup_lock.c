/*
 * scripts/setup.sh waits for the package manager's locks: a child process
 * holds an fcntl write lock (as dpkg and apt do) on a file of the test's
 * own, named to the script by KVLM_SETUP_LOCKS, so the real package
 * manager is never touched. While the lock is held, `setup.sh --wait-lock`
 * with a wait of 1 second says it is waiting, then exits 1 naming the file
 * and the holder's process id; once the holder is gone it exits 0. A lock
 * file that does not exist counts as free. What the script waits for is
 * checked, never how long it took.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

/* Runs setup.sh --wait-lock with the lock list; returns its exit status,
 * *out what it printed (stdout and stderr). */
static int wait_lock(const char *locks, char **out) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "KVLM_SETUP_LOCKS='%s' KVLM_SETUP_LOCK_WAIT=1 sh scripts/setup.sh --wait-lock 2>&1", locks);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t k;
    while ((k = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += k;
        if (n + 1 == cap) {
            buf = realloc(buf, cap *= 2);
            assert_non_null(buf);
        }
    }
    buf[n] = 0;
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_waits_then_names_holder(void **state) {
    (void)state;
    char *dir = th_tempdir();
    char lock[1024], locks[2100];
    snprintf(lock, sizeof lock, "%s/lock-frontend", dir);
    snprintf(locks, sizeof locks, "%s %s/absent", lock, dir);
    assert_int_equal(th_write_file(lock, "", 0), 0);

    int ready[2], release[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(release), 0);
    pid_t holder = fork();
    assert_true(holder >= 0);
    if (holder == 0) { /* holds the lock until the parent closes `release` */
        close(ready[0]);
        close(release[1]);
        int fd = open(lock, O_RDWR);
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        char c = fd >= 0 && fcntl(fd, F_SETLK, &fl) == 0 ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1) _exit(1);
        while (read(release[0], &c, 1) > 0) {
        }
        _exit(0);
    }
    close(ready[1]);
    close(release[0]);
    char c = 0;
    assert_int_equal(read(ready[0], &c, 1), 1);
    assert_int_equal(c, 'y');

    char *out = NULL, want[1200];
    assert_int_equal(wait_lock(locks, &out), 1);
    if (!strstr(out, "setup: waiting up to 1s for the package manager:")) fail_msg("no waiting line:\n%s", out);
    snprintf(want, sizeof want, "%s held by process %d ", lock, (int)holder);
    if (!strstr(out, want)) fail_msg("no '%s' in:\n%s", want, out);
    if (!strstr(out, "setup: the package manager is still busy after 1s:")) fail_msg("no failure line:\n%s", out);
    if (strstr(out, "absent held")) fail_msg("a missing lock file reported as held:\n%s", out);
    free(out);

    close(release[1]); /* the holder exits, its lock goes with it */
    int st = 0;
    assert_int_equal(waitpid(holder, &st, 0), holder);
    assert_int_equal(wait_lock(locks, &out), 0);
    if (!strstr(out, "setup: the package manager's locks are free")) fail_msg("not free:\n%s", out);
    if (strstr(out, "waiting")) fail_msg("waited for a free lock:\n%s", out);
    free(out);
    close(ready[0]);
    th_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_waits_then_names_holder)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
