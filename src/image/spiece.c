/* SentencePiece .model reader (a small protobuf wire-format reader of the
 * few fields used) and the unigram encoder.
 *
 * Fields read (sentencepiece_model.proto):
 *   ModelProto    1 pieces (repeated), 2 trainer_spec, 3 normalizer_spec
 *   SentencePiece 1 piece (string), 2 score (float), 3 type (enum)
 *   TrainerSpec   3 model_type (1 = unigram), 35 byte_fallback,
 *                 24 treat_whitespace_as_suffix, 40..43 unk/bos/eos/pad ids
 *   NormalizerSpec 2 precompiled_charsmap, 3 add_dummy_prefix,
 *                 4 remove_extra_whitespaces, 5 escape_whitespaces
 * The character map is a uint32 trie size, a double-array trie (darts-clone
 * units) of input byte strings whose values index NUL-terminated
 * replacements in the pool after it. */
#include "image/spiece.h"

#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { P_NORMAL = 1, P_UNKNOWN = 2, P_CONTROL = 3, P_USER = 4, P_UNUSED = 5, P_BYTE = 6 };

#define UNK_PENALTY 10.0f
#define MAX_PIECE_BYTES 256

typedef struct piece {
    const char *s;
    uint32_t len;
    float score;
    int type;
} piece;

struct image_spiece {
    piece *pieces;
    int n;
    char *strings;
    int32_t *hash; /* open addressing over piece strings: id + 1, 0 = empty */
    uint32_t hash_mask;
    int max_len; /* longest matchable piece, bytes */
    float min_score, max_score;
    int unk, eos, bos, pad;
    int byte_fallback;
    int add_dummy_prefix, remove_extra_ws, escape_ws;
    uint32_t *trie; /* charsmap units */
    uint32_t n_units;
    char *pool; /* replacements, NUL-terminated */
    uint32_t pool_len;
    int byte_piece[256]; /* "<0xXX>" ids when byte_fallback, else -1 */
};

/* ---- protobuf wire format ---- */

typedef struct pb {
    const uint8_t *p, *end;
} pb;

static int pb_varint(pb *r, uint64_t *v) {
    *v = 0;
    for (int s = 0; s < 70; s += 7) {
        if (r->p >= r->end) return -1;
        uint8_t b = *r->p++;
        *v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

/* The next field: its number, wire type and, for wire type 2, its bytes. */
static int pb_next(pb *r, uint32_t *field, int *wire, pb *sub, uint64_t *val) {
    uint64_t key;
    if (pb_varint(r, &key)) return -1;
    *field = (uint32_t)(key >> 3);
    *wire = (int)(key & 7);
    switch (*wire) {
    case 0: return pb_varint(r, val);
    case 1:
        if (r->end - r->p < 8) return -1;
        memcpy(val, r->p, 8);
        r->p += 8;
        return 0;
    case 2: {
        uint64_t n;
        if (pb_varint(r, &n) || n > (uint64_t)(r->end - r->p)) return -1;
        sub->p = r->p;
        sub->end = r->p + n;
        r->p += n;
        return 0;
    }
    case 5: {
        if (r->end - r->p < 4) return -1;
        uint32_t u;
        memcpy(&u, r->p, 4);
        *val = u;
        r->p += 4;
        return 0;
    }
    default: return -1; /* groups are not used by this schema */
    }
}

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static int lookup(const image_spiece *s, const char *p, size_t n) {
    for (uint32_t h = hash_bytes(p, n) & s->hash_mask;; h = (h + 1) & s->hash_mask) {
        int32_t v = s->hash[h];
        if (!v) return -1;
        const piece *pc = &s->pieces[v - 1];
        if (pc->len == n && !memcmp(pc->s, p, n)) return v - 1;
    }
}

static kiln_status malformed(void) {
    return base_fail(KILN_ERR_FORMAT, "not a SentencePiece model (malformed protobuf)");
}

static kiln_status parse_trainer(image_spiece *s, pb r) {
    uint32_t f;
    int w;
    pb sub;
    uint64_t v = 0;
    while (r.p < r.end) {
        if (pb_next(&r, &f, &w, &sub, &v)) return malformed();
        if (w != 0) continue;
        if (f == 3 && v != 1) {
            return base_fail(KILN_ERR_FORMAT, "SentencePiece model type %llu is not unigram", (unsigned long long)v);
        }
        if (f == 24 && v) {
            return base_fail(KILN_ERR_FORMAT, "SentencePiece treat_whitespace_as_suffix is not supported");
        }
        if (f == 35) s->byte_fallback = v != 0;
        if (f == 40) s->unk = (int)(int32_t)v;
        if (f == 41) s->bos = (int)(int32_t)v;
        if (f == 42) s->eos = (int)(int32_t)v;
        if (f == 43) s->pad = (int)(int32_t)v;
    }
    return KILN_OK;
}

static kiln_status parse_normalizer(image_spiece *s, pb r) {
    uint32_t f;
    int w;
    pb sub;
    uint64_t v = 0;
    while (r.p < r.end) {
        if (pb_next(&r, &f, &w, &sub, &v)) return malformed();
        if (f == 2 && w == 2 && sub.end > sub.p) {
            size_t n = (size_t)(sub.end - sub.p);
            uint32_t ts;
            if (n < 4) goto bad;
            memcpy(&ts, sub.p, 4);
            if (ts % 4 || ts == 0 || ts > n - 4) goto bad;
            s->n_units = ts / 4;
            s->trie = malloc(ts);
            s->pool_len = (uint32_t)(n - 4 - ts);
            s->pool = malloc(s->pool_len + 1);
            if (!s->trie || !s->pool) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
            memcpy(s->trie, sub.p + 4, ts);
            memcpy(s->pool, sub.p + 4 + ts, s->pool_len);
            s->pool[s->pool_len] = 0;
        }
        if (w == 0 && f == 3) s->add_dummy_prefix = v != 0;
        if (w == 0 && f == 4) s->remove_extra_ws = v != 0;
        if (w == 0 && f == 5) s->escape_ws = v != 0;
    }
    return KILN_OK;
bad:
    return base_fail(KILN_ERR_FORMAT, "SentencePiece precompiled character map is malformed");
}

static int parse_piece(pb r, piece *pc) {
    uint32_t f;
    int w;
    pb sub = {NULL, NULL};
    uint64_t v = 0;
    pc->type = P_NORMAL;
    pc->s = NULL;
    pc->len = 0;
    pc->score = 0;
    while (r.p < r.end) {
        if (pb_next(&r, &f, &w, &sub, &v)) return -1;
        if (f == 1 && w == 2) {
            pc->s = (const char *)sub.p;
            pc->len = (uint32_t)(sub.end - sub.p);
        } else if (f == 2 && w == 5) {
            uint32_t u = (uint32_t)v;
            memcpy(&pc->score, &u, 4);
        } else if (f == 3 && w == 0) {
            if (v < 1 || v > 6) return -1;
            pc->type = (int)v;
        }
    }
    return pc->s ? 0 : -1;
}

kiln_status image_spiece_load(const uint8_t *data, size_t len, image_spiece **out) {
    *out = NULL;
    image_spiece *s = calloc(1, sizeof *s);
    if (!s) return base_fail(KILN_ERR_NOMEM, "out of memory");
    s->unk = 0;
    s->bos = 1;
    s->eos = 2;
    s->pad = -1;
    s->add_dummy_prefix = s->remove_extra_ws = s->escape_ws = 1;
    for (int b = 0; b < 256; b++) s->byte_piece[b] = -1;
    pb r = {data, data + len}, sub;
    uint32_t f;
    int w, n = 0;
    kiln_status rc = KILN_OK;
    uint64_t v;
    size_t strbytes = 0;
    /* pass 1: count pieces and their bytes, read the specs */
    while (r.p < r.end && !rc) {
        if (pb_next(&r, &f, &w, &sub, &v))
            rc = malformed();
        else if (f == 1 && w == 2) {
            n++;
            strbytes += (size_t)(sub.end - sub.p) + 1;
        } else if (f == 2 && w == 2)
            rc = parse_trainer(s, sub);
        else if (f == 3 && w == 2)
            rc = parse_normalizer(s, sub);
    }
    if (!rc && (n < 1 || n > (1 << 24))) { rc = base_fail(KILN_ERR_FORMAT, "SentencePiece model has %d pieces", n); }
    if (!rc) {
        uint32_t hs = 1;
        while (hs < 2u * (uint32_t)n) hs <<= 1;
        s->pieces = calloc((size_t)n, sizeof *s->pieces);
        s->strings = malloc(strbytes);
        s->hash = calloc(hs, sizeof *s->hash);
        s->hash_mask = hs - 1;
        if (!s->pieces || !s->strings || !s->hash) { rc = base_fail(KILN_ERR_NOMEM, "out of memory"); }
    }
    /* pass 2: the pieces */
    r.p = data;
    char *sp = s->strings;
    s->min_score = 1e30f;
    s->max_score = -1e30f;
    int found_unk = -1;
    while (!rc && r.p < r.end) {
        if (pb_next(&r, &f, &w, &sub, &v))
            rc = malformed();
        else if (f == 1 && w == 2) {
            piece *pc = &s->pieces[s->n];
            if (parse_piece(sub, pc)) {
                rc = malformed();
                break;
            }
            memcpy(sp, pc->s, pc->len);
            sp[pc->len] = 0;
            pc->s = sp;
            sp += pc->len + 1;
            if (pc->type == P_NORMAL) {
                if (pc->score < s->min_score) s->min_score = pc->score;
                if (pc->score > s->max_score) s->max_score = pc->score;
            }
            if (pc->type == P_UNKNOWN && found_unk < 0) found_unk = s->n;
            if ((pc->type == P_NORMAL || pc->type == P_USER) && pc->len && pc->len <= MAX_PIECE_BYTES &&
                lookup(s, pc->s, pc->len) < 0) {
                uint32_t h = hash_bytes(pc->s, pc->len) & s->hash_mask;
                while (s->hash[h]) h = (h + 1) & s->hash_mask;
                s->hash[h] = s->n + 1;
                if ((int)pc->len > s->max_len) s->max_len = (int)pc->len;
            }
            if (pc->type == P_BYTE && pc->len == 6 && !memcmp(pc->s, "<0x", 3) && pc->s[5] == '>') {
                unsigned b;
                if (sscanf(pc->s + 3, "%2x", &b) == 1) s->byte_piece[b] = s->n;
            }
            s->n++;
        }
    }
    if (!rc && found_unk >= 0) s->unk = found_unk;
    if (!rc && (s->unk < 0 || s->unk >= s->n)) {
        rc = base_fail(KILN_ERR_FORMAT, "SentencePiece model has no unknown piece");
    }
    if (!rc && s->min_score > s->max_score) s->min_score = s->max_score = 0;
    if (!rc && s->eos >= s->n) s->eos = -1;
    if (rc) {
        image_spiece_free(s);
        return rc;
    }
    *out = s;
    return KILN_OK;
}

void image_spiece_free(image_spiece *s) {
    if (!s) return;
    free(s->pieces);
    free(s->strings);
    free(s->hash);
    free(s->trie);
    free(s->pool);
    free(s);
}

int image_spiece_n_pieces(const image_spiece *s) { return s->n; }
int image_spiece_eos(const image_spiece *s) { return s->eos; }
int image_spiece_unk(const image_spiece *s) { return s->unk; }
int image_spiece_pad(const image_spiece *s) { return s->pad >= 0 && s->pad < s->n ? s->pad : -1; }
const char *image_spiece_piece(const image_spiece *s, int id) { return id >= 0 && id < s->n ? s->pieces[id].s : NULL; }

/* ---- normalization ---- */

/* Length of the valid UTF-8 character at p (strict: no overlongs,
 * surrogates or values past U+10FFFF), 0 when malformed. */
static size_t utf8_len(const uint8_t *p, size_t n) {
    if (!n) return 0;
    uint8_t c = p[0];
    if (c < 0x80) return 1;
    size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (!k || c > 0xF4 || k > n) return 0;
    for (size_t i = 1; i < k; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    if (k == 3 && ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0))) return 0;
    if (k == 4 && ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] >= 0x90))) return 0;
    return k;
}

/* darts-clone unit fields */
static int u_leaf(uint32_t u) { return (u >> 8) & 1; }
static uint32_t u_value(uint32_t u) { return u & 0x7FFFFFFFu; }
static uint32_t u_label(uint32_t u) { return u & 0x800000FFu; }
static uint32_t u_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

/* The longest rule of the character map at p (SentencePiece considers the
 * first 32 prefix matches): its length and replacement, or 0. */
static size_t charsmap_match(const image_spiece *s, const uint8_t *p, size_t n, const char **rep) {
    if (!s->trie) return 0;
    size_t best = 0, found = 0;
    uint32_t node = u_offset(s->trie[0]);
    for (size_t i = 0; i < n; i++) {
        node ^= p[i];
        if (node >= s->n_units) break;
        uint32_t u = s->trie[node];
        if (u_label(u) != p[i]) break;
        node ^= u_offset(u);
        if (node >= s->n_units) break;
        if (u_leaf(u)) {
            if (found++ < 32) {
                uint32_t v = u_value(s->trie[node]);
                if (v < s->pool_len) {
                    best = i + 1;
                    *rep = s->pool + v;
                }
            }
        }
    }
    return best;
}

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static int buf_put(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static const char SPACE[] = "\xe2\x96\x81"; /* U+2581 */

/* One normalized unit at p: its replacement text and the bytes consumed. */
static size_t norm_prefix(const image_spiece *s, const uint8_t *p, size_t n, const char **out, size_t *out_len) {
    const char *rep;
    size_t k = charsmap_match(s, p, n, &rep);
    if (k) {
        *out = rep;
        *out_len = strlen(rep);
        return k;
    }
    k = utf8_len(p, n);
    if (!k) { /* a malformed byte becomes U+FFFD */
        *out = "\xef\xbf\xbd";
        *out_len = 3;
        return 1;
    }
    *out = (const char *)p;
    *out_len = k;
    return k;
}

static int normalize(const image_spiece *s, const uint8_t *in, size_t n, buf *o) {
    const char *rep;
    size_t rl;
    if (s->remove_extra_ws)
        while (n) {
            size_t k = norm_prefix(s, in, n, &rep, &rl);
            if (rl != 1 || rep[0] != ' ') break;
            in += k;
            n -= k;
        }
    if (!n) return 0;
    const char *ws = s->escape_ws ? SPACE : " ";
    const size_t wsl = strlen(ws);
    if (s->add_dummy_prefix && buf_put(o, ws, wsl)) return -1;
    int prev_space = s->remove_extra_ws;
    while (n) {
        size_t k = norm_prefix(s, in, n, &rep, &rl);
        while (prev_space && rl && rep[0] == ' ') {
            rep++;
            rl--;
        }
        if (rl) {
            for (size_t i = 0; i < rl; i++)
                if (rep[i] == ' ' ? buf_put(o, ws, wsl) : buf_put(o, rep + i, 1)) return -1;
            prev_space = rep[rl - 1] == ' ';
        }
        in += k;
        n -= k;
        prev_space = prev_space && s->remove_extra_ws;
    }
    if (s->remove_extra_ws)
        while (o->n >= wsl && !memcmp(o->p + o->n - wsl, ws, wsl)) o->n -= wsl;
    return 0;
}

/* ---- Viterbi over the normalized text ---- */

typedef struct node {
    float score;
    int start; /* -1: not reached */
    int id;
} node;

int image_spiece_encode(const image_spiece *s, const char *text, size_t len, int32_t *ids, int cap) {
    buf nb = {NULL, 0, 0};
    if (normalize(s, (const uint8_t *)text, len, &nb)) {
        free(nb.p);
        return -1;
    }
    const size_t n = nb.n;
    if (!n) {
        free(nb.p);
        return 0;
    }
    node *best = malloc((n + 1) * sizeof *best);
    int *path = malloc((n + 1) * sizeof *path);
    if (!best || !path) {
        free(best);
        free(path);
        free(nb.p);
        return -1;
    }
    for (size_t i = 0; i <= n; i++) best[i] = (node){0, -1, -1};
    best[0].start = 0;
    const float unk_score = s->min_score - UNK_PENALTY;
    const uint8_t *t = (const uint8_t *)nb.p;
    for (size_t b = 0; b < n;) {
        size_t ch = utf8_len(t + b, n - b);
        if (!ch) ch = 1;
        const float base = best[b].score;
        int single = 0;
        for (size_t e = b + 1; e <= n && (int)(e - b) <= s->max_len; e++) {
            if (e < n && (t[e] & 0xC0) == 0x80) continue; /* inside a character */
            int id = lookup(s, (const char *)t + b, e - b);
            if (id < 0 || s->pieces[id].type == P_UNUSED) continue;
            float sc = s->pieces[id].type == P_USER ? (float)(e - b) * s->max_score - 0.1f : s->pieces[id].score;
            float cand = base + sc;
            if (best[e].start < 0 || cand > best[e].score) best[e] = (node){cand, (int)b, id};
            if (e - b == ch) single = 1;
        }
        if (!single) {
            float cand = base + unk_score;
            if (best[b + ch].start < 0 || cand > best[b + ch].score) best[b + ch] = (node){cand, (int)b, s->unk};
        }
        b += ch;
    }
    int np = 0;
    for (size_t e = n; e > 0;) {
        path[np++] = (int)e;
        e = (size_t)best[e].start;
    }
    int count = 0;
    int prev_unk = 0;
    for (int k = np - 1; k >= 0; k--) {
        const size_t e = (size_t)path[k], b = (size_t)best[e].start;
        const int id = best[e].id;
        if (id == s->unk && s->byte_fallback) {
            for (size_t i = b; i < e; i++) {
                int bp = s->byte_piece[t[i]];
                if (count < cap) ids[count] = bp >= 0 ? bp : s->unk;
                count++;
            }
            continue;
        }
        /* a run of unknown characters is one unknown token, as in SentencePiece */
        if (id == s->unk && prev_unk) continue;
        prev_unk = id == s->unk;
        if (count < cap) ids[count] = id;
        count++;
    }
    free(best);
    free(path);
    free(nb.p);
    return count;
}
