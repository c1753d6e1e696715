/* fastboot: preloaded into test servers only; makes a server quick to start and bound to its harness.
 *
 * 1. The server dies with the process that started it (PR_SET_PDEATHSIG), so a harness killed
 *    with SIGKILL leaves no server behind, without a pre-exec hook in the harness (which would
 *    force a slow fork of the whole Python process instead of posix_spawn).
 *
 * 2. Valkey 9 calibrates its monotonic clock by sleeping 10 ms three times (usleep(10000)) before
 * anything else; that is most of a server start (~35 ms), and difftest restarts servers often.
 * The first three usleep(10000) calls become 1 ms sleeps: the calibration still measures ticks
 * over a real interval (accuracy ~0.1%, used only for timeouts and cron, never for the frozen
 * wall clock the transitions read). Every later call is passed through unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

__attribute__((constructor)) static void die_with_parent(void) {
    /* DIFFTEST_PARENT_PID guards the race where the parent died before this ran */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const char *parent = getenv("DIFFTEST_PARENT_PID");
    if (parent != NULL && getppid() != (pid_t)atoi(parent)) {
        _exit(1);
    }
}

static int shortened = 0;

int usleep(useconds_t usec) {
    static int (*real_usleep)(useconds_t) = NULL;
    if (real_usleep == NULL) {
        real_usleep = (int (*)(useconds_t))dlsym(RTLD_NEXT, "usleep");
    }
    if (usec == 10000 && shortened < 3) {
        shortened++;
        usec = 1000;
    }
    return real_usleep(usec);
}
