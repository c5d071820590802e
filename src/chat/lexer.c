/* lexer.c — template source to tokens.  Text between tags becomes T_DATA;
 * whitespace control ('-', '+', and trim_blocks + lstrip_blocks as Hugging
 * Face's apply_chat_template configures Jinja2) is applied here, so the
 * parser never sees it. */
#include "chat/jinja.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- lexer */

static void lx_advance(lexer *L, size_t to) {
    for (size_t i = L->pos; i < to; i++)
        if (L->src[i] == '\n') {
            L->line++;
            L->line_start = i + 1;
        }
    L->pos = to;
}

static tok *lx_push(lexer *L, int type, size_t at) {
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        tok *nt = chat_ar_alloc(L->c, cap * sizeof(tok));
        if (L->n) memcpy(nt, L->toks, L->n * sizeof(tok));
        L->toks = nt;
        L->cap = cap;
    }
    tok *t = &L->toks[L->n++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    t->line = L->line;
    t->col = (int)(at - L->line_start) + 1;
    return t;
}

/* Reads a quoted string literal at L->pos, decoding Python escapes. */
static void lx_string(lexer *L, tok *t) {
    const char *s = L->src;
    char q = s[L->pos];
    size_t i = L->pos + 1;
    sbuf b = {0};
    chat_sb_put(L->c, &b, "", 0);
    for (;;) {
        if (i >= L->len) chat_fail(L->c, t->line, t->col, "unterminated string literal");
        char ch = s[i];
        if (ch == q) {
            i++;
            break;
        }
        if (ch == '\\' && i + 1 < L->len) {
            char e = s[i + 1];
            i += 2;
            switch (e) {
            case 'n': sb_putc(L->c, &b, '\n'); break;
            case 't': sb_putc(L->c, &b, '\t'); break;
            case 'r': sb_putc(L->c, &b, '\r'); break;
            case '0': sb_putc(L->c, &b, '\0'); break;
            case 'b': sb_putc(L->c, &b, '\b'); break;
            case 'f': sb_putc(L->c, &b, '\f'); break;
            case 'v': sb_putc(L->c, &b, '\v'); break;
            case '\\':
            case '\'':
            case '"': sb_putc(L->c, &b, e); break;
            case '\n': break;
            case 'x':
            case 'u':
            case 'U': {
                int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                uint32_t cp = 0;
                for (int k = 0; k < nd; k++, i++) {
                    if (i >= L->len || !isxdigit((unsigned char)s[i]))
                        chat_fail(L->c, t->line, t->col, "bad \\%c escape in string literal", e);
                    char h = s[i];
                    cp = cp * 16 + (uint32_t)(h <= '9' ? h - '0' : (h | 32) - 'a' + 10);
                }
                put_utf8(L->c, &b, cp);
                break;
            }
            default:
                sb_putc(L->c, &b, '\\');
                sb_putc(L->c, &b, e);
                break;
            }
            continue;
        }
        sb_putc(L->c, &b, ch);
        i++;
    }
    t->s.p = b.p;
    t->s.n = b.n;
    lx_advance(L, i);
}

/* Tokenizes the inside of a {{ }} or {% %} tag up to its end marker.
 * Returns 1 when the end marker carried '-' (strip whitespace after). */
static int lx_tag(lexer *L, int block, int open_line, int open_col) {
    const char *s = L->src;
    int depth = 0;
    const char endc = block ? '%' : '}';
    for (;;) {
        while (L->pos < L->len && is_ws(s[L->pos])) lx_advance(L, L->pos + 1);
        if (L->pos >= L->len)
            chat_fail(L->c, open_line, open_col, "unexpected end of template inside a %s tag",
                      block ? "{% %}" : "{{ }}");
        size_t p = L->pos;
        if (depth == 0) {
            if (s[p] == '-' && p + 2 < L->len + 0 && s[p + 1] == endc && s[p + 2] == '}') {
                lx_push(L, block ? T_BLOCK_END : T_VAR_END, p);
                lx_advance(L, p + 3);
                return 1;
            }
            if (s[p] == endc && p + 1 < L->len && s[p + 1] == '}') {
                lx_push(L, block ? T_BLOCK_END : T_VAR_END, p);
                lx_advance(L, p + 2);
                return 0;
            }
        }
        char ch = s[p];
        if (isalpha((unsigned char)ch) || ch == '_') {
            size_t e = p;
            while (e < L->len && (isalnum((unsigned char)s[e]) || s[e] == '_')) e++;
            tok *t = lx_push(L, T_NAME, p);
            t->s.p = s + p;
            t->s.n = e - p;
            lx_advance(L, e);
        } else if (isdigit((unsigned char)ch)) {
            size_t e = p;
            int isf = 0;
            char num[64];
            size_t k = 0;
            while (e < L->len && (isdigit((unsigned char)s[e]) || s[e] == '_')) {
                if (s[e] != '_' && k < 63) num[k++] = s[e];
                e++;
            }
            if (e + 1 < L->len && s[e] == '.' && isdigit((unsigned char)s[e + 1])) {
                isf = 1;
                if (k < 63) num[k++] = '.';
                e++;
                while (e < L->len && (isdigit((unsigned char)s[e]) || s[e] == '_')) {
                    if (s[e] != '_' && k < 63) num[k++] = s[e];
                    e++;
                }
            }
            if (e < L->len && (s[e] == 'e' || s[e] == 'E')) {
                size_t q = e + 1;
                if (q < L->len && (s[q] == '+' || s[q] == '-')) q++;
                if (q < L->len && isdigit((unsigned char)s[q])) {
                    isf = 1;
                    if (k < 63) num[k++] = 'e';
                    for (size_t r = e + 1; r < q; r++)
                        if (k < 63) num[k++] = s[r];
                    e = q;
                    while (e < L->len && isdigit((unsigned char)s[e])) {
                        if (k < 63) num[k++] = s[e];
                        e++;
                    }
                }
            }
            num[k] = 0;
            tok *t = lx_push(L, isf ? T_FLOAT : T_INT, p);
            if (isf) {
                t->f = strtod(num, NULL);
            } else {
                /* Python's int has no bound; kiln's is int64 (num holds at most 63 digits) */
                int64_t v = 0;
                for (size_t q = 0; q < k; q++)
                    if (k == 63 || __builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, num[q] - '0', &v))
                        chat_fail(L->c, t->line, t->col, "integer literal too large");
                t->i = v;
            }
            lx_advance(L, e);
        } else if (ch == '\'' || ch == '"') {
            tok *t = lx_push(L, T_STRING, p);
            lx_string(L, t);
        } else {
            static const char *ops2[] = {"//", "**", "==", "!=", "<=", ">="};
            tok *t = lx_push(L, T_OP, p);
            size_t w = 1;
            for (size_t k = 0; k < sizeof ops2 / sizeof *ops2; k++)
                if (p + 1 < L->len && s[p] == ops2[k][0] && s[p + 1] == ops2[k][1]) {
                    w = 2;
                    break;
                }
            if (w == 1 && !strchr("+-*/%~<>=.,:|()[]{}", ch))
                chat_fail(L->c, t->line, t->col, "unexpected character '%c'", ch);
            memcpy(t->op, s + p, w);
            if (ch == '(' || ch == '[' || ch == '{') depth++;
            if ((ch == ')' || ch == ']' || ch == '}') && depth > 0) depth--;
            lx_advance(L, p + w);
        }
    }
}

/* Finds the next "{{", "{%" or "{#" at or after `from`; len when none. */
static size_t lx_find_open(const lexer *L, size_t from) {
    const char *s = L->src;
    for (size_t i = from; i + 1 < L->len; i++) {
        const char *q = memchr(s + i, '{', L->len - 1 - i);
        if (!q) break;
        i = (size_t)(q - s);
        char nx = s[i + 1];
        if (nx == '{' || nx == '%' || nx == '#') return i;
    }
    return L->len;
}

/* Matches "{%[-+]? raw|endraw [-]?%}" at p; returns its end offset or 0. */
static size_t lx_match_tag_word(const lexer *L, size_t p, const char *word, int *lstrip_minus, int *rstrip_minus) {
    const char *s = L->src;
    size_t n = L->len, wl = strlen(word);
    if (p + 2 > n || s[p] != '{' || s[p + 1] != '%') return 0;
    size_t i = p + 2;
    *lstrip_minus = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) {
        *lstrip_minus = s[i] == '-';
        i++;
    }
    while (i < n && is_ws(s[i])) i++;
    if (i + wl > n || memcmp(s + i, word, wl) != 0) return 0;
    i += wl;
    while (i < n && is_ws(s[i])) i++;
    *rstrip_minus = 0;
    if (i < n && s[i] == '-') {
        *rstrip_minus = 1;
        i++;
    }
    if (i + 2 > n || s[i] != '%' || s[i + 1] != '}') return 0;
    return i + 2;
}

static void lx_data(lexer *L, const char *p, size_t n, size_t at) {
    if (!n) return;
    tok *t = lx_push(L, T_DATA, at);
    t->s.p = p;
    t->s.n = n;
}

/* Splits the template into data and tag tokens, applying whitespace
 * control the way Jinja2's lexer does with trim_blocks and lstrip_blocks:
 * "-" strips all whitespace on that side; a block or comment tag alone on
 * its line loses the indentation before it (unless opened with "+"), and
 * the first newline after a block or comment tag is dropped. */
void chat_lex(lexer *L) {
    const char *s = L->src;
    int line_starting = 1;
    size_t pos = 0;
    while (pos < L->len) {
        size_t at = lx_find_open(L, pos);
        const char *text = s + pos;
        size_t tn = at - pos;
        if (at >= L->len) {
            lx_data(L, text, tn, pos);
            lx_advance(L, L->len);
            break;
        }
        char kind = s[at + 1];
        char mod = at + 2 < L->len ? s[at + 2] : 0;
        if (mod == '-') {
            while (tn && is_ws(text[tn - 1])) tn--;
        } else if (mod != '+' && kind != '{') {
            size_t lp = tn;
            while (lp && text[lp - 1] != '\n') lp--;
            if ((lp > 0 || line_starting) && lp < tn) {
                int allws = 1;
                for (size_t i = lp; i < tn; i++)
                    if (!is_ws(text[i])) {
                        allws = 0;
                        break;
                    }
                if (allws) tn = lp;
            }
        }
        lx_data(L, text, tn, pos);
        lx_advance(L, at);
        int open_line = L->line, open_col = (int)(at - L->line_start) + 1;
        size_t inner = at + 2 + (mod == '-' || mod == '+');
        int strip_after = 0;
        if (kind == '#') {
            const char *e = NULL;
            for (size_t i = inner; i + 1 < L->len; i++)
                if (s[i] == '#' && s[i + 1] == '}') {
                    e = s + i;
                    break;
                }
            if (!e) chat_fail(L->c, open_line, open_col, "unclosed comment");
            size_t end = (size_t)(e - s) + 2;
            strip_after = e > s + inner && e[-1] == '-';
            lx_advance(L, end);
            if (!strip_after && L->pos < L->len && s[L->pos] == '\n') lx_advance(L, L->pos + 1);
        } else {
            int lm, rm;
            size_t rend = kind == '%' ? lx_match_tag_word(L, at, "raw", &lm, &rm) : 0;
            if (rend) {
                /* raw: everything up to {% endraw %} is data */
                size_t q = rend, eend = 0;
                int elm = 0, erm = 0;
                if (rm)
                    while (q < L->len && is_ws(s[q])) q++;
                else if (q < L->len && s[q] == '\n')
                    q++;
                size_t body = q;
                for (; q < L->len; q++)
                    if (s[q] == '{' && (eend = lx_match_tag_word(L, q, "endraw", &elm, &erm)) != 0) break;
                if (!eend) chat_fail(L->c, open_line, open_col, "unclosed raw block (expected 'endraw')");
                size_t bn = q - body;
                if (elm)
                    while (bn && is_ws(s[body + bn - 1])) bn--;
                lx_data(L, s + body, bn, body);
                lx_advance(L, eend);
                strip_after = erm;
                if (!strip_after && L->pos < L->len && s[L->pos] == '\n') lx_advance(L, L->pos + 1);
            } else {
                int block = kind == '%';
                lx_push(L, block ? T_BLOCK_BEGIN : T_VAR_BEGIN, at);
                lx_advance(L, inner);
                strip_after = lx_tag(L, block, open_line, open_col);
                if (!strip_after && block && L->pos < L->len && s[L->pos] == '\n') lx_advance(L, L->pos + 1);
            }
        }
        if (strip_after)
            while (L->pos < L->len && is_ws(s[L->pos])) lx_advance(L, L->pos + 1);
        line_starting = L->pos > 0 && s[L->pos - 1] == '\n';
        pos = L->pos;
    }
    lx_push(L, T_EOF, L->len);
}
