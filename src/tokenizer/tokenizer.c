/* Vocabulary loading, special-token handling, encode dispatch, pieces and
 * the streaming detokenizer.  The per-model algorithms live in spm.c,
 * bpe.c and wpm.c. */
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

#define SPACE_MARK "\xe2\x96\x81" /* U+2581, SentencePiece's visible space */

/* End-of-turn spellings, in byte order: the reference picks the first one
 * present (it walks its sorted map) as EOT when the file names none. */
static const char *const k_eot_names[] = {
    "<EOT>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end|>",
    "<|eot_id|>",
    "<|im_end|>",
    "<\xef\xbd\x9c"
    "end" SPACE_MARK "of" SPACE_MARK "sentence\xef\xbd\x9c>",
};
/* Tokens that end generation whatever the metadata says (Gemma 4 ends a
 * turn with <turn|>, and a tool call where its response would begin). */
static const char *const k_eog_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",    "<end_of_turn>", "<|endoftext|>",    "<|eom_id|>",
    "<EOT>",      "<turn|>",    "<|return|>", "<|call|>",      "<|tool_response>",
};
/* The harmony format's (gpt-oss) structure tokens: written out as text, as
 * the reference does, so a reply's channels and recipients can be read. */
static const char *const k_harmony_names[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

static int32_t find(const tokenizer *t, const char *s) { return tok_strmap_get(&t->map, t, s, strlen(s)); }

/* ---- pieces ---- */

/* Writes the bytes of token id (special rendering) into dst, which has
 * room for 4 * text length + 1; returns the count. */
static size_t make_piece(const tokenizer *t, int32_t id, char *dst) {
    size_t len;
    const char *s = tok_str(t, id, &len);
    int ty = t->type[id];
    if (ty == TOK_T_CONTROL || ty == TOK_T_UNKNOWN || ty == TOK_T_USER_DEFINED) {
        memcpy(dst, s, len);
        return len;
    }
    if (t->kind == TOK_BPE) {
        if (ty != TOK_T_NORMAL) return 0;
        size_t n = 0;
        for (size_t i = 0; i < len;) {
            size_t cl = tok_utf8_len((uint8_t)s[i]);
            if (cl > len - i) cl = len - i;
            uint32_t cp = (uint8_t)s[i];
            if (cl == 2) cp = (cp & 0x1f) << 6 | ((uint8_t)s[i + 1] & 0x3f);
            int b = cl <= 2 && cp < 324 ? t->cp_to_byte[cp] : -1;
            if (b >= 0)
                dst[n++] = (char)b;
            else {
                memcpy(dst + n, s + i, cl);
                n += cl;
            } /* not a mapped byte: keep as is */
            i += cl;
        }
        return n;
    }
    if (ty == TOK_T_BYTE) {
        /* "<0xXX>" */
        if (len == 6 && memcmp(s, "<0x", 3) == 0) {
            dst[0] = (char)strtol((char[3]){s[3], s[4], 0}, NULL, 16);
            return 1;
        }
        return 0;
    }
    if (ty != TOK_T_NORMAL) return 0;
    size_t n = 0, i = 0;
    if (t->kind == TOK_WPM && t->wpm_cont[0]) { /* "##" style: continuation bare, words spaced */
        if (len >= 2 && memcmp(s, "##", 2) == 0)
            i = 2;
        else
            dst[n++] = ' ';
    }
    for (; i < len; i++) {
        if (i + 3 <= len && memcmp(s + i, SPACE_MARK, 3) == 0) {
            dst[n++] = ' ';
            i += 2;
        } else {
            dst[n++] = s[i];
        }
    }
    return n;
}

static int build_pieces(tokenizer *t) {
    size_t total = 0;
    for (int32_t id = 0; id < t->n; id++) total += t->off[id + 1] - t->off[id] + 1;
    t->piece = malloc(total + 1);
    t->piece_off = malloc(((size_t)t->n + 1) * sizeof *t->piece_off);
    if (!t->piece || !t->piece_off) return -1;
    size_t pos = 0;
    for (int32_t id = 0; id < t->n; id++) {
        t->piece_off[id] = (uint32_t)pos;
        size_t l = make_piece(t, id, t->piece + pos);
        if ((int32_t)l > t->max_piece) t->max_piece = (int32_t)l;
        pos += l;
    }
    t->piece_off[t->n] = (uint32_t)pos;
    return 0;
}

/* ---- loading ---- */

static int32_t special_id(const gguf_file *f, const tokenizer *t, const char *key, int32_t def) {
    int64_t v = gguf_get_int(f, key, -1);
    if (v >= 0 && v < t->n) return (int32_t)v;
    return def >= 0 && def < t->n ? def : -1;
}

/* Special tokens sort longest first, then by id (a stable order). */
typedef struct len_id {
    uint32_t len;
    int32_t id;
} len_id;

static int len_id_cmp(const void *a, const void *b) {
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int build_special_list(tokenizer *t) {
    int32_t n = 0;
    for (int32_t id = 0; id < t->n; id++) {
        int ty = t->type[id];
        if (ty == TOK_T_CONTROL || ty == TOK_T_USER_DEFINED || ty == TOK_T_UNKNOWN) n++;
    }
    len_id *tmp = malloc(((size_t)n + 1) * sizeof *tmp);
    t->special = malloc(((size_t)n + 1) * sizeof *t->special);
    if (!tmp || !t->special) {
        free(tmp);
        return -1;
    }
    n = 0;
    for (int32_t id = 0; id < t->n; id++) {
        int ty = t->type[id];
        if (ty == TOK_T_CONTROL || ty == TOK_T_USER_DEFINED || ty == TOK_T_UNKNOWN)
            tmp[n++] = (len_id){t->off[id + 1] - t->off[id], id};
    }
    qsort(tmp, (size_t)n, sizeof *tmp, len_id_cmp);
    for (int32_t i = 0; i < n; i++) t->special[i] = tmp[i].id;
    t->n_special = n;
    free(tmp);
    return 0;
}

kiln_status tok_load(const gguf_file *f, tokenizer **out) {
    *out = NULL;

    char model[32];
    if (!gguf_get_cstr(f, "tokenizer.ggml.model", model, sizeof model, NULL)) {
        return base_fail(KILN_ERR_FORMAT, "no tokenizer.ggml.model in file");
    }
    enum tok_kind kind;
    if (strcmp(model, "llama") == 0)
        kind = TOK_SPM;
    else if (strcmp(model, "gpt2") == 0)
        kind = TOK_BPE;
    else if (strcmp(model, "bert") == 0)
        kind = TOK_WPM;
    else { return base_fail(KILN_ERR_FORMAT, "unsupported tokenizer model '%s'", model); }

    const gguf_kv *tk = gguf_find(f, "tokenizer.ggml.tokens");
    if (!tk || tk->type != GGUF_ARRAY || tk->arr_type != GGUF_STRING || tk->n == 0 || tk->n > INT32_MAX / 4) {
        return base_fail(KILN_ERR_FORMAT, "tokenizer.ggml.tokens missing or not a non-empty string array");
    }
    const gguf_kv *sc = gguf_find(f, "tokenizer.ggml.scores");
    if (sc && (sc->type != GGUF_ARRAY || sc->arr_type != GGUF_F32 || sc->n != tk->n)) {
        return base_fail(KILN_ERR_FORMAT, "tokenizer.ggml.scores is not an f32 array of %llu",
                         (unsigned long long)tk->n);
    }
    const gguf_kv *ty = gguf_find(f, "tokenizer.ggml.token_type");
    if (ty && (ty->type != GGUF_ARRAY || (ty->arr_type != GGUF_I32 && ty->arr_type != GGUF_U32) || ty->n != tk->n)) {
        return base_fail(KILN_ERR_FORMAT, "tokenizer.ggml.token_type is not an i32 array of %llu",
                         (unsigned long long)tk->n);
    }

    tokenizer *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->kind = kind;
    t->n = (int32_t)tk->n;

    /* texts into one arena; empty texts get a unique placeholder, as the
     * reference loader does, so lookups never match "" */
    size_t total = 0;
    for (int32_t i = 0; i < t->n; i++) {
        uint64_t l = gguf_arr_str(tk, (uint64_t)i).len;
        total += l ? l : 24;
    }
    if (total > UINT32_MAX) {
        free(t);
        return base_fail(KILN_ERR_FORMAT, "token texts too large (%zu bytes)", total);
    }
    t->arena = malloc(total + 1);
    t->off = malloc(((size_t)t->n + 1) * sizeof *t->off);
    t->type = malloc((size_t)t->n);
    t->attr = calloc((size_t)t->n, 1);
    if (sc) t->score = malloc((size_t)t->n * sizeof *t->score);
    if (!t->arena || !t->off || !t->type || !t->attr || (sc && !t->score)) goto oom;
    size_t pos = 0;
    for (int32_t i = 0; i < t->n; i++) {
        gguf_str s = gguf_arr_str(tk, (uint64_t)i);
        t->off[i] = (uint32_t)pos;
        if (s.len) {
            memcpy(t->arena + pos, s.ptr, s.len);
            pos += s.len;
        } else {
            pos += (size_t)snprintf(t->arena + pos, 24, "[EMPTY_%d]", (int)i);
        }
        if ((int32_t)(pos - t->off[i]) > t->max_len) t->max_len = (int32_t)(pos - t->off[i]);
        if (t->score) t->score[i] = (float)gguf_arr_float(sc, (uint64_t)i);
        int64_t v = ty ? gguf_arr_int(ty, (uint64_t)i) : TOK_T_NORMAL;
        t->type[i] = (uint8_t)(v >= 0 && v <= TOK_T_BYTE ? v : TOK_T_UNDEFINED);
    }
    t->off[t->n] = (uint32_t)pos;
    if (tok_strmap_build(&t->map, t) != 0) goto oom;

    /* model-type defaults, then metadata */
    int32_t d_bos = -1, d_eos = -1, d_unk = -1, d_sep = -1, d_pad = -1;
    if (kind == TOK_SPM) {
        d_bos = 1;
        d_eos = 2;
        d_unk = 0;
        t->add_bos = 1;
        t->add_space_prefix = 1;
    }
    if (kind == TOK_WPM) {
        d_bos = 101;
        d_unk = 100;
        d_sep = 102;
        d_pad = 0;
        t->add_bos = 1;
    }
    t->bos = special_id(f, t, "tokenizer.ggml.bos_token_id", d_bos);
    if (kind == TOK_WPM) t->bos = special_id(f, t, "tokenizer.ggml.cls_token_id", t->bos);
    t->eos = special_id(f, t, "tokenizer.ggml.eos_token_id", d_eos);
    t->eot = special_id(f, t, "tokenizer.ggml.eot_token_id", -1);
    t->eom = special_id(f, t, "tokenizer.ggml.eom_token_id", -1);
    t->unk = special_id(f, t, "tokenizer.ggml.unknown_token_id", d_unk);
    t->sep = special_id(f, t, "tokenizer.ggml.seperator_token_id", d_sep);
    t->pad = special_id(f, t, "tokenizer.ggml.padding_token_id", d_pad);

    char pre[64];
    const char *pre_p = gguf_get_cstr(f, "tokenizer.ggml.pre", pre, sizeof pre, NULL);
    kiln_status st = kind == TOK_BPE ? tok_bpe_init(t, f, pre_p) : KILN_OK;
    if (st) {
        tok_free(t);
        return st;
    }
    t->add_bos = gguf_get_bool(f, "tokenizer.ggml.add_bos_token", t->add_bos);
    t->add_eos = gguf_get_bool(f, "tokenizer.ggml.add_eos_token", t->add_eos);
    t->add_space_prefix = gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", t->add_space_prefix);

    /* end of turn / end of generation by text; such tokens count as control */
    for (size_t i = 0; i < sizeof k_eot_names / sizeof k_eot_names[0] && t->eot < 0; i++) {
        int32_t id = find(t, k_eot_names[i]);
        if (id >= 0) {
            t->eot = id;
            t->type[id] = TOK_T_CONTROL;
        }
    }
    for (size_t i = 0; i < sizeof k_eog_names / sizeof k_eog_names[0]; i++) {
        int32_t id = find(t, k_eog_names[i]);
        if (id >= 0) {
            t->attr[id] |= TOK_A_EOG;
            t->type[id] = TOK_T_CONTROL;
        }
    }
    if (t->eos >= 0) t->attr[t->eos] |= TOK_A_EOG;
    if (t->eot >= 0) t->attr[t->eot] |= TOK_A_EOG;
    if (t->eom >= 0) t->attr[t->eom] |= TOK_A_EOG;
    for (size_t i = 0; i < sizeof k_harmony_names / sizeof k_harmony_names[0]; i++) {
        int32_t id = find(t, k_harmony_names[i]);
        if (id >= 0) t->type[id] = TOK_T_USER_DEFINED;
    }
    /* harmony ends a message with <|end|> and the reply with <|return|> or
     * <|call|>: with both of those, <|end|> is text, not an end */
    const int32_t end_id = find(t, "<|end|>");
    if (end_id >= 0 && find(t, "<|return|>") >= 0 && find(t, "<|call|>") >= 0) {
        t->attr[end_id] &= ~TOK_A_EOG;
        t->type[end_id] = TOK_T_USER_DEFINED;
        if (t->eot == end_id) t->eot = -1;
    }

    if (build_special_list(t) != 0) goto oom;

    /* Phi-3 checkpoints strip whitespace after their special tokens (the
     * reference keys this on the model name) */
    char name[128];
    if (gguf_get_cstr(f, "general.name", name, sizeof name, NULL)) {
        for (char *c = name; *c; c++) *c = (char)tolower((unsigned char)*c);
        if (strstr(name, "phi-3") || strstr(name, "phi3")) {
            for (int32_t i = 0; i < t->n_special; i++) t->attr[t->special[i]] |= TOK_A_RSTRIP;
            int32_t id = find(t, "</s>");
            if (id >= 0) t->attr[id] |= TOK_A_RSTRIP;
            const char *keep[] = {"<unk>", "<s>", "<|endoftext|>"};
            for (size_t i = 0; i < 3; i++)
                if ((id = find(t, keep[i])) >= 0) t->attr[id] &= (uint8_t)~TOK_A_RSTRIP;
        }
    }

    /* ModernBERT's [MASK] takes the whitespace before it (lstrip in its
     * tokenizer; the reference keys this on the pre-tokenizer name) */
    if (kind == TOK_BPE && pre_p && strcmp(pre_p, "modern-bert") == 0) {
        int32_t id = find(t, "[MASK]");
        if (id >= 0) t->attr[id] |= TOK_A_LSTRIP;
    }

    if (kind == TOK_SPM) {
        for (int b = 0; b < 256; b++) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            int32_t id = find(t, hex);
            if (id < 0) id = tok_strmap_get(&t->map, t, (char[1]){(char)b}, 1);
            t->byte_tok[b] = id;
        }
    }
    if (kind == TOK_WPM) {
        /* llama.cpp GGUFs mark word starts with U+2581; raw BERT vocabs mark
         * continuations with "##" instead */
        int marks = 0, hashes = 0;
        for (int32_t id = 0; id < t->n; id++) {
            size_t l;
            const char *s = tok_str(t, id, &l);
            marks += l > 3 && memcmp(s, SPACE_MARK, 3) == 0;
            hashes += l > 2 && memcmp(s, "##", 2) == 0;
        }
        t->wpm_start = hashes > marks ? "" : SPACE_MARK;
        t->wpm_cont = hashes > marks ? "##" : "";
        if (t->unk < 0) {
            tok_free(t);
            return base_fail(KILN_ERR_FORMAT, "bert vocab without an unknown token");
        }
    }
    if (build_pieces(t) != 0) goto oom;
    *out = t;
    return KILN_OK;

oom:
    tok_free(t);
    return base_fail(KILN_ERR_NOMEM, "out of memory loading the vocabulary");
}

void tok_free(tokenizer *t) {
    if (!t) return;
    if (t->kind == TOK_BPE) tok_bpe_free(t);
    tok_strmap_free(&t->map);
    free(t->arena);
    free(t->off);
    free(t->score);
    free(t->type);
    free(t->attr);
    free(t->piece);
    free(t->piece_off);
    free(t->special);
    free(t);
}

/* ---- accessors ---- */

enum tok_kind tok_kind(const tokenizer *t) { return t->kind; }
int32_t tok_n_vocab(const tokenizer *t) { return t->n; }
int32_t tok_bos(const tokenizer *t) { return t->bos; }
int32_t tok_eos(const tokenizer *t) { return t->eos; }
int32_t tok_eot(const tokenizer *t) { return t->eot; }
int32_t tok_pad(const tokenizer *t) { return t->pad; }
int32_t tok_unk(const tokenizer *t) { return t->unk; }
int32_t tok_sep(const tokenizer *t) { return t->sep; }
int tok_add_bos(const tokenizer *t) { return t->add_bos; }
int tok_add_eos(const tokenizer *t) { return t->add_eos; }
int32_t tok_max_piece(const tokenizer *t) { return t->max_piece; }

int tok_is_eog(const tokenizer *t, int32_t id) { return id >= 0 && id < t->n && (t->attr[id] & TOK_A_EOG); }

const char *tok_text(const tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n) return NULL;
    return tok_str(t, id, len);
}

int tok_type(const tokenizer *t, int32_t id) { return id >= 0 && id < t->n ? t->type[id] : TOK_T_UNDEFINED; }

int32_t tok_find(const tokenizer *t, const char *s, size_t len) { return tok_strmap_get(&t->map, t, s, len); }

/* ---- encoding ---- */

typedef struct frag {
    int32_t id;          /* special token, or -1 for text */
    uint32_t start, len; /* text span */
} frag;

/* Splits the text around special-token occurrences, one token at a time
 * from the longest (the reference's order).  Control and unknown tokens
 * take part only with parse_special.  Returns the fragment array. */
static frag *partition(const tokenizer *t, const char *text, size_t len, int parse_special, size_t *nf,
                       tok_scratch *s) {
    /* fragments are non-empty and disjoint, so there are at most len */
    size_t cap = len + 1;
    frag *buf = tok_scratch_get(s, 5, 2 * cap * sizeof *buf);
    if (!buf) return NULL;
    frag *a = buf, *b = buf + cap;
    size_t na = 0;
    a[na++] = (frag){-1, 0, (uint32_t)len};

    for (int32_t k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        if (!parse_special && t->type[id] != TOK_T_USER_DEFINED) continue;
        size_t sl;
        const char *st = tok_str(t, id, &sl);
        if (sl == 0 || sl > len) continue;
        int hit = 0;
        for (size_t i = 0; i < na && !hit; i++)
            hit = a[i].id < 0 && memmem(text + a[i].start, a[i].len, st, sl) != NULL;
        if (!hit) continue;

        size_t nb = 0;
        for (size_t i = 0; i < na; i++) {
            if (a[i].id >= 0) {
                b[nb++] = a[i];
                continue;
            }
            size_t p = a[i].start, end = a[i].start + a[i].len;
            for (;;) {
                const char *m = p < end ? memmem(text + p, end - p, st, sl) : NULL;
                if (!m) {
                    if (p < end) b[nb++] = (frag){-1, (uint32_t)p, (uint32_t)(end - p)};
                    break;
                }
                size_t ms = (size_t)(m - text), te = ms; /* text before the token ends at te */
                if (t->attr[id] & TOK_A_LSTRIP)
                    while (te > p && isspace((unsigned char)text[te - 1])) te--;
                if (te > p) b[nb++] = (frag){-1, (uint32_t)p, (uint32_t)(te - p)};
                b[nb++] = (frag){id, (uint32_t)ms, (uint32_t)sl};
                p = ms + sl;
                if (t->attr[id] & TOK_A_RSTRIP)
                    while (p < end && isspace((unsigned char)text[p])) p++;
            }
        }
        frag *tmp = a;
        a = b;
        b = tmp;
        na = nb;
    }
    *nf = na;
    return a;
}

int32_t tok_encode(const tokenizer *t, const char *text, size_t len, int add_special, int parse_special, int32_t *out,
                   int32_t cap) {
    if (len > TOK_MAX_TEXT) return TOK_ERR_NOMEM;
    tok_scratch s = {0};
    tok_vec v = {0};
    size_t nf = 0;
    frag *fr = len ? partition(t, text, len, parse_special, &nf, &s) : NULL;
    if (len && !fr) goto fail;

    if (add_special && (t->kind == TOK_WPM || t->add_bos) && t->bos >= 0) tok_vec_push(&v, t->bos);
    int prev_special = 1; /* SPM: the dummy prefix goes before the first text and after specials */
    for (size_t i = 0; i < nf && !v.oom && !s.oom; i++) {
        if (fr[i].id >= 0) {
            tok_vec_push(&v, fr[i].id);
            prev_special = 1;
            continue;
        }
        const char *p = text + fr[i].start;
        switch (t->kind) {
        case TOK_SPM: tok_spm_encode(t, p, fr[i].len, t->add_space_prefix && prev_special, &v, &s); break;
        case TOK_BPE: tok_bpe_encode(t, p, fr[i].len, &v, &s); break;
        case TOK_WPM: tok_wpm_encode(t, p, fr[i].len, &v, &s); break;
        }
        prev_special = 0;
    }
    if (add_special) {
        if (t->kind == TOK_WPM) {
            if (t->sep >= 0) tok_vec_push(&v, t->sep);
        } else if (t->add_eos && t->eos >= 0) {
            tok_vec_push(&v, t->eos);
        }
    }
    if (v.oom || s.oom) goto fail;

    int32_t n = v.n;
    if (n > 0 && n <= cap) memcpy(out, v.v, (size_t)n * sizeof *out);
    free(v.v);
    tok_scratch_free(&s);
    return n <= cap ? n : -n;

fail:
    free(v.v);
    tok_scratch_free(&s);
    return TOK_ERR_NOMEM;
}

int32_t tok_encode_alloc(const tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                         int32_t **out) {
    *out = NULL;
    /* a byte gives at most one token, plus the specials add_special adds */
    int32_t cap = len + 8 < (size_t)INT32_MAX ? (int32_t)(len + 8) : INT32_MAX;
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t *ids = malloc((size_t)cap * sizeof *ids);
        if (!ids) return TOK_ERR_NOMEM;
        int32_t n = tok_encode(t, text, len, add_special, parse_special, ids, cap);
        if (n >= 0) {
            if (n)
                *out = ids;
            else
                free(ids);
            return n;
        }
        free(ids);
        if (n == TOK_ERR_NOMEM) return n;
        cap = -n;
    }
    return TOK_ERR_NOMEM;
}

/* ---- decoding ---- */

static const char *piece_of(const tokenizer *t, int32_t id, int special, size_t *len) {
    *len = 0;
    if (id < 0 || id >= t->n) return "";
    int ty = t->type[id];
    if (!special && (ty == TOK_T_CONTROL || ty == TOK_T_UNKNOWN)) return "";
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return t->piece + t->piece_off[id];
}

int32_t tok_token_to_piece(const tokenizer *t, int32_t id, char *buf, int32_t cap, int special) {
    size_t len;
    const char *p = piece_of(t, id, special, &len);
    if ((size_t)cap < len) return -(int32_t)len;
    memcpy(buf, p, len);
    return (int32_t)len;
}

void tok_stream_init(tok_stream *s, const tokenizer *t, int special, int strip_leading_space) {
    memset(s, 0, sizeof *s);
    s->t = t;
    s->special = special;
    s->strip_space = strip_leading_space && t->kind == TOK_SPM && t->add_space_prefix;
}

int32_t tok_stream_put(tok_stream *s, int32_t id, char *out, int32_t cap) {
    size_t len;
    const char *p = piece_of(s->t, id, s->special, &len);
    size_t need = (size_t)s->n_pend + len;
    if (need > (size_t)cap) return -(int32_t)need;
    if (len == 0) return 0;

    size_t skip = 0;
    if (!s->started && s->n_pend == 0 && s->strip_space && p[0] == ' ') skip = 1;
    s->started = 1;
    memcpy(out, s->pend, (size_t)s->n_pend);
    memcpy(out + s->n_pend, p + skip, len - skip);
    size_t n = (size_t)s->n_pend + len - skip;
    s->n_pend = 0;

    /* hold back a trailing lead byte whose continuation bytes have not all
     * arrived (looking back at most three bytes) */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        uint8_t c = (uint8_t)out[n - back];
        if ((c & 0xc0) == 0x80) continue; /* continuation: keep looking */
        if (c >= 0xc0 && tok_utf8_len(c) > back) {
            memcpy(s->pend, out + n - back, back);
            s->n_pend = (int)back;
            n -= back;
        }
        break;
    }
    return (int32_t)n;
}

int32_t tok_stream_flush(tok_stream *s, char *out, int32_t cap) {
    int32_t n = s->n_pend;
    if (n > cap) return -n;
    memcpy(out, s->pend, (size_t)n);
    tok_stream_init(s, s->t, s->special, s->strip_space);
    return n;
}

int32_t tok_decode(const tokenizer *t, const int32_t *ids, int32_t n, char *out, int32_t cap, int special,
                   int strip_leading_space) {
    tok_stream s;
    tok_stream_init(&s, t, special, strip_leading_space);
    int32_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t r = tok_stream_put(&s, ids[i], out + pos, cap - pos);
        if (r < 0) {
            /* too small: report an upper bound of the whole size */
            size_t total = (size_t)pos + (size_t)s.n_pend, l;
            for (int32_t j = i; j < n; j++) {
                piece_of(t, ids[j], special, &l);
                total += l;
            }
            return -(int32_t)total;
        }
        pos += r;
    }
    int32_t r = tok_stream_flush(&s, out + pos, cap - pos);
    if (r < 0) return -(pos - r);
    return pos + r;
}
