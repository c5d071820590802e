/* A forced tool call as a constraint (sample.h): an optional reasoning
 * block, then exactly
 *
 *   <tool_call>{"name": "NAME", "arguments": ARGS}</tool_call>
 *
 * (or the literals of another family's form, sample_call_form)
 * with NAME one of the offered names and ARGS a value of that name's
 * schema (jschema.h), and nothing after it.  Up to CALL_WS whitespace bytes
 * may stand before the reasoning and around the tags, as models write a
 * line break there; the spacing inside the JSON wrapper is the Hermes
 * format's, as Qwen's templates show it, and ARGS stays on one line with at
 * most one space between its tokens (so a model cannot spend its tokens on
 * blank space).  Everything is decided byte by
 * byte, so a token may cross from one part into the next. */
#include "sample/sample.h"

#include "sample/jschema.h"

#include <stddef.h>
#include <string.h>

#define CALL_WS 2

static const char k_think_open[] = "<think>";
static const char k_think_close[] = "</think>";
/* the Hermes form, as Qwen's templates write it */
static const sample_call_form k_hermes = {"<tool_call>", "{\"name\": \"", "\", \"arguments\": ", "}", "</tool_call>"};

/* Phases, in order.  OPEN takes "<think>" (when reasoning may come) or the
 * call's opening tag, after up to CALL_WS whitespace bytes. */
enum {
    C_OPEN,  /* pos: bytes matched; cand bit 0 "<think>", bit 1 "<tool_call>" */
    C_THINK, /* reasoning; pos: bytes of "</think>" matched */
    C_GAP,   /* whitespace, then "<tool_call>" */
    C_TAG,   /* in "<tool_call>" */
    C_GAP2,  /* whitespace, then the wrapper's '{' */
    C_HEAD,  /* in {"name": " */
    C_NAME,  /* names: bit i while names[i] is still possible; pos: bytes matched */
    C_MID,   /* in ", "arguments": */
    C_ARGS,  /* the arguments value */
    C_TAIL,  /* whitespace, then '}' */
    C_GAP3,  /* whitespace, then "</tool_call>" */
    C_CLOSE, /* in "</tool_call>" */
    C_DONE,
};

static int is_ws(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* Begins phase ph (pos and whitespace count reset); a gap before an empty
 * literal is left out with it. */
static void enter(sample_call *k, int ph) {
    const sample_call_form *f = k->form;
    if (ph == C_GAP && !*f->open) ph = C_GAP2;
    if (ph == C_GAP2 && !*f->head) ph = C_NAME;
    if (ph == C_TAIL && !*f->tail) ph = C_GAP3;
    if (ph == C_GAP3 && !*f->close) ph = C_DONE;
    k->phase = ph;
    k->pos = 0;
    k->ws = 0;
}

/* One byte of a fixed literal lit, entering next at its end. */
static int lit_byte(sample_call *k, const char *lit, unsigned char ch, int next) {
    if ((unsigned char)lit[k->pos] != ch) return 0;
    if (!lit[++k->pos]) enter(k, next);
    return 1;
}

/* Whitespace (up to CALL_WS bytes) of a gap before literal lit. */
static int gap_byte(sample_call *k, const char *lit, unsigned char ch, int lit_phase, int next) {
    if (is_ws(ch)) return k->ws++ < CALL_WS;
    enter(k, lit_phase);
    return lit_byte(k, lit, ch, next);
}

/* 1 when the form ends with the arguments (no tail, no close). */
static int ends_at_args(const sample_call *k) { return !*k->form->tail && !*k->form->close; }

static int call_byte(sample_call *k, unsigned char ch) {
    switch (k->phase) {
    case C_OPEN: {
        if (k->pos == 0 && is_ws(ch)) return k->ws++ < CALL_WS;
        const char *open = k->form->open;
        uint64_t cand = 0;
        if ((k->cand & 1) && (unsigned char)k_think_open[k->pos] == ch) cand |= 1;
        if ((k->cand & 2) && (unsigned char)open[k->pos] == ch) cand |= 2;
        if (!cand && k->pos == 0 && !*open) { /* no opening literal: the call's head */
            enter(k, C_GAP2);
            return call_byte(k, ch);
        }
        if (!cand) return 0;
        k->cand = cand;
        k->pos++;
        if ((cand & 1) && !k_think_open[k->pos])
            enter(k, C_THINK);
        else if (cand == 2)
            k->phase = C_TAG; /* pos carries on in the tag */
        if (k->phase == C_TAG && !open[k->pos]) enter(k, C_GAP2);
        return 1;
    }
    case C_THINK:
        /* any text; "</think>" ends it ('<' is its only repeated byte, so a
         * mismatch restarts at 0, or at 1 on a '<') */
        if ((unsigned char)k_think_close[k->pos] == ch) {
            if (!k_think_close[++k->pos]) enter(k, C_GAP);
        } else {
            k->pos = ch == '<';
        }
        return 1;
    case C_GAP: return gap_byte(k, k->form->open, ch, C_TAG, C_GAP2);
    case C_TAG: return lit_byte(k, k->form->open, ch, C_GAP2);
    case C_GAP2: return gap_byte(k, k->form->head, ch, C_HEAD, C_NAME);
    case C_HEAD: return lit_byte(k, k->form->head, ch, C_NAME);
    case C_NAME: {
        uint64_t cand = 0;
        int whole = -1;
        for (int i = 0; i < k->n_names; i++) {
            if (!(k->names_left >> i & 1)) continue;
            const char *nm = k->names[i];
            if (ch == (unsigned char)k->form->mid[0] && !nm[k->pos])
                whole = i;
            else if (nm[k->pos] && (unsigned char)nm[k->pos] == ch)
                cand |= 1ull << i;
        }
        if (whole >= 0) { /* names are distinct, so one ends here */
            k->pick = whole;
            enter(k, C_MID);
            k->pos = 1; /* the first byte of mid */
            if (!k->form->mid[1]) {
                enter(k, C_ARGS);
                sample_sv_init(&k->sv, k->schemas[k->pick]);
            }
            return 1;
        }
        if (!cand) return 0;
        k->names_left = cand;
        k->pos++;
        return 1;
    }
    case C_MID:
        if (!lit_byte(k, k->form->mid, ch, C_ARGS)) return 0;
        if (k->phase == C_ARGS) sample_sv_init(&k->sv, k->schemas[k->pick]);
        return 1;
    case C_ARGS: {
        /* on one line, as the format writes a call: between tokens at most
         * one space (sv.ws counts a line break as 2 and up) */
        if (is_ws(ch) && ends_at_args(k) && sample_sv_complete(&k->sv)) return 0; /* nothing follows */
        sample_sv t;
        sample_sv_copy(&t, &k->sv);
        if (sample_sv_byte(&t, ch) && t.ws <= 1) {
            sample_sv_copy(&k->sv, &t);
            return 1;
        }
        if (!sample_sv_complete(&k->sv)) return 0;
        enter(k, C_TAIL);
        return call_byte(k, ch);
    }
    case C_TAIL: /* blanks, then the literal (pos: its bytes matched) */
        return k->pos ? lit_byte(k, k->form->tail, ch, C_GAP3) : gap_byte(k, k->form->tail, ch, C_TAIL, C_GAP3);
    case C_GAP3: return gap_byte(k, k->form->close, ch, C_CLOSE, C_DONE);
    case C_CLOSE: return lit_byte(k, k->form->close, ch, C_DONE);
    default: return 0;
    }
}

int sample_call_init(sample_call *k, const char *const *names, const struct sample_schema *const *schemas, int n,
                     int think) {
    return sample_call_init_form(k, &k_hermes, names, schemas, n, think);
}

int sample_call_init_form(sample_call *k, const sample_call_form *form, const char *const *names,
                          const struct sample_schema *const *schemas, int n, int think) {
    memset(k, 0, sizeof *k);
    if (n < 1 || n > SAMPLE_CALL_MAX || !form->mid[0]) return -1;
    k->form = form;
    for (int i = 0; i < n; i++) {
        if (!names[i] || !names[i][0]) return -1;
        for (const char *c = names[i]; *c; c++) /* a name is written as it is: no escapes */
            if ((unsigned char)*c < 0x20 || *c == '"' || *c == '\\' || *c == form->mid[0]) return -1;
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j])) return -1;
    }
    k->names = names;
    k->schemas = schemas;
    k->n_names = n;
    k->pick = -1;
    enter(k, think == 2 ? C_THINK : C_OPEN);
    k->cand = think ? 3 : 2;
    k->names_left = n == 64 ? ~0ull : (1ull << n) - 1;
    return 0;
}

static int call_allows(void *st, const char *text, int n) {
    sample_call t; /* the recognizer last, so only its frames in use are copied */
    memcpy(&t, st, offsetof(sample_call, sv));
    sample_sv_copy(&t.sv, &((const sample_call *)st)->sv);
    for (int i = 0; i < n; i++)
        if (!call_byte(&t, (unsigned char)text[i])) return 0;
    return 1;
}

static int call_complete(void *st) {
    sample_call *k = st;
    return k->phase == C_DONE || (k->phase == C_ARGS && ends_at_args(k) && sample_sv_complete(&k->sv));
}

static void call_accept(void *st, const char *text, int n) {
    for (int i = 0; i < n; i++) call_byte(st, (unsigned char)text[i]);
}

void sample_call_constraint(sample_constraint *c, sample_call *k) {
    c->allows = call_allows;
    c->complete = call_complete;
    c->accept = call_accept;
    c->done = call_complete;
    c->state = k;
}

const char *sample_call_name(const sample_call *k) { return k->pick >= 0 ? k->names[k->pick] : NULL; }
