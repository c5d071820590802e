/* Tokenizing and framing a decision request (decide.h gives the rule);
 * Measure is this without building the sequences. */
#include "decide/decide.h"

#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void decide_frame_free(decide_frame *fr) {
    for (int i = 0; fr->seqs && i < fr->n_seq; i++) free(fr->seqs[i].tok);
    free(fr->seqs);
    free(fr->budget);
    memset(fr, 0, sizeof *fr);
}

/* text's tokens, every added token recognized, none added.  *n the count. */
static kiln_status tokens_of(const tokenizer *t, const char *text, size_t len, int32_t **out, int32_t *n) {
    *out = NULL;
    *n = 0;
    if (!text || !len) return KILN_OK;
    const int32_t c = tok_encode_alloc(t, text, len, 0, 1, out);
    if (c == TOK_ERR_NOMEM) return base_fail(KILN_ERR_NOMEM, "out of memory while tokenizing");
    *n = c;
    return KILN_OK;
}

/* Appends a sequence [CLS] h [SEP] s[0..ns) [SEP] ([CLS] s [SEP] when nh is 0). */
static int push_seq(decide_frame *fr, int *cap, int q, int opt, int head, int32_t cls, int32_t sep, const int32_t *h,
                    int32_t nh, const int32_t *s, int32_t ns) {
    if (fr->n_seq == *cap) {
        int nc = *cap ? 2 * *cap : 16;
        decide_seq *ns2 = realloc(fr->seqs, (size_t)nc * sizeof *ns2);
        if (!ns2) return -1;
        fr->seqs = ns2;
        *cap = nc;
    }
    const int32_t n = 2 + (nh ? nh + 1 : 0) + ns;
    int32_t *tok = malloc((size_t)n * sizeof *tok), k = 0;
    if (!tok) return -1;
    tok[k++] = cls;
    if (nh) {
        memcpy(tok + k, h, (size_t)nh * sizeof *tok);
        k += nh;
        tok[k++] = sep;
    }
    if (ns) memcpy(tok + k, s, (size_t)ns * sizeof *tok);
    k += ns;
    tok[k++] = sep;
    fr->seqs[fr->n_seq++] = (decide_seq){q, opt, head, k, tok};
    return 0;
}

static void type_list(const decide_config *c, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < c->n_types && o + 1 < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", c->types[i].name);
}

kiln_status decide_frame_build(decide_frame *fr, const decide_config *c, const tokenizer *t,
                               const kiln_decide_request *r, int seqs) {
    memset(fr, 0, sizeof *fr);
    if (!r || !r->state || r->n_questions < 0 || (r->n_questions && !r->questions))
        return base_fail(KILN_ERR_INVALID_ARG, "bad decision request");
    const int32_t cls = tok_bos(t), sep = tok_sep(t) >= 0 ? tok_sep(t) : tok_eos(t);
    if (cls < 0 || sep < 0) return base_fail(KILN_ERR_FORMAT, "the pack's vocabulary has no [CLS]/[SEP] tokens");
    int32_t *S = NULL, *Q = NULL, *H = NULL, *O = NULL;
    int32_t nS = 0, nQ = 0, nO = 0;
    int cap = 0;
    kiln_status st = tokens_of(t, r->state, r->state_len ? r->state_len : strlen(r->state), &S, &nS);
    fr->state_tokens = nS;
    fr->n_q = r->n_questions;
    fr->budget = malloc((size_t)(r->n_questions + 1) * sizeof *fr->budget);
    if (st == KILN_OK && !fr->budget) st = base_fail(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; st == KILN_OK && i < r->n_questions; i++) {
        const kiln_decide_question *q = &r->questions[i];
        const decide_type *ty = q->type ? decide_type_find(c, q->type) : NULL;
        if (!ty) {
            char types[256];
            type_list(c, types, sizeof types);
            st = base_fail(KILN_ERR_INVALID_ARG, "question %d: unknown question type '%s' (the pack has: %s)", i,
                           q->type ? q->type : "(none)", types);
            break;
        }
        if (ty->n_labels && q->n_options) {
            st = base_fail(KILN_ERR_INVALID_ARG, "question %d: type '%s' has labels and takes no options", i, ty->name);
            break;
        }
        if (!ty->n_labels && (q->n_options < 1 || !q->options)) {
            st = base_fail(KILN_ERR_INVALID_ARG, "question %d: type '%s' scores options, and none were given", i,
                           ty->name);
            break;
        }
        if (!ty->n_labels && q->n_options > ty->slots) {
            st = base_fail(KILN_ERR_INVALID_ARG, "question %d: %d options, but type '%s' has %d option slots", i,
                           q->n_options, ty->name, ty->slots);
            break;
        }
        free(Q);
        st = tokens_of(t, q->text, q->text ? strlen(q->text) : 0, &Q, &nQ);
        if (st != KILN_OK) break;
        /* the longest head part decides the budget */
        const int n_heads = ty->n_labels ? 1 : q->n_options;
        int32_t longest = 0;
        for (int k = 0; st == KILN_OK && k < n_heads; k++) {
            int32_t nh = nQ;
            if (!ty->n_labels) {
                if (!q->options[k]) {
                    st = base_fail(KILN_ERR_INVALID_ARG, "question %d: option %d is NULL", i, k);
                    break;
                }
                free(O);
                st = tokens_of(t, q->options[k], strlen(q->options[k]), &O, &nO);
                nh = nQ ? nQ + 1 + nO : nO;
            }
            if (st == KILN_OK && nh > c->head_max_len) {
                char where[48] = "";
                if (!ty->n_labels) snprintf(where, sizeof where, ", option %d", k);
                st = base_fail(KILN_ERR_INVALID_ARG,
                               "question %d%s: its head part takes %d tokens > "
                               "head_max_len %d",
                               i, where, nh, c->head_max_len);
            }
            if (nh > longest) longest = nh;
        }
        if (st != KILN_OK) break;
        fr->budget[i] = c->max_len - 2 - (longest ? longest + 1 : 0);
        if (!seqs) continue;
        const int32_t kept = nS < fr->budget[i] ? nS : fr->budget[i];
        for (int k = 0; st == KILN_OK && k < n_heads; k++) {
            int32_t nh = nQ;
            free(H);
            H = NULL;
            if (!ty->n_labels) {
                free(O);
                st = tokens_of(t, q->options[k], strlen(q->options[k]), &O, &nO);
                nh = nQ ? nQ + 1 + nO : nO;
                H = malloc((size_t)(nh + 1) * sizeof *H);
                if (st == KILN_OK && !H) st = base_fail(KILN_ERR_NOMEM, "out of memory");
                if (st != KILN_OK) break;
                int32_t o = 0;
                if (nQ) {
                    memcpy(H, Q, (size_t)nQ * sizeof *H);
                    o = nQ;
                    H[o++] = sep;
                }
                if (nO) memcpy(H + o, O, (size_t)nO * sizeof *H);
            }
            if (push_seq(fr, &cap, i, k, ty->head, cls, sep, ty->n_labels ? Q : H, nh, S, kept))
                st = base_fail(KILN_ERR_NOMEM, "out of memory");
        }
    }
    free(S);
    free(Q);
    free(H);
    free(O);
    if (st != KILN_OK) decide_frame_free(fr);
    return st;
}
