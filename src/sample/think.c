/* Reasoning before a constrained answer (sample.h): an optional
 *
 *   <think> any text </think>
 *
 * block (already open when the prompt opened it), then the inner
 * constraint's text.  Up to THINK_WS whitespace bytes may stand before the
 * opening tag and after the closing one, as templates and models write a
 * line break there.  The answer cannot begin with '<' (the opening tag's
 * first byte decides): true of JSON, which is what this wraps.  Everything
 * is decided byte by byte, so a token may cross from the block into the
 * answer; the answer's bytes are the inner constraint's to judge. */
#include "sample/sample.h"

#include <string.h>

#define THINK_WS 2

static const char k_open[] = "<think>";
static const char k_close[] = "</think>";

enum { T_OPEN, T_BLOCK, T_GAP, T_ANSWER };

static int is_ws(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

void sample_think_init(sample_think *t, const sample_constraint *inner, int think) {
    memset(t, 0, sizeof *t);
    t->inner = inner;
    t->phase = think == 2 ? T_BLOCK : think == 1 ? T_OPEN : T_ANSWER;
}

/* One byte before the answer.  Returns 1 when it was taken, 0 when the
 * answer begins at this byte, -1 when the byte cannot stand here. */
static int step(sample_think *t, unsigned char ch) {
    switch (t->phase) {
    case T_OPEN:
        if (t->pos == 0 && is_ws(ch) && t->ws < THINK_WS) {
            t->ws++;
            return 1;
        }
        if ((unsigned char)k_open[t->pos] == ch) {
            if (!k_open[++t->pos]) {
                t->phase = T_BLOCK;
                t->pos = t->ws = 0;
            }
            return 1;
        }
        if (t->pos > 0 && t->inner) return -1;
        t->phase = T_ANSWER;
        return 0;
    case T_BLOCK:
        /* "</think>" has no repeated prefix but '<', so a mismatch restarts
         * at that byte alone */
        if ((unsigned char)k_close[t->pos] == ch) {
            if (!k_close[++t->pos]) {
                t->phase = T_GAP;
                t->pos = t->ws = 0;
            }
        } else {
            t->pos = ch == '<';
        }
        return 1;
    case T_GAP:
        if (is_ws(ch) && t->ws < THINK_WS) {
            t->ws++;
            return 1;
        }
        t->phase = T_ANSWER;
        return 0;
    default: return 0;
    }
}

static int think_allows(void *st, const char *text, int n) {
    sample_think t = *(const sample_think *)st;
    for (int i = 0; i < n; i++) {
        const int r = t.phase == T_ANSWER ? 0 : step(&t, (unsigned char)text[i]);
        if (r < 0) return 0;
        if (r == 0) return !t.inner || t.inner->allows(t.inner->state, text + i, n - i);
    }
    return 1;
}

void sample_think_accept(sample_think *t, const char *text, int n) {
    for (int i = 0; i < n; i++) {
        const int r = t->phase == T_ANSWER ? 0 : step(t, (unsigned char)text[i]);
        if (r < 0) return; /* sampling under the constraint never gets here */
        if (r == 0) {
            if (t->inner) t->inner->accept(t->inner->state, text + i, n - i);
            return;
        }
    }
}

static void think_accept(void *st, const char *text, int n) { sample_think_accept(st, text, n); }

/* The answer may end here only once it began or could begin (not inside
 * the opening tag or the block). */
static int think_complete(void *st) {
    const sample_think *t = st;
    const int may = t->phase == T_ANSWER || t->phase == T_GAP || (t->phase == T_OPEN && t->pos == 0);
    return may && (!t->inner || t->inner->complete(t->inner->state));
}

static int think_done(void *st) {
    const sample_think *t = st;
    return t->phase == T_ANSWER && t->inner && t->inner->done(t->inner->state);
}

void sample_think_constraint(sample_constraint *c, sample_think *t) {
    c->allows = think_allows;
    c->complete = think_complete;
    c->accept = think_accept;
    c->done = think_done;
    c->state = t;
}

int sample_think_in_block(const sample_think *t) { return t->phase == T_BLOCK; }

/* ---- an exact lead, then the inner constraint ---- */

void sample_lead_init(sample_lead *l, const char *lead, const sample_constraint *inner) {
    l->lead = lead;
    l->inner = inner;
    l->pos = 0;
}

static int lead_allows(void *st, const char *text, int n) {
    const sample_lead *l = st;
    const int left = (int)strlen(l->lead + l->pos), k = n < left ? n : left;
    if (memcmp(text, l->lead + l->pos, (size_t)k) != 0) return 0;
    return k == n || !l->inner || l->inner->allows(l->inner->state, text + k, n - k);
}

static void lead_accept(void *st, const char *text, int n) {
    sample_lead *l = st;
    const int left = (int)strlen(l->lead + l->pos), k = n < left ? n : left;
    l->pos += k;
    if (k < n && l->inner) l->inner->accept(l->inner->state, text + k, n - k);
}

static int lead_complete(void *st) {
    const sample_lead *l = st;
    return !l->lead[l->pos] && (!l->inner || l->inner->complete(l->inner->state));
}

static int lead_done(void *st) {
    const sample_lead *l = st;
    return !l->lead[l->pos] && l->inner && l->inner->done(l->inner->state);
}

void sample_lead_constraint(sample_constraint *c, sample_lead *l) {
    c->allows = lead_allows;
    c->complete = lead_complete;
    c->accept = lead_accept;
    c->done = lead_done;
    c->state = l;
}
