/*
 * base — small pieces every subsystem uses: error strings, logging, clocks,
 * read-only file mappings.  No subsystem logic lives here.
 */
#ifndef KILN_BASE_H
#define KILN_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

enum { KB_LOG_ERROR = 0, KB_LOG_WARN = 1, KB_LOG_INFO = 2, KB_LOG_DEBUG = 3 };

/* Logging goes to the callback set here (stderr by default, level <= WARN). */
typedef void (*kb_log_fn)(int level, const char *msg, void *ud);
void kb_set_log(kb_log_fn fn, void *ud, int max_level);
void kb_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* snprintf into an error buffer that may be NULL. */
void kb_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Monotonic time in seconds. */
double kb_now(void);

/* 64 bits from the OS's random source (getrandom), for seeds nobody gave:
 * two calls in the same microsecond still differ. */
uint64_t kb_random_u64(void);

/* A read-only private mapping of a whole file. */
typedef struct kb_map {
    const uint8_t *addr;
    size_t len;
} kb_map;
int kb_map_file(const char *path, kb_map *m, char *err, size_t errlen);
void kb_unmap(kb_map *m);

/* Overflow-checked arithmetic: return 0 on success, -1 on overflow. */
static inline int kb_mul_u64(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_mul_overflow(a, b, r) ? -1 : 0; }
static inline int kb_add_u64(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_add_overflow(a, b, r) ? -1 : 0; }

#endif
