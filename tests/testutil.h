/* Minimal test helpers shared by the test executables.  A failed CHECK
 * prints file:line and the expression, counts a failure and goes on; the
 * test's main returns t_done(), non-zero when anything failed. */
#ifndef KILN_TESTUTIL_H
#define KILN_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern int t_failures;
extern int t_checks;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        t_checks++;                                                                  \
        if (!(cond)) {                                                               \
            t_failures++;                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)
#define CHECKF(cond, ...)                                                            \
    do {                                                                             \
        t_checks++;                                                                  \
        if (!(cond)) {                                                               \
            t_failures++;                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
        }                                                                            \
    } while (0)

/* Prints "N passed, M failed" and returns the exit status. */
int t_done(void);
/* Reads a whole file; returns malloc'd bytes (NUL-terminated) or NULL. */
char *t_read_file(const char *path, size_t *len);
/* The cosine between a (float) and the reference b (double) over n values,
 * in double. */
double t_cosine(const float *a, const double *b, int n);
/* The largest |a[i] - b[i]| over n values. */
double t_max_diff(const float *a, const float *b, int n);
/* The pixels of a PNG in memory (RGB, 8 bits; malloc'd) and its size;
 * NULL when it does not decode. */
uint8_t *t_png_pixels(const uint8_t *png, size_t len, int *w, int *h);
/* Runs the shell command cmd with its stdout and stderr in dir/out.txt and
 * dir/err.txt, and returns them (malloc'd; NULL when unreadable) with the
 * exit status (-1 when the command did not exit). */
int t_run_capture(const char *cmd, const char *dir, char **out, char **err);
/* Writes a copy of the GGUF model src with a ChatML chat template to dst,
 * for chat tests.  0, or -1 when src cannot be read or dst written. */
int t_write_chat_model(const char *src, const char *dst);
/* t_write_chat_model with the chat template tmpl */
int t_write_chat_model_with(const char *src, const char *dst, const char *tmpl);

#endif
