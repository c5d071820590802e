/* WordPiece ("bert" vocabs), BERT's basic tokenizer followed by greedy
 * longest-match-first:
 *   NFD, drop combining marks (Mn) — strips accents —, lowercase, drop
 *   control characters, split on whitespace, and make every punctuation
 *   character, ASCII symbol and CJK ideograph a word of its own.
 * Each word is then covered left to right by the longest vocabulary entry;
 * the first piece carries the word-start marker, later pieces the
 * continuation marker.  A word that cannot be covered becomes [UNK]. */
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"

static int is_cjk(int32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static int is_space(int32_t c) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x85) return 1;
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

static int is_punct(int32_t c) {
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return 1;
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* Covers one word (already lowercased UTF-8) with vocabulary pieces. */
static void wpm_word(const tokenizer *t, const char *w, size_t wl, tok_vec *out, tok_scratch *s) {
    size_t sl = strlen(t->wpm_start), cl = strlen(t->wpm_cont);
    size_t cap = wl + (sl > cl ? sl : cl);
    char *buf = tok_scratch_get(s, 2, cap);
    if (!buf) return;
    int32_t mark = out->n;
    for (size_t i = 0; i < wl;) {
        const char *pre = i == 0 ? t->wpm_start : t->wpm_cont;
        size_t pl = i == 0 ? sl : cl;
        memcpy(buf, pre, pl);
        size_t maxl = wl - i;
        if ((size_t)t->max_len < pl + maxl) maxl = (size_t)t->max_len > pl ? (size_t)t->max_len - pl : 0;
        int32_t id = -1;
        size_t l = maxl;
        for (; l > 0; l--) {
            memcpy(buf + pl, w + i, l);
            id = tok_strmap_get(&t->map, t, buf, pl + l);
            if (id >= 0) break;
        }
        if (id < 0) { /* not coverable: the whole word is unknown */
            out->n = mark;
            tok_vec_push(out, t->unk);
            return;
        }
        tok_vec_push(out, id);
        i += l;
    }
}

void tok_wpm_encode(const tokenizer *t, const char *text, size_t len, tok_vec *out, tok_scratch *s) {
    if (len == 0) return;
    /* decode to code points (invalid bytes skipped), then NFD */
    int32_t *cp = tok_scratch_get(s, 0, (len + 1) * sizeof *cp);
    if (!cp) return;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(len - i), &c);
        if (l <= 0) {
            i++;
            continue;
        }
        cp[n++] = c;
        i += (size_t)l;
    }
    /* NFD grows text by at most a few code points per character; ask, then retry */
    size_t cap = n * 4 + 4;
    int32_t *nfd = NULL;
    utf8proc_ssize_t m;
    for (;;) {
        nfd = tok_scratch_get(s, 1, cap * sizeof *nfd);
        if (!nfd) return;
        /* utf8proc_decompose reads UTF-8; feed it code points one at a time */
        m = 0;
        for (size_t i = 0; i < n && (size_t)m <= cap; i++) {
            utf8proc_ssize_t r =
                utf8proc_decompose_char(cp[i], nfd + m, (utf8proc_ssize_t)(cap - (size_t)m), UTF8PROC_DECOMPOSE, NULL);
            if (r < 0) r = 0;
            m += r;
        }
        if ((size_t)m <= cap) break;
        cap = (size_t)m * 2;
    }
    /* canonical reordering is skipped: it only permutes runs of combining
     * marks, and the common ones (Mn) are dropped below */

    char *word = tok_scratch_get(s, 3, (size_t)m * 4 + 4);
    if (!word) return;
    size_t wl = 0;
    for (utf8proc_ssize_t i = 0; i < m; i++) {
        int32_t c = nfd[i];
        if (is_space(c)) {
            if (wl) {
                wpm_word(t, word, wl, out, s);
                wl = 0;
            }
            continue;
        }
        utf8proc_category_t k = utf8proc_category(c);
        if (c == 0 || c == 0xFFFD || k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_CC ||
            k == UTF8PROC_CATEGORY_CF)
            continue;
        c = utf8proc_tolower(c);
        int alone = is_punct(c) || (c < 0x7f && k >= UTF8PROC_CATEGORY_SM && k <= UTF8PROC_CATEGORY_SO) || is_cjk(c);
        if (alone && wl) {
            wpm_word(t, word, wl, out, s);
            wl = 0;
        }
        wl += (size_t)utf8proc_encode_char(c, (utf8proc_uint8_t *)word + wl);
        if (alone) {
            wpm_word(t, word, wl, out, s);
            wl = 0;
        }
    }
    if (wl) wpm_word(t, word, wl, out, s);
}
