/* The server's small utilities: clocks, a growable byte buffer, JSON strings
 * from bytes (buf.c).  Nothing here knows HTTP or a model. */
#ifndef KILN_SERVER_BUF_H
#define KILN_SERVER_BUF_H

#include <jansson.h>
#include <stddef.h>

double server_now(void);  /* monotonic seconds */
double server_wall(void); /* Unix time in seconds */

/* ---- growable byte buffer ---- */
typedef struct server_buf {
    char *p;
    size_t len, cap;
    int failed; /* an append found no memory: the contents are incomplete */
} server_buf;
/* Appends s[0..n) (kept NUL-terminated); -1 when there is no memory for
 * it, and then b->failed stays set until server_buf_free, so whoever sends
 * the buffer answers with an error instead of a cut text. */
int server_buf_put(server_buf *b, const char *s, size_t n);
void server_buf_puts(server_buf *b, const char *s);
void server_buf_printf(server_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends j serialized compactly (and frees nothing). */
void server_buf_json(server_buf *b, const json_t *j);
void server_buf_free(server_buf *b);
/* A JSON string of s[0..n); invalid UTF-8 bytes become U+FFFD. */
json_t *server_jstr(const char *s, size_t n);
/* Length of the longest suffix of s[0..n) that is a proper prefix of t
 * (text to hold back while t may still be arriving). */
size_t server_partial_suffix(const char *s, size_t n, const char *t);

#endif
