/* kiln's one internal error convention: a call that fails returns a
 * kiln_status and has set this thread's last error with base_fail (a
 * context's calls keep a copy in the context, model/api.c); callers pass
 * the status up unchanged or add nothing but context to the message. */
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char t_last_error[512];

const char *kiln_last_error(void) { return t_last_error; }

kiln_status base_vfail(kiln_status st, const char *fmt, va_list ap) {
    char msg[sizeof t_last_error]; /* the arguments may point into t_last_error */
    vsnprintf(msg, sizeof msg, fmt, ap);
    memcpy(t_last_error, msg, sizeof msg);
    return st;
}

kiln_status base_fail(kiln_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    base_vfail(st, fmt, ap);
    va_end(ap);
    return st;
}

const char *kiln_status_str(kiln_status st) {
    switch (st) {
#define BASE_STATUS_CASE_(name, value, text) \
    case name: return text;
        KILN_STATUS_LIST(BASE_STATUS_CASE_)
#undef BASE_STATUS_CASE_
    }
    return "unknown status";
}

void base_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "kiln: internal error at %s:%d: '%s' does not hold (a bug in kiln; please report it)\n", file, line,
            cond);
    fflush(stderr);
    abort();
}
