/* fastboot: preloaded into test servers only; makes a server quick to start and bound to its harness.
 * (The start-up's clock calibration is the frozen clock's business: frozen_clock.c.)
 *
 * 1. The server dies with the process that started it (PR_SET_PDEATHSIG), so a harness killed
 *    with SIGKILL leaves no server behind, without a pre-exec hook in the harness (which would
 *    force a slow fork of the whole Python process instead of posix_spawn).
 *
 * 2. Readiness without polling: when DIFFTEST_READY_FD names a pipe, the server writes one byte to
 *    it (and closes it) at its first wait for events that may block after it listens on its unix
 *    socket: its event loop's, once it has loaded its data. Valkey 9 listens before it loads the
 *    AOF, and the load polls for events without waiting (a timeout of 0) from its first command on,
 *    to answer LOADING: a byte at that poll sent the harness's first PING into LOADING at nearly
 *    every start (279 of 311). So the harness blocks on the pipe instead of polling for the socket
 *    file, and its first PING is answered. A server that dies first closes the pipe: the harness
 *    reads its end.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int ready_fd = -1;
static int listening = 0; /* the server listens on its unix socket */

/* What the zygote says on its socket: a child started ('s', with a pidfd), or a child's exit ('x',
 * the wait status). One message each: the harness reads them as they come. */
struct zygote_message {
    char kind;
    int32_t pid;
    int32_t status;
};

static void say(int control, char kind, pid_t pid, int status, int pidfd) {
    struct zygote_message message = {kind, (int32_t)pid, (int32_t)status};
    struct iovec payload = {&message, sizeof message};
    union {
        char buffer[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control_data;
    struct msghdr header = {0};
    header.msg_iov = &payload;
    header.msg_iovlen = 1;
    if (pidfd >= 0) {
        memset(&control_data, 0, sizeof control_data);
        header.msg_control = control_data.buffer;
        header.msg_controllen = sizeof control_data.buffer;
        struct cmsghdr *rights = CMSG_FIRSTHDR(&header);
        rights->cmsg_level = SOL_SOCKET;
        rights->cmsg_type = SCM_RIGHTS;
        rights->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(rights), &pidfd, sizeof(int));
    }
    while (sendmsg(control, &header, MSG_NOSIGNAL) < 0 && errno == EINTR) {
    }
}

/* A request: one byte, and two descriptors (the readiness pipe's write end, the stderr to use). */
static int receive(int control, int fds[2]) {
    char byte;
    struct iovec payload = {&byte, 1};
    union {
        char buffer[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } control_data;
    struct msghdr header = {0};
    header.msg_iov = &payload;
    header.msg_iovlen = 1;
    header.msg_control = control_data.buffer;
    header.msg_controllen = sizeof control_data.buffer;
    ssize_t got;
    while ((got = recvmsg(control, &header, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
    }
    if (got <= 0) {
        return -1; /* the harness closed its end */
    }
    struct cmsghdr *rights = CMSG_FIRSTHDR(&header);
    if (rights == NULL || rights->cmsg_type != SCM_RIGHTS || rights->cmsg_len != CMSG_LEN(2 * sizeof(int))) {
        return -1;
    }
    memcpy(fds, CMSG_DATA(rights), 2 * sizeof(int));
    return 0;
}

/* Returns only in a child, which then goes on into main(). */
static void be_zygote(int control) {
    sigset_t chld, before;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &before);
    int exits = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    pid_t zygote = getpid();
    for (;;) {
        struct pollfd waiting[2] = {{control, POLLIN, 0}, {exits, POLLIN, 0}};
        if (poll(waiting, 2, -1) < 0) {
            continue; /* EINTR */
        }
        if (waiting[1].revents) {
            struct signalfd_siginfo drained;
            while (read(exits, &drained, sizeof drained) > 0) {
            }
            int status;
            pid_t gone;
            while ((gone = waitpid(-1, &status, WNOHANG)) > 0) {
                say(control, 'x', gone, status, -1);
            }
        }
        if (!waiting[0].revents) {
            continue;
        }
        int fds[2];
        if (receive(control, fds) != 0) {
            _exit(0);
        }
        pid_t child = fork();
        if (child == 0) {
            close(control);
            close(exits);
            sigprocmask(SIG_SETMASK, &before, NULL);
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* cleared by fork: it dies with the zygote */
            if (getppid() != zygote) {
                _exit(1);
            }
            dup2(fds[1], STDERR_FILENO);
            close(fds[1]);
            ready_fd = fds[0]; /* close-on-exec already */
            return;
        }
        int pidfd = child > 0 ? (int)syscall(SYS_pidfd_open, child, 0) : -1;
        say(control, 's', child, child > 0 ? 0 : errno, pidfd);
        if (pidfd >= 0) {
            close(pidfd);
        }
        close(fds[0]);
        close(fds[1]);
    }
}

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
    const char *zygote = getenv("DIFFTEST_ZYGOTE_FD");
    if (zygote != NULL) {
        int control = atoi(zygote);
        unsetenv("DIFFTEST_ZYGOTE_FD");
        unsetenv("DIFFTEST_PARENT_PID");
        if (fcntl(control, F_SETFD, FD_CLOEXEC) != 0) {
            _exit(1);
        }
        be_zygote(control);
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

/* The first wait for events that may block, after the server listens: its event loop's, so it has
 * loaded its data and serves (the load's own polls never block: see 2 above). */
int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout) {
    static int (*real_epoll_wait)(int, struct epoll_event *, int, int) = NULL;
    if (real_epoll_wait == NULL) {
        real_epoll_wait = (int (*)(int, struct epoll_event *, int, int))dlsym(RTLD_NEXT, "epoll_wait");
    }
    if (listening && ready_fd >= 0 && timeout != 0) {
        char byte = 'L';
        (void)!write(ready_fd, &byte, 1);
        close(ready_fd);
        ready_fd = -1;
    }
    return real_epoll_wait(epfd, events, maxevents, timeout);
}
