/* The server's small utilities: clocks, a growable byte buffer, JSON strings
 * from bytes (buf.c).  Nothing here knows HTTP or a model. */
#ifndef KILN_SERVER_BUF_H
#define KILN_SERVER_BUF_H

#include <jansson.h>
#include <stddef.h>

double ks_now(void);  /* monotonic seconds */
double ks_wall(void); /* Unix time in seconds */

/* ---- growable byte buffer ---- */
typedef struct ks_buf {
    char *p;
    size_t len, cap;
    int failed; /* an append found no memory: the contents are incomplete */
} ks_buf;
/* Appends s[0..n) (kept NUL-terminated); -1 when there is no memory for
 * it, and then b->failed stays set until ks_buf_free, so whoever sends
 * the buffer answers with an error instead of a cut text. */
int ks_buf_put(ks_buf *b, const char *s, size_t n);
void ks_buf_puts(ks_buf *b, const char *s);
void ks_buf_printf(ks_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends j serialized compactly (and frees nothing). */
void ks_buf_json(ks_buf *b, const json_t *j);
void ks_buf_free(ks_buf *b);
/* A JSON string of s[0..n); invalid UTF-8 bytes become U+FFFD. */
json_t *ks_jstr(const char *s, size_t n);
/* Length of the longest suffix of s[0..n) that is a proper prefix of t
 * (text to hold back while t may still be arriving). */
size_t ks_partial_suffix(const char *s, size_t n, const char *t);

#endif
