/*
 * The POSIX forms of the close-on-exec / non-blocking descriptors
 * (src/server/posix_fd.h), which macOS builds take and Linux builds take
 * only with KVLM_POSIX_ONLY: defined here before the header, so these are
 * the fcntl forms whatever the system. Each descriptor must come back
 * with FD_CLOEXEC, O_NONBLOCK exactly when asked for, and work: a pipe
 * carries a byte, a listening socket accepts a connection.
 */
#define KVLM_POSIX_ONLY 1

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "server/posix_fd.h"

static int cloexec(int fd) { return (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0; }
static int nonblock(int fd) { return (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0; }

static void test_fallback_chosen(void **state) {
    (void)state;
    assert_int_equal(KVLM_FD_LINUX, 0);
}

static void test_pipe(void **state) {
    (void)state;
    int p[2] = {-1, -1};
    assert_int_equal(pipe_cloexec(p), 0);
    assert_true(cloexec(p[0]) && cloexec(p[1]));
    assert_false(nonblock(p[0]) || nonblock(p[1]));
    assert_int_equal(write(p[1], "k", 1), 1);
    char c = 0;
    assert_int_equal(read(p[0], &c, 1), 1);
    assert_int_equal(c, 'k');
    close(p[0]), close(p[1]);
}

static void test_sockets(void **state) {
    (void)state;
    const int l = socket_cloexec(AF_INET, SOCK_STREAM, 0);
    assert_true(l >= 0);
    assert_true(cloexec(l));
    assert_false(nonblock(l));
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(l, 4), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
    const int c = socket_cloexec(AF_INET, SOCK_STREAM, 1);
    assert_true(c >= 0);
    assert_true(cloexec(c) && nonblock(c));
    const int r = connect(c, (struct sockaddr *)&a, sizeof a);
    assert_true(r == 0 || errno == EINPROGRESS);
    const int s = accept_cloexec(l);
    assert_true(s >= 0);
    assert_true(cloexec(s));
    close(s), close(c), close(l);
    /* a failed call reports -1 and sets no flags on anything */
    assert_int_equal(accept_cloexec(-1), -1);
    assert_int_equal(errno, EBADF);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fallback_chosen),
        cmocka_unit_test(test_pipe),
        cmocka_unit_test(test_sockets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
