/* difftest-init: PID 1 of a server container; restarts valkey-server inside it on request.
 *
 * A restart of a server need not be a restart of its container (docker stop/start costs hundreds
 * of ms): this init starts `argv[1] argv[2...]` (the server and its arguments) and, when
 * DIFFTEST_INIT_SOCKET names a path, listens there for one-byte requests from the harness:
 *
 *   'r'  restart: the harness sends SHUTDOWN to the server itself; when the server has exited, a new
 *        one is started (a new process: a new run_id, the AOF loaded again)
 *   'k'  crash: the server gets SIGKILL, then a new one is started
 *
 * and answers "ok\n" once the new server listens on its socket (with DIFFTEST_INIT_READY set, the
 * server preloads the fastboot shim, which writes a byte to the pipe named by DIFFTEST_READY_FD
 * then; otherwise as soon as it is started). DIFFTEST_SERVER_PRELOAD is the server's LD_PRELOAD
 * (the clock library and the shim: the init itself runs on the real clock).
 * A request arrives before the exit it announces (a unix socket queues the byte at send time), and
 * requests are read before an exit is judged, so an announced exit is never taken for a stop.
 *
 * Otherwise it behaves as the server would as PID 1: SIGTERM and SIGINT are passed on, and when the
 * server exits unannounced (SHUTDOWN, a crash of the module, a signal) the init exits with the
 * server's status, and the container stops. It reaps every child (orphans of a dead server too).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_PEERS 8

static char **server_argv;
static pid_t server = -1;
static int pending_restart = 0;  /* requests announced, not yet served: 'r' or 'k' */
static int waiting_peer = -1;    /* who asked, answered once the new server listens */
static int use_ready = 0;        /* DIFFTEST_INIT_READY: the server preloads the fastboot shim */
static const char *server_preload = NULL;  /* DIFFTEST_SERVER_PRELOAD: LD_PRELOAD of the server only */

static void answer(int status_ok) {
    if (waiting_peer >= 0) {
        const char *text = status_ok ? "ok\n" : "no\n";
        (void)!write(waiting_peer, text, strlen(text));
        waiting_peer = -1;
    }
}

static void die(const char *what) {
    fprintf(stderr, "difftest-init: %s: %s\n", what, strerror(errno));
    exit(111);
}

/* Start the server; returns the read end of its readiness pipe (-1 when there is none: then the
 * requester is answered at once). */
static int start_server(void) {
    int ready[2] = {-1, -1};
    if (use_ready && pipe(ready) != 0) die("pipe");
    char fd_text[16];
    snprintf(fd_text, sizeof fd_text, "%d", ready[1]);
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (use_ready) {
            close(ready[0]);
            setenv("DIFFTEST_READY_FD", fd_text, 1);
        }
        if (server_preload != NULL) setenv("LD_PRELOAD", server_preload, 1);
        execv(server_argv[0], server_argv);
        fprintf(stderr, "difftest-init: exec %s: %s\n", server_argv[0], strerror(errno));
        _exit(127);
    }
    server = child;
    if (!use_ready) {
        answer(1);
        return -1;
    }
    close(ready[1]);
    return ready[0];
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: difftest-init SERVER [ARG...]\n");
        return 2;
    }
    server_argv = argv + 1;
    use_ready = getenv("DIFFTEST_INIT_READY") != NULL;
    server_preload = getenv("DIFFTEST_SERVER_PRELOAD");
    sigset_t handled;
    sigemptyset(&handled);
    sigaddset(&handled, SIGCHLD);
    sigaddset(&handled, SIGTERM);
    sigaddset(&handled, SIGINT);
    sigprocmask(SIG_BLOCK, &handled, NULL);
    int signals = signalfd(-1, &handled, SFD_CLOEXEC);
    if (signals < 0) die("signalfd");

    int listener = -1;
    const char *path = getenv("DIFFTEST_INIT_SOCKET");
    if (path != NULL && *path) {
        struct sockaddr_un address = {.sun_family = AF_UNIX};
        strncpy(address.sun_path, path, sizeof address.sun_path - 1);
        unlink(path);
        listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (listener < 0) die("socket");
        if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0) die("bind");
        chmod(path, 0777);
        if (listen(listener, 4) != 0) die("listen");
        unsetenv("DIFFTEST_INIT_SOCKET");
    }

    int ready = start_server();
    int peers[MAX_PEERS];
    int npeers = 0;
    for (;;) {
        struct pollfd fds[3 + MAX_PEERS];
        int n = 0;
        fds[n++] = (struct pollfd){.fd = signals, .events = POLLIN};
        fds[n++] = (struct pollfd){.fd = listener, .events = POLLIN};  /* -1: ignored */
        fds[n++] = (struct pollfd){.fd = ready, .events = POLLIN};     /* -1: ignored */
        for (int i = 0; i < npeers; i++) fds[n++] = (struct pollfd){.fd = peers[i], .events = POLLIN};
        if (poll(fds, n, -1) < 0) {
            if (errno == EINTR) continue;
            die("poll");
        }
        if (fds[1].revents & POLLIN) {
            int peer = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
            if (peer >= 0) {
                if (npeers < MAX_PEERS) peers[npeers++] = peer;
                else close(peer);
            }
        }
        /* requests first: one that announces an exit is read before that exit is judged */
        for (int i = 0; i < npeers; i++) {
            char request;
            ssize_t got = recv(peers[i], &request, 1, MSG_DONTWAIT);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                if (waiting_peer == peers[i]) waiting_peer = -1;
                close(peers[i]);
                peers[i--] = peers[--npeers];
                continue;
            }
            if (got != 1) continue;
            if (request == 'k' || request == 'r') {
                pending_restart = request;
                waiting_peer = peers[i];
                if (request == 'k' && server > 0) kill(server, SIGKILL);
            }
        }
        if (fds[2].revents & (POLLIN | POLLHUP | POLLERR)) {
            close(ready);
            ready = -1;
            answer(1);  /* the server listens (or died first: the harness's PING finds out) */
        }
        if (fds[0].revents & POLLIN) {
            struct signalfd_siginfo info;
            if (read(signals, &info, sizeof info) == sizeof info) {
                if (info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT) {
                    if (server > 0) kill(server, (int)info.ssi_signo);
                }
                if (info.ssi_signo != SIGCHLD) continue;
                int status;
                pid_t gone;
                while ((gone = waitpid(-1, &status, WNOHANG)) > 0) {
                    if (gone != server) continue;  /* an orphan reaped */
                    server = -1;
                    if (pending_restart) {
                        pending_restart = 0;
                        if (ready >= 0) close(ready);
                        ready = start_server();
                    } else {
                        answer(0);
                        if (WIFEXITED(status)) return WEXITSTATUS(status);
                        return 128 + WTERMSIG(status);
                    }
                }
            }
        }
    }
}
