/*
 * Sockets and pipes with close-on-exec (and, on request, non-blocking)
 * set. Where the system has the Linux forms (SOCK_CLOEXEC, SOCK_NONBLOCK,
 * accept4, pipe2) each is one call; elsewhere (macOS, the other BSDs
 * without them) the descriptor is made by the POSIX call and its flags
 * set with fcntl after it, which leaves a short window in which a fork in
 * another thread copies the descriptor into a child without the flag.
 * Building with KVLM_POSIX_ONLY defined (make KVLM_POSIX_ONLY=1) takes the
 * fcntl forms on Linux too, so they are built and tested there
 * (tests/test_posix_fd.c takes them always). Each returns the descriptor
 * (pipe_cloexec: 0) or -1 with errno set, and closes what it made when a
 * flag cannot be set.
 */
#ifndef KVLM_SERVER_POSIX_FD_H
#define KVLM_SERVER_POSIX_FD_H

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#if defined(__linux__) && defined(SOCK_CLOEXEC) && defined(SOCK_NONBLOCK) && !defined(KVLM_POSIX_ONLY)
#define KVLM_FD_LINUX 1
#else
#define KVLM_FD_LINUX 0
#endif

/* FD_CLOEXEC on fd, and O_NONBLOCK when nonblock; on failure fd is closed. */
static inline int posix_fd_flags(int fd, int nonblock) {
    if (fd < 0) return -1;
    const int fl = fcntl(fd, F_GETFL);
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 || fl < 0 || (nonblock && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)) {
        const int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static inline int socket_cloexec(int domain, int type, int nonblock) {
#if KVLM_FD_LINUX
    return socket(domain, type | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
#else
    return posix_fd_flags(socket(domain, type, 0), nonblock);
#endif
}

static inline int accept_cloexec(int fd) {
#if KVLM_FD_LINUX
    return accept4(fd, NULL, NULL, SOCK_CLOEXEC);
#else
    return posix_fd_flags(accept(fd, NULL, NULL), 0);
#endif
}

static inline int pipe_cloexec(int p[2]) {
#if KVLM_FD_LINUX
    return pipe2(p, O_CLOEXEC);
#else
    if (pipe(p)) return -1;
    if (posix_fd_flags(p[0], 0) < 0) {
        close(p[1]);
        return -1;
    }
    if (posix_fd_flags(p[1], 0) < 0) {
        close(p[0]);
        return -1;
    }
    return 0;
#endif
}

#endif
