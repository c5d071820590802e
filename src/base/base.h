/*
 * base — small pieces every subsystem uses: errors (error.c), allocation
 * with a fault switch for tests (alloc.c), internal invariants, logging,
 * clocks, read-only file mappings.  No subsystem logic lives here.
 */
#ifndef KILN_BASE_H
#define KILN_BASE_H

#include "kiln.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

enum { BASE_LOG_ERROR = 0, BASE_LOG_WARN = 1, BASE_LOG_INFO = 2, BASE_LOG_DEBUG = 3 };

/* Logging goes to the callback set here (stderr by default, level <= WARN). */
typedef void (*base_log_fn)(int level, const char *msg, void *ud);
void base_set_log(base_log_fn fn, void *ud, int max_level);
void base_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- errors (error.c) ----
 * The one internal convention: a call that fails returns a kiln_status
 * and has set this thread's last error (kiln_last_error) with base_fail,
 * whose message says what failed and why in one line.  base_fail returns
 * st, so a failure reads `return base_fail(KILN_ERR_IO, "%s: ...", path);`.
 * Its arguments may include kiln_last_error() itself, so a caller adds
 * context with `return base_fail(st, "%s: %s", path, kiln_last_error());`. */
kiln_status base_fail(kiln_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
kiln_status base_vfail(kiln_status st, const char *fmt, va_list ap);

/* An internal invariant, never a user's mistake (those are a kiln_status
 * with a message): when cond does not hold, kiln has a bug, so it says
 * where (file:line and the condition) and aborts.  On in every build; keep
 * it off hot loops. */
#define KILN_ASSERT(cond) ((cond) ? (void)0 : base_assert_fail(#cond, __FILE__, __LINE__))
_Noreturn void base_assert_fail(const char *cond, const char *file, int line);

/* A checked-build invariant: the same as KILN_ASSERT where KILN_CHECKS is
 * on (the sanitizer and fuzz builds set it, and any build without NDEBUG,
 * e.g. Debug), and nothing at all in Release (cond is not evaluated, so it
 * must have no side effects).  For invariants on hot paths and for whole-
 * structure walks too costly to run in every build. */
#if !defined(KILN_CHECKS) && !defined(NDEBUG)
#define KILN_CHECKS 1
#endif
#ifdef KILN_CHECKS
#define KILN_DASSERT(cond) KILN_ASSERT(cond)
#else
#define KILN_DASSERT(cond) ((void)0)
#endif

/* ---- allocation (alloc.c) ----
 * malloc, calloc and realloc with a fault switch: after base_fault_arm(n)
 * the n-th allocation counted fails once (NULL), so a test can walk n over
 * an operation (base_fault_count: how many it made; base_fault_fired: whether
 * the n-th came).  base_fault_arm(0) turns it off (the default).
 * base_fault_site counts one allocation and says whether it is the one to
 * fail; a test binary that routes every malloc through it (ld --wrap)
 * reaches the sites not yet written with kb_*. */
void *base_malloc(size_t n);
void *base_calloc(size_t k, size_t n);
void *base_realloc(void *p, size_t n);
void base_fault_arm(long n);
long base_fault_count(void);
int base_fault_fired(void);
int base_fault_site(void);

/* snprintf into an error buffer that may be NULL. */
void base_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A count as people read a parameter count: "1.5B", "600.0M", "260.0K". */
void base_fmt_count(double n, char *buf, size_t cap);

/* Monotonic time in seconds. */
double base_now(void);

/* 64 bits from the OS's random source (getrandom), for seeds nobody gave:
 * two calls in the same microsecond still differ. */
uint64_t base_random_u64(void);

/* A read-only private mapping of a whole file. */
typedef struct base_map {
    const uint8_t *addr;
    size_t len;
} base_map;
/* Fails with KILN_ERR_IO (open or mmap failed) or KILN_ERR_FORMAT (not a
 * regular file, or empty), the message starting with the path. */
kiln_status base_map_file(const char *path, base_map *m);
void base_unmap(base_map *m);

/* Overflow-checked arithmetic: return 0 on success, -1 on overflow. */
static inline int base_mul_u64(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_mul_overflow(a, b, r) ? -1 : 0; }
static inline int base_add_u64(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_add_overflow(a, b, r) ? -1 : 0; }

#endif
