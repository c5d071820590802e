/* Tokenizer conformance against llama.cpp's vocab test data
 * (data/vocab/ggml-vocab-NAME.gguf{,.inp,.out}): every text of the .inp
 * (separated by "\n__ggml_vocab_test__\n") must tokenize, without BOS/EOS
 * and without special-token parsing, to the ids on the matching .out line,
 * and lossless vocabularies must decode back to the text.  Then targeted
 * checks: special ids, parse_special, EOG, streaming detokenization of a
 * character split over byte tokens, and speed on 10 KB of text. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

#define DIR_VOCAB "data/vocab"
#define SEP "\n__ggml_vocab_test__\n"
#define MAX_IDS 4096

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static tokenizer *load(const char *path, gguf_file **gf) {
    gguf_open(path, gf);
    CHECKF(*gf != NULL, "%s: %s", path, kiln_last_error());
    if (!*gf) return NULL;
    tokenizer *t;
    tok_load(*gf, &t);
    CHECKF(t != NULL, "%s: %s", path, kiln_last_error());
    return t;
}

static void print_ids(const char *what, const int32_t *ids, int n) {
    fprintf(stderr, "    %s:", what);
    for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* Runs one vocabulary's cases; returns 1 when all pass. */
static int run_vocab(const char *base, const char *gguf_path, const char *inp_path, const char *out_path) {
    gguf_file *gf;
    tokenizer *t = load(gguf_path, &gf);
    if (!t) {
        gguf_close(gf);
        return 0;
    }
    size_t inp_len;
    char *inp = t_read_file(inp_path, &inp_len);
    char *outs = t_read_file(out_path, NULL);
    CHECKF(inp && outs, "%s: cannot read .inp/.out", base);
    if (!inp || !outs) {
        free(inp);
        free(outs);
        tok_free(t);
        gguf_close(gf);
        return 0;
    }

    static int32_t ids[MAX_IDS], want[MAX_IDS];
    static char dec[65536];
    int pass = 0, fail = 0, dec_ok = 0, dec_bad = 0;
    int lossless = tok_kind(t) != TOK_WPM;
    /* .out lines may be empty (empty text), so walk them by hand */
    char *op = outs;
    size_t pos = 0, sepl = strlen(SEP);
    for (int k = 0; pos < inp_len; k++) {
        char *next = strstr(inp + pos, SEP);
        size_t tl = next ? (size_t)(next - (inp + pos)) : inp_len - pos;
        const char *text = inp + pos;
        pos = next ? (size_t)(next - inp) + sepl : inp_len;

        /* expected ids: one line of the .out */
        int nw = 0;
        char *eol = strchr(op, '\n');
        if (!eol) eol = op + strlen(op);
        for (char *c = op; c < eol;) {
            char *end;
            long v = strtol(c, &end, 10);
            if (end == c) break;
            if (nw < MAX_IDS) want[nw++] = (int32_t)v;
            c = end;
        }
        op = *eol ? eol + 1 : eol;

        int n = tok_encode(t, text, tl, 0, 0, ids, MAX_IDS);
        int ok = n == nw && memcmp(ids, want, (size_t)n * sizeof *ids) == 0;
        if (ok) {
            pass++;
        } else {
            fail++;
            fprintf(stderr, "  %s case %d mismatch: '%.*s'\n", base, k, (int)tl, text);
            print_ids("want", want, nw);
            if (n >= 0) print_ids("got ", ids, n);
        }
        if (lossless && n >= 0) {
            int dl = tok_decode(t, ids, n, dec, (int)sizeof dec, 0, 1);
            if (dl == (int)tl && memcmp(dec, text, tl) == 0) {
                dec_ok++;
            } else {
                dec_bad++;
                fprintf(stderr, "  %s case %d decodes to '%.*s'\n", base, k, dl > 0 ? dl : 0, dec);
            }
        }
    }
    printf("  %-36s %3d pass %3d fail", base, pass, fail);
    if (lossless)
        printf("   decode %3d ok %3d bad\n", dec_ok, dec_bad);
    else
        printf("   (decode not checked: lossy)\n");
    CHECKF(fail == 0, "%s: %d tokenization mismatches", base, fail);
    CHECKF(dec_bad == 0, "%s: %d decode mismatches", base, dec_bad);
    free(inp);
    free(outs);
    tok_free(t);
    gguf_close(gf);
    return fail == 0 && dec_bad == 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void conformance(void) {
    DIR *d = opendir(DIR_VOCAB);
    CHECKF(d != NULL, "cannot open %s", DIR_VOCAB);
    if (!d) return;
    char *names[256];
    int nn = 0;
    struct dirent *e;
    while ((e = readdir(d)) && nn < 256) {
        size_t l = strlen(e->d_name);
        if (l > 9 && strcmp(e->d_name + l - 9, ".gguf.inp") == 0) names[nn++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)nn, sizeof names[0], cmp_str);
    int tested = 0;
    for (int i = 0; i < nn; i++) {
        char base[256], g[512], in[512], out[512];
        snprintf(base, sizeof base, "%.*s", (int)(strlen(names[i]) - 4), names[i]);
        snprintf(g, sizeof g, DIR_VOCAB "/%s", base);
        snprintf(in, sizeof in, DIR_VOCAB "/%s.inp", base);
        snprintf(out, sizeof out, DIR_VOCAB "/%s.out", base);
        FILE *f = fopen(g, "rb");
        if (!f) {
            printf("  %-36s skipped: no vocab file\n", base);
        } else {
            fclose(f);
            run_vocab(base, g, in, out);
            tested++;
        }
        free(names[i]);
    }
    CHECKF(tested >= 10, "only %d vocabularies tested", tested);
}

static int encode(const tokenizer *t, const char *s, int add_special, int parse_special, int32_t *ids) {
    return tok_encode(t, s, strlen(s), add_special, parse_special, ids, MAX_IDS);
}

static int contains(const int32_t *ids, int n, int32_t id) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return 1;
    return 0;
}

static void spm_checks(void) {
    gguf_file *gf;
    tokenizer *t = load(DIR_VOCAB "/ggml-vocab-llama-spm.gguf", &gf);
    if (!t) {
        gguf_close(gf);
        return;
    }
    static int32_t ids[MAX_IDS];
    CHECK(tok_kind(t) == TOK_SPM);
    CHECK(tok_n_vocab(t) == 32000);
    CHECK(tok_bos(t) == 1 && tok_eos(t) == 2 && tok_unk(t) == 0);
    CHECK(tok_is_eog(t, 2) && !tok_is_eog(t, 1) && !tok_is_eog(t, 100));
    CHECK(tok_type(t, 1) == TOK_T_CONTROL && tok_type(t, 3) == TOK_T_BYTE);
    size_t l;
    const char *s = tok_text(t, 1, &l);
    CHECK(s && l == 3 && memcmp(s, "<s>", 3) == 0);
    CHECK(tok_text(t, 32000, &l) == NULL);

    /* add_special prepends BOS (add_bos_token = true), no EOS */
    int n = encode(t, "Hello world", 1, 0, ids);
    CHECK(n == 3 && ids[0] == 1);
    CHECK(encode(t, "", 1, 0, ids) == 1 && ids[0] == 1);
    CHECK(encode(t, "", 0, 0, ids) == 0);

    /* control tokens only with parse_special */
    n = encode(t, "Hello</s>world", 0, 1, ids);
    CHECK(n > 2 && contains(ids, n, 2));
    n = encode(t, "Hello</s>world", 0, 0, ids);
    CHECK(n > 2 && !contains(ids, n, 2));

    /* too small a buffer reports the needed size */
    CHECK(tok_encode(t, "Hello world", 11, 0, 0, ids, 1) == -2);

    /* 🦙 is not in the vocabulary: four byte tokens, and the streaming
     * detokenizer emits nothing until the fourth */
    n = encode(t, "\xf0\x9f\xa6\x99", 0, 0, ids);
    CHECKF(n == 5 && tok_type(t, ids[1]) == TOK_T_BYTE, "n=%d", n); /* dummy-prefix "▁" + 4 bytes */
    if (n == 5) {
        tok_stream st;
        char buf[64];
        tok_stream_init(&st, t, 0, 1);
        CHECK(tok_stream_put(&st, ids[0], buf, sizeof buf) == 0); /* the stripped prefix space */
        CHECK(tok_stream_put(&st, ids[1], buf, sizeof buf) == 0);
        CHECK(tok_stream_put(&st, ids[2], buf, sizeof buf) == 0);
        CHECK(tok_stream_put(&st, ids[3], buf, sizeof buf) == 0);
        int r = tok_stream_put(&st, ids[4], buf, sizeof buf);
        CHECK(r == 4 && memcmp(buf, "\xf0\x9f\xa6\x99", 4) == 0);
        CHECK(tok_stream_flush(&st, buf, sizeof buf) == 0);
        /* an unfinished character comes out raw at the flush */
        tok_stream_init(&st, t, 0, 0);
        CHECK(tok_stream_put(&st, ids[1], buf, sizeof buf) == 0);
        CHECK(tok_stream_put(&st, ids[2], buf, sizeof buf) == 0);
        CHECK(tok_stream_flush(&st, buf, sizeof buf) == 2);
    }

    /* pieces: ▁ -> space, <0x0A> -> newline, control hidden unless special */
    char p[16];
    int32_t nl = tok_find(t, "<0x0A>", 6);
    CHECK(nl >= 0 && tok_token_to_piece(t, nl, p, sizeof p, 0) == 1 && p[0] == '\n');
    int32_t hello = tok_find(t, "\xe2\x96\x81Hello", 8);
    CHECK(hello >= 0 && tok_token_to_piece(t, hello, p, sizeof p, 0) == 6 && memcmp(p, " Hello", 6) == 0);
    CHECK(tok_token_to_piece(t, 1, p, sizeof p, 0) == 0);
    CHECK(tok_token_to_piece(t, 1, p, sizeof p, 1) == 3);
    CHECK(tok_token_to_piece(t, hello, p, 2, 0) == -6);
    tok_free(t);
    gguf_close(gf);
}

static void bpe_checks(void) {
    gguf_file *gf;
    tokenizer *t = load(DIR_VOCAB "/ggml-vocab-gpt-2.gguf", &gf);
    if (!t) {
        gguf_close(gf);
        return;
    }
    static int32_t ids[MAX_IDS];
    CHECK(tok_kind(t) == TOK_BPE);
    CHECK(tok_bos(t) == 50256 && tok_eos(t) == 50256);
    CHECK(tok_is_eog(t, 50256));
    /* no add_bos metadata: add_special adds nothing for gpt-2 */
    int n = encode(t, "Hello world", 1, 0, ids);
    CHECK(n == 2 && ids[0] == 15496 && ids[1] == 995);
    n = encode(t, "Hello<|endoftext|> world", 0, 1, ids);
    CHECK(n == 3 && ids[1] == 50256);
    n = encode(t, "Hello<|endoftext|> world", 0, 0, ids);
    CHECK(n > 3 && !contains(ids, n, 50256));

    /* 🦙 spans byte-level tokens that each hold part of the character */
    n = encode(t, "a\xf0\x9f\xa6\x99", 0, 0, ids);
    CHECK(n >= 2);
    tok_stream st;
    char buf[64], all[64];
    int got = 0, early = 0;
    tok_stream_init(&st, t, 0, 0);
    for (int i = 0; i < n; i++) {
        int r = tok_stream_put(&st, ids[i], all + got, (int)sizeof all - got);
        CHECK(r >= 0);
        if (i > 0 && i < n - 1 && r > 0) early = 1;
        got += r > 0 ? r : 0;
    }
    CHECK(!early);
    CHECK(tok_stream_flush(&st, buf, sizeof buf) == 0);
    CHECK(got == 5 && memcmp(all, "a\xf0\x9f\xa6\x99", 5) == 0);
    tok_free(t);
    gguf_close(gf);

    t = load(DIR_VOCAB "/ggml-vocab-phi-3.gguf", &gf);
    if (t) {
        int32_t end = tok_find(t, "<|end|>", 7);
        CHECK(end >= 0 && tok_is_eog(t, end) && tok_eos(t) == 32000 && tok_is_eog(t, 32000));
        n = encode(t, "<|user|>\nHi<|end|>", 1, 1, ids);
        CHECK(n >= 4 && ids[0] == 1 && ids[1] == 32010 && ids[n - 1] == end);
    }
    tok_free(t);
    gguf_close(gf);
}

static void wpm_checks(void) {
    gguf_file *gf;
    tokenizer *t = load(DIR_VOCAB "/ggml-vocab-bert-bge.gguf", &gf);
    if (!t) {
        gguf_close(gf);
        return;
    }
    static int32_t ids[MAX_IDS];
    CHECK(tok_kind(t) == TOK_WPM);
    CHECK(tok_bos(t) == 101 && tok_sep(t) == 102 && tok_unk(t) == 100 && tok_pad(t) == 0);
    int n = encode(t, "Hello world", 1, 0, ids);
    CHECK(n == 4 && ids[0] == 101 && ids[3] == 102);
    n = encode(t, "hi [SEP] there", 0, 1, ids);
    CHECK(contains(ids, n, 102));
    tok_free(t);
    gguf_close(gf);
}

/* Vocabularies without .inp/.out data: they must load (gpt-neox has no
 * tokenizer.ggml.pre, so it takes the default pre-tokenizer) and round-trip. */
static void other_vocabs(void) {
    const char *names[] = {"gpt-neox", "baichuan"};
    const char *text = "Hello world,  this is kiln!\n\tCaf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd 123";
    static int32_t ids[MAX_IDS];
    char dec[256];
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[256];
        snprintf(path, sizeof path, DIR_VOCAB "/ggml-vocab-%s.gguf", names[k]);
        gguf_file *gf;
        tokenizer *t = load(path, &gf);
        if (t) {
            int n = encode(t, text, 1, 0, ids);
            int d = tok_decode(t, ids, n, dec, (int)sizeof dec, 0, 1);
            CHECKF(n > 5 && d == (int)strlen(text) && memcmp(dec, text, (size_t)d) == 0, "%s: n=%d '%.*s'", names[k], n,
                   d > 0 ? d : 0, dec);
        }
        tok_free(t);
        gguf_close(gf);
    }
}

/* 10 KB of mixed text must take milliseconds per vocabulary. */
static void speed(void) {
    const char *names[] = {"llama-spm", "gpt-2", "deepseek-llm", "bert-bge"};
    char *text = malloc(10240 + 1);
    size_t il;
    char *inp = t_read_file(DIR_VOCAB "/ggml-vocab-gpt-2.gguf.inp", &il);
    if (!text || !inp) {
        free(text);
        free(inp);
        CHECK(0);
        return;
    }
    for (size_t i = 0; i < 10240; i++) text[i] = inp[i % il];
    text[10240] = 0;
    static int32_t ids[20000];
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[256];
        snprintf(path, sizeof path, DIR_VOCAB "/ggml-vocab-%s.gguf", names[k]);
        gguf_file *gf;
        tokenizer *t = load(path, &gf);
        if (t) {
            double t0 = now_ms();
            int n = tok_encode(t, text, 10240, 0, 1, ids, 20000);
            double ms = now_ms() - t0;
            printf("  speed %-14s 10 KB -> %5d tokens in %6.2f ms\n", names[k], n, ms);
            CHECK(n > 0); /* the time is a figure for the log: speed belongs in benchmarks */
        }
        tok_free(t);
        gguf_close(gf);
    }
    free(text);
    free(inp);
}

/* A SentencePiece vocabulary of the given tokens (types: 1 normal, 3
 * control), EOS id 2, written as a GGUF file at path; 0 on success. */
static int write_vocab(const char *path, const char *const *tok, const int32_t *type, uint32_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const uint32_t magic = 0x46554747, ver = 3, t_u32 = 4, t_i32 = 5, t_str = 8, t_arr = 9, eos = 2;
    const uint64_t n_tensors = 0, n_kv = 4;
#define PUT(v) fwrite(&(v), sizeof(v), 1, f)
#define KEY(k)                        \
    do {                              \
        const uint64_t l = strlen(k); \
        PUT(l);                       \
        fwrite(k, 1, l, f);           \
    } while (0)
    PUT(magic);
    PUT(ver);
    PUT(n_tensors);
    PUT(n_kv);
    KEY("tokenizer.ggml.model");
    PUT(t_str);
    KEY("llama");
    KEY("tokenizer.ggml.tokens");
    PUT(t_arr);
    PUT(t_str);
    const uint64_t n64 = n;
    PUT(n64);
    for (uint32_t i = 0; i < n; i++) KEY(tok[i]);
    KEY("tokenizer.ggml.token_type");
    PUT(t_arr);
    PUT(t_i32);
    PUT(n64);
    fwrite(type, sizeof *type, n, f);
    KEY("tokenizer.ggml.eos_token_id");
    PUT(t_u32);
    PUT(eos);
#undef KEY
#undef PUT
    return fclose(f);
}

/* The harmony format's tokens (gpt-oss): with <|return|> and <|call|> in
 * the vocabulary those two end generation and <|end|> does not (it ends a
 * message within the reply); <|end|> and the header tokens are written out
 * as text.  Without <|call|>, <|end|> ends generation as elsewhere. */
static void harmony_vocab(void) {
    const char *tok[] = {"<unk>",     "<s>",         "</s>",        "<|end|>",       "<|return|>",     "<|call|>",
                         "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "\xe2\x96\x81hi", "a"};
    const int32_t type[] = {2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 1, 1};
    const uint32_t n = sizeof tok / sizeof tok[0];
    char path[] = "/tmp/kiln-test-harmony-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    for (int full = 1; full >= 0; full--) {
        if (!full) tok[5] = "<|nocall|>";
        CHECK(write_vocab(path, tok, type, n) == 0);
        gguf_file *gf;
        tokenizer *t = load(path, &gf);
        if (t) {
            CHECK(tok_is_eog(t, 2) && tok_is_eog(t, 4) == 1);
            CHECKF(tok_is_eog(t, 3) == !full, "<|end|> ends generation: %d", tok_is_eog(t, 3));
            CHECK(tok_is_eog(t, 5) == full && !tok_is_eog(t, 7));
            tok_stream st;
            char out[128];
            int32_t len = 0;
            tok_stream_init(&st, t, 0, 0);
            const int32_t ids[] = {7, 11, 8, 10, 3, 6};
            for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
                len += tok_stream_put(&st, ids[i], out + len, (int32_t)sizeof out - len);
            len += tok_stream_flush(&st, out + len, (int32_t)sizeof out - len);
            const char *want =
                full ? "<|channel|>a<|message|> hi<|end|><|start|>" : "<|channel|>a<|message|> hi<|start|>";
            CHECKF(len == (int32_t)strlen(want) && !memcmp(out, want, (size_t)len), "rendered '%.*s'", (int)len, out);
            static int32_t got[MAX_IDS]; /* still special tokens in a prompt */
            const int ng = encode(t, "<|start|>a<|end|>", 0, 1, got);
            CHECKF(ng >= 2 && got[0] == 6 && got[ng - 1] == 3, "parsed %d ids", ng);
        }
        tok_free(t);
        gguf_close(gf);
    }
    unlink(path);
}

int main(void) {
    harmony_vocab();
    conformance();
    spm_checks();
    bpe_checks();
    wpm_checks();
    other_vocabs();
    speed();
    return t_done();
}
