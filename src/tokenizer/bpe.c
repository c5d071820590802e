/* Byte-level BPE ("gpt2" vocabs).
 *
 * Encoding: the pre-tokenizer splits the text into words with a list of
 * regexes (llama.cpp semantics: each regex refines the pieces the previous
 * one produced; both the matches and the text between them become pieces).
 * Each word's bytes are mapped to GPT-2's printable code points, start as
 * one symbol per byte, and the adjacent pair with the lowest merge rank is
 * merged until no ranked pair is left (ties: leftmost). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

#define MAX_REGEX 6

struct tok_pretok {
    int n;
    pcre2_code *re[MAX_REGEX];
};

/* ---- pre-tokenizer regex lists (from the reference tokenizer configs) ---- */

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3_HEAD "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define RE_LLAMA3_TAIL "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3 RE_LLAMA3_HEAD "\\p{N}{1,3}" RE_LLAMA3_TAIL
#define RE_QWEN2 RE_LLAMA3_HEAD "\\p{N}" RE_LLAMA3_TAIL
#define RE_PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

typedef struct pre_def {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    int ignore_merges; /* a word that is itself a token skips merging */
    const char *re[MAX_REGEX];
} pre_def;

static const pre_def k_pre[] = {
    {"default", 0, {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    {"llama3|llama-v3|llama-bpe|falcon3", 1, {RE_LLAMA3}},
    {"dbrx|smaug-bpe|chatglm-bpe", 0, {RE_LLAMA3}},
    {"deepseek-llm",
     0,
     {"[\r\n]",
      "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{"
      "2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}"
      "\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{"
      "13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}"
      "\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{"
      "1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-"
      "\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{"
      "2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{"
      "212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{"
      "2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
      "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{"
      "FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{"
      "10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+", "\\s+$",
      "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}+"}},
    {"deepseek-v3",
     0,
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
      "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}},
    {"deepseek-coder",
     0,
     {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}"}},
    {"falcon", 0, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b", 0, {"\\p{N}", RE_GPT2}},
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v1-en|jina-v2-es|jina-v2-de|jina-v2-code|"
     "roberta-bpe|mpt|olmo|jais|modern-bert",
     0,
     {RE_GPT2}},
    {"qwen2|deepseek-r1-qwen|stablelm2|megrez", 0, {RE_QWEN2}},
    {"poro-chat|bloom|gpt3-finnish", 0, {RE_PORO}},
    {"viking", 0, {RE_PORO, "\\p{N}"}},
    {"tekken",
     1,
     {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z])"
      ")+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"chameleon",
     0,
     {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
      "[\\p{P}!-/:-@\\[-`{-~]", RE_GPT2}},
};

static int name_in(const char *names, const char *name) {
    size_t nl = strlen(name);
    for (const char *p = names;;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == nl && memcmp(p, name, l) == 0) return 1;
        if (!bar) return 0;
        p = bar + 1;
    }
}

/* ---- GPT-2 byte <-> code point mapping ----
 * Printable Latin-1 bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for
 * themselves; the other 68 bytes take code points 256, 257, ... in byte
 * order. */
static void build_byte_map(tokenizer *t) {
    int next = 256;
    for (int i = 0; i < 324; i++) t->cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        int cp = printable ? b : next++;
        t->cp_to_byte[cp] = (int16_t)b;
        char *u = t->byte_enc[b];
        if (cp < 0x80) {
            u[0] = (char)cp;
            u[1] = 0;
        } else {
            u[0] = (char)(0xc0 | (cp >> 6));
            u[1] = (char)(0x80 | (cp & 0x3f));
            u[2] = 0;
        }
        t->byte_enc_tok[b] = tok_strmap_get(&t->map, t, u, strlen(u));
    }
}

kiln_status tok_bpe_init(tokenizer *t, const gguf_file *f, const char *pre) {
    build_byte_map(t);

    const pre_def *def = &k_pre[0];
    if (pre) {
        def = NULL;
        for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0] && !def; i++)
            if (name_in(k_pre[i].names, pre)) def = &k_pre[i];
        if (!def) { return base_fail(KILN_ERR_FORMAT, "unknown pre-tokenizer type '%s'", pre); }
        if (strcmp(pre, "chameleon") == 0) t->add_bos = 1;
        if (strcmp(pre, "chatglm-bpe") == 0) t->bos = -1;
    }
    t->ignore_merges = def->ignore_merges;

    t->pre = calloc(1, sizeof *t->pre);
    if (!t->pre) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    for (int i = 0; i < MAX_REGEX && def->re[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)def->re[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof msg);
            return base_fail(KILN_ERR_FORMAT, "pre-tokenizer regex %d: %s at %zu", i, (const char *)msg, (size_t)eo);
        }
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional speed-up; the interpreter is the fallback */
        t->pre->re[t->pre->n++] = re;
    }

    const gguf_kv *kv = gguf_find(f, "tokenizer.ggml.merges");
    if (!kv || kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING) {
        return base_fail(KILN_ERR_FORMAT, "gpt2 vocab without tokenizer.ggml.merges string array");
    }
    if (kv->n > INT32_MAX / 2 || tok_pairmap_init(&t->merges, (uint32_t)kv->n) != 0) {
        return base_fail(KILN_ERR_NOMEM, "out of memory for %llu merges", (unsigned long long)kv->n);
    }
    char buf[512];
    for (uint64_t i = 0; i < kv->n; i++) {
        gguf_str m = gguf_arr_str(kv, i);
        /* "left right", split at the first space after the first byte */
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp || m.len > sizeof buf) continue;
        size_t ll = (size_t)(sp - m.ptr), rl = m.len - ll - 1;
        int32_t a = tok_strmap_get(&t->map, t, m.ptr, ll);
        int32_t b = tok_strmap_get(&t->map, t, sp + 1, rl);
        if (a < 0 || b < 0) continue;
        memcpy(buf, m.ptr, ll);
        memcpy(buf + ll, sp + 1, rl);
        tok_pairmap_put(&t->merges, a, b, (int32_t)i, tok_strmap_get(&t->map, t, buf, ll + rl));
    }
    return 0;
}

void tok_bpe_free(tokenizer *t) {
    if (t->pre) {
        for (int i = 0; i < t->pre->n; i++) pcre2_code_free(t->pre->re[i]);
        free(t->pre);
        t->pre = NULL;
    }
    tok_pairmap_free(&t->merges);
}

/* ---- pre-tokenization ---- */

typedef struct span {
    uint32_t start, len;
    uint32_t raw; /* invalid UTF-8 byte: kept as its own word, never matched */
} span;

/* Length of the valid UTF-8 sequence at s (n bytes available), 0 if invalid
 * (overlong, surrogate, beyond U+10FFFF or truncated). */
static size_t utf8_valid(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t l;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
        l = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        l = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        l = 4;
        cp = c & 0x07;
    } else
        return 0;
    if (l > n) return 0;
    for (size_t i = 1; i < l; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((l == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (l == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return l;
}

/* Splits text into words; returns the span array (count in *n) or NULL. */
static span *pretokenize(const tokenizer *t, const char *text, size_t len, size_t *n, tok_scratch *s) {
    span *a = tok_scratch_get(s, 0, (len + 1) * sizeof *a);
    span *b = tok_scratch_get(s, 1, (len + 1) * sizeof *b);
    if (!a || !b) return NULL;

    /* valid runs, and every invalid byte alone */
    size_t na = 0, run = 0;
    for (size_t i = 0; i < len;) {
        size_t l = utf8_valid((const uint8_t *)text + i, len - i);
        if (l) {
            i += l;
            continue;
        }
        if (i > run) a[na++] = (span){(uint32_t)run, (uint32_t)(i - run), 0};
        a[na++] = (span){(uint32_t)i, 1, 1};
        run = ++i;
    }
    if (len > run) a[na++] = (span){(uint32_t)run, (uint32_t)(len - run), 0};

    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) {
        s->oom = 1;
        return NULL;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);

    for (int r = 0; r < t->pre->n; r++) {
        size_t nb = 0;
        for (size_t k = 0; k < na; k++) {
            span f = a[k];
            if (f.raw) {
                b[nb++] = f;
                continue;
            }
            PCRE2_SPTR subj = (PCRE2_SPTR)text + f.start;
            size_t pos = 0, prev = 0;
            while (pos < f.len) {
                int rc = pcre2_match(t->pre->re[r], subj, f.len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
                if (rc < 0) break;
                size_t ms = ov[0], me = ov[1];
                if (me == ms) { /* empty match: try again one character on */
                    pos = ms + tok_utf8_len(subj[ms]);
                    continue;
                }
                if (ms > prev) b[nb++] = (span){f.start + (uint32_t)prev, (uint32_t)(ms - prev), 0};
                b[nb++] = (span){f.start + (uint32_t)ms, (uint32_t)(me - ms), 0};
                prev = pos = me;
            }
            if (prev < f.len) b[nb++] = (span){f.start + (uint32_t)prev, (uint32_t)(f.len - prev), 0};
        }
        span *tmp = a;
        a = b;
        b = tmp;
        na = nb;
    }
    pcre2_match_data_free(md);
    *n = na;
    return a;
}

/* ---- merging ---- */

typedef struct bpe_sym {
    int32_t prev, next;
    uint32_t n; /* bytes of the original word covered; 0 once merged away */
    int32_t id; /* token id, -1 if the byte has no token */
} bpe_sym;

static void try_pair(const tokenizer *t, bpe_sym *sym, int32_t l, int32_t r, tok_pair *heap, size_t *nh) {
    if (l < 0 || r < 0 || sym[l].id < 0 || sym[r].id < 0) return;
    int32_t result;
    int32_t rank = tok_pairmap_get(&t->merges, sym[l].id, sym[r].id, &result);
    if (rank < 0) return;
    tok_heap_push(heap, nh, (tok_pair){-(float)rank, l, r, result, sym[l].n, sym[r].n});
}

static void bpe_word(const tokenizer *t, const uint8_t *w, size_t len, tok_vec *out, tok_scratch *s) {
    if (t->ignore_merges) {
        char *enc = tok_scratch_get(s, 2, len * 2);
        if (!enc) return;
        size_t el = 0;
        for (size_t i = 0; i < len; i++)
            for (const char *c = t->byte_enc[w[i]]; *c; c++) enc[el++] = *c;
        int32_t id = tok_strmap_get(&t->map, t, enc, el);
        if (id >= 0) {
            tok_vec_push(out, id);
            return;
        }
    }

    bpe_sym *sym = tok_scratch_get(s, 3, len * sizeof *sym);
    tok_pair *heap = tok_scratch_get(s, 4, 3 * len * sizeof *heap);
    if (!sym || !heap) return;
    for (size_t i = 0; i < len; i++)
        sym[i] = (bpe_sym){(int32_t)i - 1, i + 1 == len ? -1 : (int32_t)i + 1, 1, t->byte_enc_tok[w[i]]};

    size_t nh = 0;
    for (size_t i = 1; i < len; i++) try_pair(t, sym, (int32_t)i - 1, (int32_t)i, heap, &nh);
    while (nh > 0) {
        tok_pair p = tok_heap_pop(heap, &nh);
        bpe_sym *l = &sym[p.left], *r = &sym[p.right];
        if (l->n != p.ln || r->n != p.rn) continue; /* stale */
        l->n += r->n;
        l->id = p.result;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = p.left;
        try_pair(t, sym, l->prev, p.left, heap, &nh);
        try_pair(t, sym, p.left, l->next, heap, &nh);
    }
    /* a symbol without a token is a byte the vocabulary cannot spell: dropped,
     * as the reference does */
    for (int32_t i = 0; i != -1; i = sym[i].next)
        if (sym[i].id >= 0) tok_vec_push(out, sym[i].id);
}

void tok_bpe_encode(const tokenizer *t, const char *text, size_t len, tok_vec *out, tok_scratch *s) {
    if (len == 0) return;
    size_t nw;
    span *w = pretokenize(t, text, len, &nw, s);
    if (!w) return;
    for (size_t i = 0; i < nw; i++) bpe_word(t, (const uint8_t *)text + w[i].start, w[i].len, out, s);
}
