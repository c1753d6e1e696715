/* fastboot: preloaded into test servers only; makes a server quick to start and bound to its harness.
 * (The start-up's clock calibration is the frozen clock's business: frozen_clock.c.)
 *
 * 1. The server dies with the process that started it (PR_SET_PDEATHSIG), so a harness killed
 *    with SIGKILL leaves no server behind, without a pre-exec hook in the harness (which would
 *    force a slow fork of the whole Python process instead of posix_spawn).
 *
 * 2. Readiness without polling: when DIFFTEST_READY_FD names a pipe, the server writes one byte to
 *    it (and closes it) at its first wait for events after it listens on its unix socket (when it
 *    has loaded its data: Valkey 9 listens before it loads the AOF), so the harness blocks on the
 *    pipe instead of polling for the socket file, and its first PING is answered (measured: one
 *    PING a start instead of two, and a client made once). A server that dies first closes the
 *    pipe: the harness reads its end.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

static int ready_fd = -1;
static int listening = 0; /* the server listens on its unix socket */

__attribute__((constructor)) static void die_with_parent(void) {
    /* DIFFTEST_PARENT_PID guards the race where the parent died before this ran */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const char *parent = getenv("DIFFTEST_PARENT_PID");
    if (parent != NULL && getppid() != (pid_t)atoi(parent)) {
        _exit(1);
    }
    const char *ready = getenv("DIFFTEST_READY_FD");
    if (ready != NULL) {
        ready_fd = atoi(ready);
        unsetenv("DIFFTEST_READY_FD");
        if (fcntl(ready_fd, F_SETFD, FD_CLOEXEC) != 0) {
            ready_fd = -1;
        }
    }
}

int listen(int fd, int backlog) {
    static int (*real_listen)(int, int) = NULL;
    if (real_listen == NULL) {
        real_listen = (int (*)(int, int))dlsym(RTLD_NEXT, "listen");
    }
    int rc = real_listen(fd, backlog);
    if (rc == 0 && ready_fd >= 0) {
        struct sockaddr_storage address;
        socklen_t length = sizeof address;
        if (getsockname(fd, (struct sockaddr *)&address, &length) == 0 && address.ss_family == AF_UNIX) {
            listening = 1;
        }
    }
    return rc;
}

/* The first wait for events after the server listens: it has loaded its data and serves. (A long
 * AOF load also waits for events now and then, to answer LOADING: the harness's PING retries.) */
int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout) {
    static int (*real_epoll_wait)(int, struct epoll_event *, int, int) = NULL;
    if (real_epoll_wait == NULL) {
        real_epoll_wait = (int (*)(int, struct epoll_event *, int, int))dlsym(RTLD_NEXT, "epoll_wait");
    }
    if (listening && ready_fd >= 0) {
        char byte = 'L';
        (void)!write(ready_fd, &byte, 1);
        close(ready_fd);
        ready_fd = -1;
    }
    return real_epoll_wait(epfd, events, maxevents, timeout);
}
