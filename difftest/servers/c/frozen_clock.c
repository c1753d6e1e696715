/* frozen_clock: preloaded into every test server; its wall clock is a number the harness writes.
 *
 * DIFFTEST_CLOCK_FILE names a file of 8 bytes: the frozen time in milliseconds since the epoch, a
 * little-endian int64 that the harness moves with one aligned store into its own shared mapping of
 * the same file. This library maps it read-only at load, and answers every wall-clock call from it:
 * gettimeofday, clock_gettime(CLOCK_REALTIME, CLOCK_REALTIME_COARSE) and time() read the mapped
 * number, exactly (no microseconds of drift). A store is visible to the server's next call: no file
 * is read, no call is cached. The monotonic clocks stay real, so the event loop and its timers run.
 *
 * Valkey 9 reads the wall clock at most once a millisecond when its monotonic clock is the x86
 * TSC: ustime() adds TSC ticks to the last reading for up to 999 us, so a clock moved within that
 * millisecond would go unseen. It takes the TSC only when /proc/cpuinfo says `constant_tsc`; here
 * that file cannot be opened, the server falls back to clock_gettime(CLOCK_MONOTONIC), and then
 * ustime() reads the wall clock on every call. The TSC's calibration (three usleep(10000) before the
 * file is read) is then measured for nothing: those three sleeps return at once.
 *
 * Without DIFFTEST_CLOCK_FILE every call passes through unchanged. A file that cannot be mapped
 * stops the process at once (exit 112, one line on stderr): a server on the real clock would make
 * every history's scores wrong, silently.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define CPUINFO "/proc/cpuinfo"
#define CALIBRATION_SLEEP_US 10000
#define CALIBRATION_SLEEPS 3

static volatile const int64_t *frozen_ms = NULL; /* the harness's number, mapped */
static int calibration_sleeps_skipped = 0;

static void refuse(const char *what, const char *path) {
    fprintf(stderr, "frozen_clock: cannot %s the clock file %s: %s\n", what, path, strerror(errno));
    _exit(112);
}

__attribute__((constructor)) static void map_clock(void) {
    const char *path = getenv("DIFFTEST_CLOCK_FILE");
    if (path == NULL) {
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        refuse("open", path);
    }
    void *page = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    if (page == MAP_FAILED) {
        refuse("map", path);
    }
    close(fd);
    frozen_ms = (volatile const int64_t *)page;
}

/* One load of an aligned int64: the harness's store is never seen half-written. */
static int64_t now_ms(void) { return *frozen_ms; }

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    static int (*real)(struct timeval *restrict, void *restrict) = NULL;
    if (frozen_ms != NULL) {
        int64_t ms = now_ms();
        tv->tv_sec = (time_t)(ms / 1000);
        tv->tv_usec = (suseconds_t)(ms % 1000) * 1000;
        return 0;
    }
    if (real == NULL) {
        real = (int (*)(struct timeval *restrict, void *restrict))dlsym(RTLD_NEXT, "gettimeofday");
    }
    return real(tv, tz);
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *) = NULL;
    if (frozen_ms != NULL && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        int64_t ms = now_ms();
        ts->tv_sec = (time_t)(ms / 1000);
        ts->tv_nsec = (long)(ms % 1000) * 1000000L;
        return 0;
    }
    if (real == NULL) {
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    }
    return real(clock, ts);
}

time_t time(time_t *out) {
    static time_t (*real)(time_t *) = NULL;
    if (frozen_ms != NULL) {
        time_t seconds = (time_t)(now_ms() / 1000);
        if (out != NULL) {
            *out = seconds;
        }
        return seconds;
    }
    if (real == NULL) {
        real = (time_t (*)(time_t *))dlsym(RTLD_NEXT, "time");
    }
    return real(out);
}

/* /proc/cpuinfo cannot be opened: the server takes the monotonic clock that reads the wall clock
 * at every call (see the top). Nothing else a server does reads that file. */
static FILE *open_file(const char *symbol, const char *path, const char *mode) {
    if (frozen_ms != NULL && strcmp(path, CPUINFO) == 0) {
        errno = EACCES;
        return NULL;
    }
    FILE *(*real)(const char *, const char *) = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, symbol);
    return real(path, mode);
}

FILE *fopen(const char *path, const char *mode) { return open_file("fopen", path, mode); }

FILE *fopen64(const char *path, const char *mode) { return open_file("fopen64", path, mode); }

int usleep(useconds_t usec) {
    static int (*real)(useconds_t) = NULL;
    if (frozen_ms != NULL && usec == CALIBRATION_SLEEP_US && calibration_sleeps_skipped < CALIBRATION_SLEEPS) {
        calibration_sleeps_skipped++;
        return 0;
    }
    if (real == NULL) {
        real = (int (*)(useconds_t))dlsym(RTLD_NEXT, "usleep");
    }
    return real(usec);
}
