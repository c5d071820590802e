/* File-system helpers of the store: hashing, atomic writes, tree removal
 * and flock-based locks. */
#include "store/store.h"

#include "base/base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

int store_path(char *buf, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, PATH_MAX, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= PATH_MAX) {
        base_fail(KILN_ERR_INVALID_ARG, "path too long");
        return -1;
    }
    return 0;
}

int store_mkdirs(const char *path) {
    char tmp[PATH_MAX];
    if (store_path(tmp, "%s", path)) return -1;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

static void fsync_dir_of(const char *path) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) return;
    *slash = 0;
    int fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int store_write_atomic(const char *path, const void *data, size_t len, mode_t mode) {
    char tmp[PATH_MAX];
    if (store_path(tmp, "%s.tmp.%ld", path, (long)getpid())) return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            unlink(tmp);
            errno = e;
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fchmod(fd, mode) != 0 || fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
        return -1;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    fsync_dir_of(path);
    return 0;
}

char *store_read_text(const char *path, size_t max, size_t *len_out) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
        close(fd);
        errno = EFBIG;
        return NULL;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf) return NULL;
    buf[got] = 0;
    if (len_out) *len_out = got;
    return buf;
}

static void to_hex(const unsigned char *d, unsigned n, char *hex) {
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < n; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[2 * n] = 0;
}

void store_sha256_hex(const void *data, size_t len, char hex[STORE_ID_LEN + 1]) {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    EVP_Digest(data, len, d, &n, EVP_sha256(), NULL);
    to_hex(d, n, hex);
}

int store_sha256_file(const char *path, char hex[STORE_ID_LEN + 1], struct stat *st_out,
                      kiln_store_progress_fn progress, void *user, const char *artifact) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!ctx || !buf || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        EVP_MD_CTX_free(ctx);
        free(buf);
        close(fd);
        errno = ENOMEM;
        return -1;
    }
    uint64_t done = 0;
    double last = 0;
    int rc = 0;
    for (;;) {
        ssize_t r = read(fd, buf, CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = -1;
            break;
        }
        if (r == 0) break;
        EVP_DigestUpdate(ctx, buf, (size_t)r);
        done += (uint64_t)r;
        double now = base_now();
        if (progress && now - last > 0.25) {
            last = now;
            kiln_store_progress p = {
                .event = "verify", .artifact = artifact, .done = done, .total = (uint64_t)st.st_size, .eta = -1};
            progress(&p, user);
        }
    }
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    if (rc == 0) {
        EVP_DigestFinal_ex(ctx, d, &n);
        to_hex(d, n, hex);
        if (st_out && fstat(fd, st_out) != 0) rc = -1;
    }
    EVP_MD_CTX_free(ctx);
    free(buf);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

static int64_t rmtree_at(int dirfd, const char *name) {
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(dirfd, name, 0) != 0) return -1;
        return S_ISREG(st.st_mode) ? (int64_t)st.st_size : 0;
    }
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    int64_t total = 0;
    int failed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        int64_t r = rmtree_at(fd, e->d_name);
        if (r < 0)
            failed = 1;
        else
            total += r;
    }
    closedir(d);
    if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0 || failed) return -1;
    return total;
}

int64_t store_rmtree(const char *path) { return rmtree_at(AT_FDCWD, path); }

static uint64_t tree_size_at(int dirfd, const char *name, double *newest) {
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return 0;
    double mt = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec * 1e-9;
    if (mt > *newest) *newest = mt;
    if (!S_ISDIR(st.st_mode)) return S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return 0;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return 0;
    }
    uint64_t total = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) total += tree_size_at(fd, e->d_name, newest);
    closedir(d);
    return total;
}

uint64_t store_tree_size(const char *path, double *newest_mtime) {
    double newest = 0;
    uint64_t n = tree_size_at(AT_FDCWD, path, &newest);
    if (newest_mtime) *newest_mtime = newest;
    return n;
}

int store_lock(const char *path, int op) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    while (flock(fd, op) != 0) {
        if (errno == EINTR && !(op & LOCK_NB)) continue;
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

void store_unlock(int fd) {
    if (fd >= 0) close(fd); /* closing the description drops the flock */
}

double store_wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
