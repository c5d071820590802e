/* Clocks, the growable byte buffer and JSON strings from bytes. */
#include "server/buf.h"

#include "base/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double server_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double server_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int server_buf_put(server_buf *b, const char *s, size_t n) {
    if (b->failed) return -1;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1) nc *= 2;
        char *np = base_realloc(b->p, nc);
        if (!np) {
            b->failed = 1;
            return -1;
        }
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

void server_buf_puts(server_buf *b, const char *s) { server_buf_put(b, s, strlen(s)); }

void server_buf_printf(server_buf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        server_buf_put(b, tmp, (size_t)n);
        return;
    }
    char *big = base_malloc((size_t)n + 1);
    if (!big) {
        b->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    server_buf_put(b, big, (size_t)n);
    free(big);
}

void server_buf_json(server_buf *b, const json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY);
    if (s)
        server_buf_puts(b, s);
    else
        b->failed = 1;
    free(s);
}

void server_buf_free(server_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

size_t server_partial_suffix(const char *s, size_t n, const char *t) {
    size_t tl = strlen(t);
    for (size_t k = tl - 1 < n ? tl - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, t, k)) return k;
    return 0;
}

json_t *server_jstr(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j) return j;
    server_buf b = {0};
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = k && i + k <= n && c != 0;
        for (size_t t = 1; ok && t < k; t++) ok = ((unsigned char)s[i + t] >> 6) == 2;
        if (ok && k > 1) { /* overlong forms and surrogates fail here */
            json_t *t = json_stringn(s + i, k);
            ok = t != NULL;
            json_decref(t);
        }
        if (ok) {
            server_buf_put(&b, s + i, k);
            i += k;
        } else {
            server_buf_puts(&b, "\xef\xbf\xbd");
            i++;
        }
    }
    j = json_stringn(b.p ? b.p : "", b.len);
    server_buf_free(&b);
    return j ? j : json_string("");
}
