/* Minimal test helpers shared by the test executables.  A failed CHECK
 * prints file:line and the expression, counts a failure and goes on; the
 * test's main returns t_done(), non-zero when anything failed. */
#ifndef KILN_TESTUTIL_H
#define KILN_TESTUTIL_H

#include <stddef.h>
#include <stdio.h>

extern int t_failures;
extern int t_checks;

#define CHECK(cond) do { t_checks++; if (!(cond)) { t_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECKF(cond, ...) do { t_checks++; if (!(cond)) { t_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* Prints "N passed, M failed" and returns the exit status. */
int t_done(void);
/* Reads a whole file; returns malloc'd bytes (NUL-terminated) or NULL. */
char *t_read_file(const char *path, size_t *len);

#endif
