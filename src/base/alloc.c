/* The allocator's fault switch: base_malloc, base_calloc and base_realloc are
 * malloc, calloc and realloc, except that a test can make the n-th
 * allocation after base_fault_arm(n) fail, once (as sqlite's and curl's test
 * allocators do), and walk n over a whole operation: every site it
 * reaches then meets one failure.  Disarmed, the switch costs one atomic
 * load per allocation. */
#include "base/base.h"

#include <stdatomic.h>
#include <stdlib.h>

static atomic_long g_fail_at; /* 0: off; else the number of the allocation that fails */
static atomic_long g_count;   /* allocations counted since the last arm */
static atomic_int g_fired;
/* inside a kb_* call: the libc call it makes is not counted again (a test
 * binary may route every malloc through base_fault_site) */
static _Thread_local int t_inside;

void base_fault_arm(long n) {
    atomic_store(&g_fail_at, 0);
    atomic_store(&g_count, 0);
    atomic_store(&g_fired, 0);
    atomic_store(&g_fail_at, n > 0 ? n : 0);
}

long base_fault_count(void) { return atomic_load(&g_count); }

int base_fault_fired(void) { return atomic_load(&g_fired); }

int base_fault_site(void) {
    if (t_inside) return 0;
    const long at = atomic_load_explicit(&g_fail_at, memory_order_relaxed);
    if (!at) return 0;
    if (atomic_fetch_add(&g_count, 1) + 1 != at) return 0;
    atomic_store(&g_fired, 1);
    return 1;
}

void *base_malloc(size_t n) {
    if (base_fault_site()) return NULL;
    t_inside = 1;
    void *p = malloc(n);
    t_inside = 0;
    return p;
}

void *base_calloc(size_t k, size_t n) {
    if (base_fault_site()) return NULL;
    t_inside = 1;
    void *p = calloc(k, n);
    t_inside = 0;
    return p;
}

void *base_realloc(void *p, size_t n) {
    if (base_fault_site()) return NULL;
    t_inside = 1;
    void *q = realloc(p, n);
    t_inside = 0;
    return q;
}
