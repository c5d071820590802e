/*
 * Jinja2-subset interpreter for chat templates.  The files of src/chat/,
 * behind the private header jinja.h:
 *   value.c    arena, buffers, values and their Python semantics, frames
 *   lexer.c    source to tokens (whitespace control happens here)
 *   parser.c   tokens to an AST (recursive descent, Jinja2's precedence)
 *   eval.c     expressions and statements
 *   filters.c  methods, tests, filters and globals
 *   template.c the public API (template.h).
 * Compile-time and render-time memory both come from arenas, so errors
 * unwind with longjmp and free everything at once.
 */
#define _GNU_SOURCE /* pthread_getattr_np */
#include "base/base.h"
#include "chat/jinja.h"
#include "chat/template.h"

#include <pthread.h>
#include <stdlib.h>

uintptr_t chat_stack_floor(void) {
    uintptr_t here = stack_here(), room = CHAT_MAX_STACK;
    pthread_attr_t a;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        void *lo = NULL;
        size_t size = 0;
        if (pthread_attr_getstack(&a, &lo, &size) == 0 && lo && here > (uintptr_t)lo &&
            (here - (uintptr_t)lo) / 2 < room)
            room = (here - (uintptr_t)lo) / 2;
        pthread_attr_destroy(&a);
    }
    return here > room ? here - room : 0;
}

/* ------------------------------------------------------------------ API */

struct chat_tmpl {
    ctx c; /* owns the AST and the copy of the source */
    nlist body;
};

/* Runs under chat_compile's setjmp; failures longjmp back there. */
static void compile_into(chat_tmpl *t, const char *src, size_t len) {
    /* Jinja2 drops a single trailing newline (keep_trailing_newline=False). */
    if (len && src[len - 1] == '\n') len -= len > 1 && src[len - 2] == '\r' ? 2 : 1;
    char *copy = ar_strdup(&t->c, src, len);
    lexer L = {.c = &t->c, .src = copy, .len = len, .line = 1};
    chat_lex(&L);
    parser P = {.c = &t->c, .t = L.toks, .n = L.n, .stack_floor = chat_stack_floor()};
    chat_parse_body(&P, &t->body, NULL, NULL, NULL);
}

static chat_tmpl *compile_buf(const char *src, size_t len, char *err, size_t errlen) {
    chat_tmpl *volatile t = calloc(1, sizeof *t);
    if (!t) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->c.err = err;
    t->c.errlen = errlen;
    if (setjmp(t->c.jb)) {
        ar_free(&t->c);
        free(t);
        return NULL;
    }
    compile_into(t, src, len);
    t->c.err = NULL;
    t->c.errlen = 0;
    return t;
}

void chat_free(chat_tmpl *t) {
    if (!t) return;
    ar_free(&t->c);
    free(t);
}

/* The request's variables into the root frame.  A function of its own so
 * that no local of the setjmp caller lives across a longjmp. */
static void bind_vars(rctx *r, frame *root, const json_t *vars) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)vars, k, v)
        chat_frame_set(&r->c, root, (str){k, strlen(k)}, chat_json_to_kv(&r->c, v));
    json_t *now = json_object_get(vars, "kct_now");
    if (json_is_integer(now)) {
        r->has_now = 1;
        r->now = (int64_t)json_integer_value(now);
    }
}

static char *render_buf(const chat_tmpl *t, const json_t *vars, const chat_opts *opts, char *err, size_t errlen) {
    rctx r;
    memset(&r, 0, sizeof r);
    r.c.err = err;
    r.c.errlen = errlen;
    r.max_steps = opts && opts->max_steps ? opts->max_steps : CHAT_DEFAULT_STEPS;
    r.max_output = opts && opts->max_output ? opts->max_output : CHAT_DEFAULT_OUTPUT;
    r.c.mem_limit = opts && opts->max_memory ? opts->max_memory : CHAT_DEFAULT_MEMORY;
    r.cancelled = opts ? opts->cancelled : NULL;
    r.cancel_arg = opts ? opts->cancel_arg : NULL;
    r.next_poll = CHAT_POLL_STEPS < r.max_steps ? CHAT_POLL_STEPS : r.max_steps + 1;
    r.stack_floor = chat_stack_floor();
    if (setjmp(r.c.jb)) {
        ar_free(&r.c);
        return NULL;
    }
    if (vars && !json_is_object(vars)) chat_fail(&r.c, 0, 0, "template variables must be a JSON object");
    frame *root = new_frame(&r.c, NULL);
    if (vars) bind_vars(&r, root, vars);
    sbuf out = {0};
    chat_sb_put(&r.c, &out, "", 0);
    chat_exec_body(&r, &t->body, root, &out);
    char *res = malloc(out.n + 1);
    if (!res) chat_fail(&r.c, 0, 0, "out of memory");
    memcpy(res, out.p, out.n + 1);
    ar_free(&r.c);
    return res;
}

kiln_status chat_status_of(const char *msg, kiln_status otherwise) {
    if (!msg[0] || strstr(msg, "out of memory")) return KILN_ERR_NOMEM;
    return strstr(msg, "render cancelled") ? KILN_ERR_CANCELLED : otherwise;
}

kiln_status chat_compile(const char *src, size_t len, chat_tmpl **out) {
    char msg[512] = "";
    *out = compile_buf(src, len, msg, sizeof msg);
    return *out ? KILN_OK : base_fail(chat_status_of(msg, KILN_ERR_FORMAT), "%s", msg[0] ? msg : "out of memory");
}

kiln_status chat_render(const chat_tmpl *t, const json_t *vars, char **out) {
    return chat_render_opts(t, vars, NULL, out);
}

kiln_status chat_render_opts(const chat_tmpl *t, const json_t *vars, const chat_opts *opts, char **out) {
    char msg[512] = "";
    *out = render_buf(t, vars, opts, msg, sizeof msg);
    return *out ? KILN_OK : base_fail(chat_status_of(msg, KILN_ERR_INVALID_ARG), "%s", msg[0] ? msg : "out of memory");
}
