/*
 * GGUF reader robustness and the writer.
 *  - every truncation of a real file, and targeted corruptions (magic,
 *    version, counts, lengths, dims, types, offsets, alignment) give an
 *    error message, never a crash or a huge allocation;
 *  - model-level failures name what is wrong (missing tensor, wrong shape,
 *    unsupported architecture), and the CLI exits non-zero with one line;
 *  - the writer round-trips a file, and a split model opens as one.
 */
#include "kiln.h"
#include "testutil.h"

#include "gguf/gguf.h"
#include "quant/quant.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define STORIES "../models/stories260K.gguf"

static char tmpdir[] = "/tmp/kiln-test-gguf-XXXXXX";

static int opens(const uint8_t *p, size_t n, char *err, size_t errlen) {
    err[0] = 0;
    gguf_file *f;
    if (gguf_open_memory(p, n, &f)) snprintf(err, errlen, "%s", kiln_last_error());
    if (!f) return 0;
    gguf_close(f);
    return 1;
}

/* Offset just past the metadata key named key (start of its type field). */
static size_t find_key(const uint8_t *p, size_t n, const char *key) {
    size_t kl = strlen(key);
    for (size_t i = 8; i + kl + 8 < n; i++)
        if (memcmp(p + i + 8, key, kl) == 0) {
            uint64_t len;
            memcpy(&len, p + i, 8);
            if (len == kl) return i + 8 + kl;
        }
    return 0;
}

static void test_corruptions(const uint8_t *orig, size_t n) {
    char err[256];
    CHECK(opens(orig, n, err, sizeof err));
    /* every prefix up to the end of the header, then every 4 KiB */
    int all_fail = 1, all_msg = 1;
    for (size_t k = 0; k < n; k += k < 20000 ? 1 : 4096) {
        if (opens(orig, k, err, sizeof err))
            all_fail = 0;
        else if (!err[0])
            all_msg = 0;
    }
    CHECK(all_fail);
    CHECK(all_msg);
    uint8_t *p = malloc(n);
    if (!p) return;
#define MUTATE(off, val, type)             \
    do {                                   \
        memcpy(p, orig, n);                \
        type v_ = (type)(val);             \
        memcpy(p + (off), &v_, sizeof v_); \
    } while (0)
    MUTATE(0, 0x46554748u, uint32_t);
    CHECK(!opens(p, n, err, sizeof err) && strstr(err, "magic"));
    MUTATE(4, 99u, uint32_t);
    CHECK(!opens(p, n, err, sizeof err) && strstr(err, "version"));
    MUTATE(8, UINT64_MAX, uint64_t);
    CHECK(!opens(p, n, err, sizeof err) && strstr(err, "tensor count"));
    MUTATE(16, (uint64_t)1 << 40, uint64_t);
    CHECK(!opens(p, n, err, sizeof err) && strstr(err, "metadata count"));
    MUTATE(24, (uint64_t)1 << 50, uint64_t); /* first key's length */
    CHECK(!opens(p, n, err, sizeof err) && err[0]);
    /* a string array claiming 2^40 elements */
    size_t tk = find_key(orig, n, "tokenizer.ggml.tokens");
    CHECK(tk > 0);
    if (tk) {
        MUTATE(tk + 8, (uint64_t)1 << 40, uint64_t);
        CHECK(!opens(p, n, err, sizeof err) && strstr(err, "tokenizer.ggml.tokens"));
        MUTATE(tk, 77u, uint32_t); /* unknown value type */
        CHECK(!opens(p, n, err, sizeof err) && err[0]);
    }
    /* tensor infos: locate the first tensor name and corrupt its fields */
    gguf_file *f;
    if (gguf_open_memory(orig, n, &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    const gguf_tensor *t0 = f ? gguf_tensor_at(f, 0) : NULL;
    size_t name_off = 0;
    if (t0) {
        size_t nl = strlen(t0->name);
        for (size_t i = 0; i + nl < n && !name_off; i++)
            if (memcmp(orig + i, t0->name, nl) == 0 && i >= 8) {
                uint64_t len;
                memcpy(&len, orig + i - 8, 8);
                if (len == nl && i > tk) name_off = i + nl;
            }
    }
    CHECK(name_off > 0);
    if (name_off) {
        uint32_t nd;
        memcpy(&nd, orig + name_off, 4);
        size_t type_off = name_off + 4 + 8 * nd, off_off = type_off + 4;
        MUTATE(name_off, 7u, uint32_t);
        CHECK(!opens(p, n, err, sizeof err) && strstr(err, "dimensions"));
        MUTATE(name_off + 4, (uint64_t)1 << 62, uint64_t);
        CHECK(!opens(p, n, err, sizeof err) && strstr(err, "dimension"));
        MUTATE(type_off, 1234u, uint32_t);
        CHECK(!opens(p, n, err, sizeof err) && strstr(err, "unknown tensor type"));
        MUTATE(off_off, (uint64_t)n * 4, uint64_t);
        CHECK(!opens(p, n, err, sizeof err) && strstr(err, "beyond the end"));
        MUTATE(off_off, 3u, uint64_t);
        CHECK(!opens(p, n, err, sizeof err) && strstr(err, "aligned"));
    }
    gguf_close(f);
    /* random byte flips never crash (errors or a valid parse are both fine);
     * a crash fails the test process, and every failure must carry a message */
    uint64_t x = 12345;
    int silent = 0;
    for (int it = 0; it < 2000; it++) {
        memcpy(p, orig, n);
        for (int k = 0; k < 4; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            size_t off = (size_t)(x >> 33) % (tk ? tk + 4096 : n);
            p[off] ^= (uint8_t)(x >> 17);
        }
        err[0] = 0;
        gguf_file *g;
        if (gguf_open_memory(p, n, &g)) snprintf(err, sizeof err, "%s", kiln_last_error());
        silent += !g && !err[0];
        gguf_close(g);
    }
    CHECK(silent == 0);
#undef MUTATE
    free(p);
}

/* Copies src into dst through the writer, applying an edit: drop a tensor,
 * give one a new shape, or rename the architecture. */
typedef struct edit {
    const char *drop;
    const char *reshape;
    const char *arch;
} edit;

static int copy_with(const char *src, const char *dst, const edit *e) {
    char err[256];
    gguf_file *f;
    if (gguf_open(src, &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    if (!f) return -1;
    gguf_writer *w = gguf_writer_new();
    for (int i = 0; i < gguf_n_kv(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        if (e && e->arch && !strcmp(kv->key, "general.architecture"))
            gguf_w_str(w, kv->key, e->arch, strlen(e->arch));
        else
            gguf_w_copy_kv(w, kv);
    }
    for (int i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (e && e->drop && !strcmp(t->name, e->drop)) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (e && e->reshape && !strcmp(t->name, e->reshape) && t->n_dims == 2) {
            ne[0] = t->ne[1];
            ne[1] = t->ne[0];
        }
        gguf_w_tensor(w, t->name, t->type, (int)t->n_dims, ne, t->data);
    }
    int rc = gguf_writer_save(w, dst, NULL, NULL);
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}

static void test_model_errors(void) {
    char path[512];
    struct {
        edit e;
        const char *expect;
        kiln_status st;
    } cases[] = {
        {{"blk.2.attn_k.weight", NULL, NULL}, "missing tensor blk.2.attn_k.weight", KILN_ERR_FORMAT},
        {{NULL, "blk.0.ffn_up.weight", NULL}, "blk.0.ffn_up.weight has shape", KILN_ERR_FORMAT},
        {{NULL, NULL, "mamba"}, "unsupported architecture 'mamba'", KILN_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/bad%zu.gguf", tmpdir, i);
        CHECK(copy_with(STORIES, path, &cases[i].e) == 0);
        kiln_model *m = NULL;
        kiln_status st = kiln_model_load(path, NULL, &m);
        CHECKF(st == cases[i].st && m == NULL && strstr(kiln_last_error(), cases[i].expect),
               "case %zu: status %d, '%s'", i, st, kiln_last_error());
    }
    kiln_model *m = NULL;
    CHECK(kiln_model_load("/nonexistent/model.gguf", NULL, &m) == KILN_ERR_IO);
    CHECK(strstr(kiln_last_error(), "/nonexistent/model.gguf") != NULL);

    /* the CLI: non-zero exit and one line on stderr */
    const char *bin = getenv("KILN_BIN");
    if (bin) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "'%s' run -m '%s/bad0.gguf' -p hi -n 4 2>'%s/err.txt' >/dev/null", bin, tmpdir,
                 tmpdir);
        int rc = system(cmd);
        CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) != 0);
        snprintf(path, sizeof path, "%s/err.txt", tmpdir);
        size_t len;
        char *txt = t_read_file(path, &len);
        int lines = 0;
        for (size_t i = 0; txt && i < len; i++) lines += txt[i] == '\n';
        CHECKF(txt && lines == 1 && strstr(txt, "missing tensor"), "stderr: %s", txt ? txt : "(none)");
        free(txt);
    }
}

static void test_roundtrip_and_split(void) {
    char a[512], s1[512], s2[512];
    snprintf(a, sizeof a, "%s/copy.gguf", tmpdir);
    CHECK(copy_with(STORIES, a, NULL) == 0);
    size_t n1, n2;
    char *x = t_read_file(STORIES, &n1), *y = t_read_file(a, &n2);
    /* the same content; only the final padding may differ */
    CHECK(x && y && n2 >= n1 - 32 && n2 <= n1 + 32 && memcmp(x, y, n1 < n2 ? n1 - 32 : n2 - 32) == 0);
    free(x);
    free(y);

    /* split into two shards: metadata + first half, then the rest */
    char err[256];
    gguf_file *f;
    if (gguf_open(STORIES, &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    CHECK(f != NULL);
    if (!f) return;
    snprintf(s1, sizeof s1, "%s/split-00001-of-00002.gguf", tmpdir);
    snprintf(s2, sizeof s2, "%s/split-00002-of-00002.gguf", tmpdir);
    int nt = gguf_n_tensors(f), half = nt / 2;
    gguf_writer *w1 = gguf_writer_new(), *w2 = gguf_writer_new();
    for (int i = 0; i < gguf_n_kv(f); i++) gguf_w_copy_kv(w1, gguf_kv_at(f, i));
    gguf_w_u32(w1, "split.count", 2);
    gguf_w_u32(w1, "split.no", 0);
    gguf_w_u32(w2, "split.count", 2);
    gguf_w_u32(w2, "split.no", 1);
    for (int i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        gguf_w_tensor(i < half ? w1 : w2, t->name, t->type, (int)t->n_dims, t->ne, t->data);
    }
    CHECK(gguf_writer_save(w1, s1, NULL, NULL) == 0);
    CHECK(gguf_writer_save(w2, s2, NULL, NULL) == 0);
    gguf_writer_free(w1);
    gguf_writer_free(w2);
    gguf_close(f);
    gguf_file *g;
    if (gguf_open(s1, &g)) snprintf(err, sizeof err, "%s", kiln_last_error());
    CHECKF(g && gguf_n_shards(g) == 2 && gguf_n_tensors(g) == nt, "%s", err);
    gguf_close(g);
    /* the split model computes what the whole one does */
    kiln_model *m1, *m2;
    CHECK(kiln_model_load(STORIES, NULL, &m1) == KILN_OK);
    CHECKF(kiln_model_load(s1, NULL, &m2) == KILN_OK, "%s", kiln_last_error());
    kiln_context *c1 = NULL, *c2 = NULL;
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = 64;
    CHECK(kiln_context_new(m1, &cp, &c1) == KILN_OK && kiln_context_new(m2, &cp, &c2) == KILN_OK);
    int32_t toks[4] = {1, 274, 287, 381};
    kiln_batch b = {4, toks, NULL, NULL, NULL};
    CHECK(kiln_decode(c1, &b) == KILN_OK && kiln_decode(c2, &b) == KILN_OK);
    CHECK(memcmp(kiln_get_logits(c1, 3), kiln_get_logits(c2, 3), 512 * sizeof(float)) == 0);
    kiln_context_free(c1);
    kiln_context_free(c2);
    kiln_model_free(m1);
    kiln_model_free(m2);
    /* opening a later shard alone is refused with a hint */
    if (gguf_open(s2, &g)) snprintf(err, sizeof err, "%s", kiln_last_error());
    CHECK(g == NULL && strstr(err, "first shard"));
    /* a missing shard is named */
    unlink(s2);
    if (gguf_open(s1, &g)) snprintf(err, sizeof err, "%s", kiln_last_error());
    CHECK(g == NULL && strstr(err, "missing shard"));
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 1;
    size_t n;
    uint8_t *orig = (uint8_t *)t_read_file(STORIES, &n);
    CHECK(orig != NULL);
    if (orig) test_corruptions(orig, n);
    free(orig);
    test_model_errors();
    test_roundtrip_and_split();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return t_done();
}
