#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static base_log_fn g_log_fn;
static void *g_log_ud;
static int g_log_max = BASE_LOG_WARN;

void base_set_log(base_log_fn fn, void *ud, int max_level) {
    g_log_fn = fn;
    g_log_ud = ud;
    g_log_max = max_level;
}

void base_log(int level, const char *fmt, ...) {
    if (level > g_log_max) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_log_fn) {
        g_log_fn(level, msg, g_log_ud);
    } else {
        static const char *names[] = {"error", "warning", "info", "debug"};
        fprintf(stderr, "kiln: %s: %s\n", names[level < 0 ? 0 : level > 3 ? 3 : level], msg);
    }
}

void base_errf(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void base_fmt_count(double n, char *buf, size_t cap) {
    if (n >= 1e9)
        snprintf(buf, cap, "%.1fB", n / 1e9);
    else if (n >= 1e6)
        snprintf(buf, cap, "%.1fM", n / 1e6);
    else
        snprintf(buf, cap, "%.1fK", n / 1e3);
}

uint64_t base_random_u64(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) == (ssize_t)sizeof v) return v;
    /* no entropy source (a very old kernel): the clock and a counter, so
     * draws at least differ from each other */
    static _Atomic uint64_t n;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    v = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ (++n << 40);
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdULL;
    return v ^ (v >> 33);
}

double base_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

kiln_status base_map_file(const char *path, base_map *m) {
    m->addr = NULL;
    m->len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { return base_fail(KILN_ERR_IO, "%s: %s", path, strerror(errno)); }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return base_fail(KILN_ERR_FORMAT, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return base_fail(KILN_ERR_FORMAT, "%s: empty file", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return base_fail(KILN_ERR_IO, "%s: mmap failed: %s", path, strerror(e));
    m->addr = p;
    m->len = (size_t)st.st_size;
    return KILN_OK;
}

void base_unmap(base_map *m) {
    if (m->addr) munmap((void *)m->addr, m->len);
    m->addr = NULL;
    m->len = 0;
}
