/* MTP (NextN) speculative decoding on the hybrid family (model/mtp.h,
 * src/spec/mtp.c), against tests/gen_spec.py's fixtures and its float64
 * PyTorch implementation of the block.
 *
 *  1. Parity: after the prompt (in one batch, or in chunks, so the hidden
 *     state kept between passes is used), the MTP logits at the first
 *     proposal cell and chained for three more steps are the reference's
 *     within 1e-4 relative (F32 cache), with the same argmax chain.
 *  2. Greedy identity: --spec mtp gives the plain greedy text, fixed and
 *     adaptive, alone and 4 sequences together, F16 and F32 caches, and
 *     from the fixture's prompt the reference's greedy ids.
 *  3. Acceptance: on mtp-agree (a block built to predict what the target
 *     does) the proposals are accepted; on random fixtures few are.
 *  4. No trace: after a speculative run kept in the sequence, the target's
 *     next logits, its recurrent state, every attention layer's cache (the
 *     MTP block's too) and the next MTP proposal are those after plain
 *     decoding, bit for bit.
 *  5. Errors: a model without MTP blocks, a context without the MTP cache.
 *  6. The command line: kiln run --spec mtp prints the plain text.
 *  7. Repacking: quantized to Q8_0, the MTP block's matrices are repacked
 *     with the model's (the repacked bytes cover every matrix of the file),
 *     and its proposals are those of the file layout. */
#include "gen/gen.h"
#include "gguf/gguf.h"
#include "kernels/pack.h"
#include "quant/quant.h"
#include "model/mtp.h"
#include "model/state.h"
#include "spec/spec.h"
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXTOK 128

static const char *const k_fix[] = {"mtp-qwen35", "mtp-qwen35moe", "mtp-agree"};
#define N_FIX 3

typedef struct fixture {
    kiln_model *m;
    int32_t prompt[64], greedy[64], chain[8];
    int n_prompt, n_greedy, n_chain, n_vocab, first_agree;
    float *mtp; /* [n_chain][n_vocab] */
} fixture;

static int load_ids(json_t *a, int32_t *dst, int max) {
    int n = 0;
    for (size_t i = 0; i < json_array_size(a) && n < max; i++)
        dst[n++] = (int32_t)json_integer_value(json_array_get(a, i));
    return n;
}

static int fixture_load(const char *name, fixture *f) {
    memset(f, 0, sizeof *f);
    char path[256];
    snprintf(path, sizeof path, "data/spec/%s.json", name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    CHECKF(j != NULL, "%s: %s", path, je.text);
    if (!j) return -1;
    f->n_prompt = load_ids(json_object_get(j, "prompt_ids"), f->prompt, 64);
    f->n_greedy = load_ids(json_object_get(j, "greedy_ids"), f->greedy, 64);
    f->n_chain = load_ids(json_object_get(j, "mtp_chain"), f->chain, 8);
    f->n_vocab = (int)json_integer_value(json_object_get(j, "n_vocab"));
    f->first_agree = (int)json_integer_value(json_object_get(j, "mtp_first_agree"));
    snprintf(path, sizeof path, "data/spec/%s", json_string_value(json_object_get(j, "mtp_logits_file")));
    size_t len = 0;
    f->mtp = (float *)t_read_file(path, &len);
    CHECKF(f->mtp && len == (size_t)f->n_chain * f->n_vocab * sizeof(float), "%s: %zu bytes", path, len);
    snprintf(path, sizeof path, "data/spec/%s", json_string_value(json_object_get(j, "model")));
    json_decref(j);
    CHECKF(kiln_model_load(path, NULL, &f->m) == KILN_OK, "%s: %s", path, kiln_last_error());
    return f->m && f->mtp ? 0 : -1;
}

static void fixture_free(fixture *f) {
    kiln_model_free(f->m);
    free(f->mtp);
}

static kiln_context *new_ctx(kiln_model *m, int n_seq, int kv_type, int mtp) {
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = 256;
    cp.n_seq_max = n_seq;
    cp.n_threads = 1;
    cp.kv_type = kv_type;
    cp.mtp = mtp;
    kiln_context *c = NULL;
    CHECKF(kiln_context_new(m, &cp, &c) == KILN_OK, "%s", kiln_last_error());
    return c;
}

static double rel_err(const float *a, const float *ref, int n) {
    double d = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - ref[i]));
        mx = fmax(mx, fabs((double)ref[i]));
    }
    return d / (mx > 0 ? mx : 1);
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* ---- 1. parity ---- */

static void parity(const char *name, fixture *f, int chunk) {
    kiln_context *c = new_ctx(f->m, 1, KILN_KV_F32, 1);
    if (!c) return;
    CHECK(model_mtp_on(c));
    for (int at = 0; at < f->n_prompt;) {
        const int n = f->n_prompt - at < chunk ? f->n_prompt - at : chunk;
        kiln_batch b = {n, f->prompt + at, NULL, NULL, NULL};
        CHECK(kiln_decode(c, &b) == KILN_OK);
        at += n;
    }
    int32_t seq = 0, pos = f->n_prompt, tok = f->greedy[0];
    uint8_t chain = 0;
    for (int i = 0; i < f->n_chain; i++) {
        CHECKF(model_mtp_step(c, 1, &seq, &pos, &tok, &chain) == KILN_OK, "%s", kiln_last_error());
        const float *lg = model_mtp_logits(c, 0), *ref = f->mtp + (size_t)i * f->n_vocab;
        const double e = rel_err(lg, ref, f->n_vocab);
        CHECKF(e < 1e-4, "%s (chunks of %d): MTP step %d: relative error %.3g", name, chunk, i, e);
        CHECKF(argmax(lg, f->n_vocab) == f->chain[i], "%s (chunks of %d): MTP step %d proposes %d, the reference %d",
               name, chunk, i, argmax(lg, f->n_vocab), f->chain[i]);
        tok = f->chain[i];
        pos++;
        chain = 1;
    }
    CHECK(kiln_seq_len(c, 0) == f->n_prompt); /* the steps wrote cells past it, not the sequence */
    kiln_context_free(c);
}

/* ---- 2./3. greedy identity, acceptance ---- */

typedef struct out {
    int32_t tok[MAXTOK];
    int n, done;
    gen_reason why;
    int32_t n_drafted, n_accepted;
} out;

static int collect(void *user, const gen_event *ev, const float *logits) {
    out *o = user;
    (void)logits;
    if (ev->kind == GEN_EV_DONE) {
        o->done = 1;
        o->why = ev->reason;
        o->n_drafted = ev->n_drafted;
        o->n_accepted = ev->n_accepted;
    } else if (o->n < MAXTOK) {
        o->tok[o->n++] = ev->tok.id;
    }
    return 0;
}

static void run_all(gen_batch *b) {
    for (int steps = 0; gen_batch_n_active(b) > 0 && steps < 20000; steps++) CHECK(gen_batch_step(b) == KILN_OK);
}

static int same(const out *a, const out *b) {
    return a->n == b->n && a->why == b->why && !memcmp(a->tok, b->tok, (size_t)a->n * sizeof *a->tok);
}

#define N_PROMPTS 4

/* Prompts: the fixture's, and three cuts of it with another last token. */
static void prompts(const fixture *f, int32_t ids[N_PROMPTS][64], int *n) {
    for (int i = 0; i < N_PROMPTS; i++) {
        n[i] = f->n_prompt - 3 * i;
        memcpy(ids[i], f->prompt, (size_t)n[i] * sizeof(int32_t));
        if (i) ids[i][n[i] - 1] = 3 + (ids[i][n[i] - 1] * 7 + i) % (f->n_vocab - 3);
    }
}

static void run_set(kiln_context *c, const fixture *f, const gen_proposer *prop, int n_draft, int fixed, int together,
                    int temp, out *o) {
    int32_t ids[N_PROMPTS][64];
    int n[N_PROMPTS];
    gen_batch *b = NULL;
    CHECK(gen_batch_new(f->m, c, 0, &b) == KILN_OK);
    if (!b) return;
    if (prop) gen_batch_set_proposer(b, prop);
    prompts(f, ids, n);
    for (int i = 0; i < N_PROMPTS; i++) {
        memset(&o[i], 0, sizeof o[i]);
        gen_params p = gen_params_default();
        p.prompt = ids[i];
        p.n_prompt = n[i];
        p.n_predict = 40;
        p.sampler.temperature = temp ? 0.8f : 0.0f;
        p.sampler.seed = 1234 + (uint64_t)i;
        p.on_event = collect;
        p.user = &o[i];
        p.n_draft = prop ? n_draft : 0;
        p.spec_fixed = fixed;
        CHECK(gen_batch_add(b, &p, -1, NULL) == KILN_OK);
        if (!together) run_all(b);
    }
    run_all(b);
    gen_batch_free(b);
}

static void identity(const char *name, fixture *f, int kv_type) {
    kiln_context *plain = new_ctx(f->m, N_PROMPTS, kv_type, 0), *c = new_ctx(f->m, N_PROMPTS, kv_type, 1);
    if (!plain || !c) return;
    spec *sp = NULL;
    kiln_spec_params q = kiln_spec_default_params();
    q.type = KILN_SPEC_MTP;
    CHECKF(spec_new(&q, f->m, c, &sp) == KILN_OK, "%s", kiln_last_error());
    if (!sp) return;
    out ref[N_PROMPTS], ref2[N_PROMPTS], o[N_PROMPTS];
    run_set(plain, f, NULL, 0, 0, 0, 0, ref);
    run_set(c, f, NULL, 0, 0, 1, 0, ref2); /* the MTP cache changes nothing by itself */
    for (int i = 0; i < N_PROMPTS; i++)
        CHECKF(same(&ref[i], &ref2[i]), "%s: prompt %d: plain text with the cache", name, i);
    /* the fixture's prompt gives the reference's greedy ids */
    CHECKF(ref[0].n >= f->n_greedy && !memcmp(ref[0].tok, f->greedy, (size_t)f->n_greedy * sizeof(int32_t)),
           "%s: plain greedy ids differ from the reference", name);
    int32_t drafted = 0, accepted = 0;
    for (int fixed = 0; fixed < 2; fixed++)
        for (int together = 0; together < 2; together++) {
            run_set(c, f, spec_proposer(sp), fixed ? 4 : 8, fixed, together, 0, o);
            for (int i = 0; i < N_PROMPTS; i++) {
                CHECKF(same(&o[i], &ref[i]), "%s (%s cache): --spec mtp %s, %s, prompt %d: the text changed", name,
                       kv_type == KILN_KV_F32 ? "F32" : "F16", fixed ? "fixed 4" : "adaptive",
                       together ? "4 together" : "alone", i);
                if (fixed) {
                    drafted += o[i].n_drafted;
                    accepted += o[i].n_accepted;
                }
            }
        }
    CHECKF(drafted > 0, "%s: nothing proposed", name);
    if (f->first_agree >= f->n_greedy - 2) /* built to agree (the reference's first proposals all right) */
        CHECKF(accepted > 0 && accepted >= drafted * 9 / 10, "%s: %d of %d accepted", name, accepted, drafted);
    else
        CHECKF(accepted < drafted, "%s: %d of %d accepted from a random block", name, accepted, drafted);
    /* sampling: proposals come with their distribution; the run completes
     * and, for the agreeing block, draws are accepted */
    run_set(c, f, spec_proposer(sp), 4, 1, 1, 1, o);
    int32_t sd = 0, sa = 0;
    for (int i = 0; i < N_PROMPTS; i++) {
        CHECKF(o[i].done && o[i].n > 0, "%s: sampled run %d did not complete", name, i);
        sd += o[i].n_drafted;
        sa += o[i].n_accepted;
    }
    CHECKF(sd > 0, "%s: sampling proposed nothing", name);
    if (f->first_agree >= f->n_greedy - 2) CHECKF(sa > 0, "%s: sampling accepted nothing", name);
    for (int s = 0; s < N_PROMPTS; s++) CHECK(kiln_seq_len(c, s) == 0);
    spec_free(sp);
    kiln_context_free(plain);
    kiln_context_free(c);
}

/* ---- 4. no trace ---- */

static void kept_run(kiln_context *c, kiln_model *m, const gen_proposer *prop, const fixture *f, out *o) {
    gen_batch *b = NULL;
    CHECK(gen_batch_new(m, c, 0, &b) == KILN_OK);
    if (!b) return;
    if (prop) gen_batch_set_proposer(b, prop);
    memset(o, 0, sizeof *o);
    gen_params p = gen_params_default();
    p.prompt = f->prompt;
    p.n_prompt = f->n_prompt;
    p.n_predict = 50;
    p.sampler.temperature = 0;
    p.on_event = collect;
    p.user = o;
    p.n_draft = prop ? 5 : 0;
    p.spec_fixed = 1;
    p.keep = 1;
    CHECK(gen_batch_add(b, &p, 0, NULL) == KILN_OK);
    run_all(b);
    gen_batch_free(b);
}

static void no_trace(const char *name, fixture *f) {
    kiln_context *c = new_ctx(f->m, 1, KILN_KV_F32, 1), *z = new_ctx(f->m, 1, KILN_KV_F32, 1);
    if (!c || !z) return;
    spec *sp = NULL;
    kiln_spec_params q = kiln_spec_default_params();
    q.type = KILN_SPEC_MTP;
    CHECK(spec_new(&q, f->m, c, &sp) == KILN_OK);
    if (!sp) return;
    out o, ref;
    kept_run(c, f->m, spec_proposer(sp), f, &o);
    kept_run(z, f->m, NULL, f, &ref);
    CHECKF(same(&o, &ref), "%s: the text changed", name);
    CHECKF(o.n_drafted > 0, "%s: nothing proposed", name);
    const int32_t len = kiln_seq_len(c, 0);
    CHECK(len == kiln_seq_len(z, 0) && len == f->n_prompt + o.n - 1);
    /* every attention layer's cache, the MTP block's (the last) included */
    const model_kv *ka = &c->kv, *kz = &z->kv;
    CHECK(ka->n_layer == kz->n_layer && ka->n_layer >= 2);
    int kv_same = 1;
    for (int l = 0; l < ka->n_layer && kv_same; l++)
        for (int32_t p = 0; p < len && kv_same; p++)
            for (int h = 0; h < ka->n_head_kv; h++) {
                const int64_t ca = model_kv_cell(ka, 0, p), cz = model_kv_cell(kz, 0, p);
                if (memcmp(model_kv_khead(ka, l, ca, h), model_kv_khead(kz, l, cz, h), (size_t)ka->hd * 4) ||
                    memcmp(model_kv_vhead(ka, l, ca, h), model_kv_vhead(kz, l, cz, h), (size_t)ka->hd * 4)) {
                    CHECKF(0, "%s: layer %d%s, position %d: the cache differs from plain decoding's", name, l,
                           l == c->mtp_ord ? " (MTP)" : "", p);
                    kv_same = 0;
                    break;
                }
            }
    CHECKF(!memcmp(model_rs_live(c->rs, 0), model_rs_live(z->rs, 0), c->rs->slot_floats * sizeof(float)),
           "%s: the recurrent state differs from plain decoding's", name);
    /* the next proposal from both */
    int32_t seq = 0, pos = len, tok = o.tok[o.n - 1];
    uint8_t ch = 0;
    CHECK(model_mtp_step(c, 1, &seq, &pos, &tok, &ch) == KILN_OK &&
          model_mtp_step(z, 1, &seq, &pos, &tok, &ch) == KILN_OK);
    CHECKF(!memcmp(model_mtp_logits(c, 0), model_mtp_logits(z, 0), (size_t)f->n_vocab * sizeof(float)),
           "%s: the next MTP logits differ from plain decoding's", name);
    const int32_t last = o.tok[o.n - 1];
    kiln_batch one = {1, &last, NULL, NULL, NULL};
    CHECK(kiln_decode(c, &one) == KILN_OK && kiln_decode(z, &one) == KILN_OK);
    CHECKF(!memcmp(kiln_get_logits(c, 0), kiln_get_logits(z, 0), (size_t)f->n_vocab * sizeof(float)),
           "%s: the target's next logits differ", name);
    spec_free(sp);
    kiln_context_free(c);
    kiln_context_free(z);
}

/* ---- 5. errors ---- */

static void errors(const fixture *f) {
    kiln_model *m = NULL;
    CHECK(kiln_model_load("data/fixtures/qwen35moe.gguf", NULL, &m) == KILN_OK);
    if (!m) return;
    CHECK(model_mtp_blocks(m) == 0);
    kiln_context *c = new_ctx(m, 1, KILN_KV_F16, 1);
    spec *sp = NULL;
    kiln_spec_params q = kiln_spec_default_params();
    q.type = KILN_SPEC_MTP;
    if (c) {
        CHECK(!model_mtp_on(c)); /* nothing to keep */
        CHECK(spec_new(&q, m, c, &sp) != KILN_OK && strstr(kiln_last_error(), "no MTP (nextn) blocks"));
    }
    kiln_context_free(c);
    kiln_model_free(m);
    c = new_ctx(f->m, 1, KILN_KV_F16, 0);
    if (c) {
        CHECK(model_mtp_blocks(f->m) == 1 && !model_mtp_on(c));
        CHECK(spec_new(&q, f->m, c, &sp) != KILN_OK && strstr(kiln_last_error(), "no MTP cache"));
        int32_t seq = 0, pos = 0, tok = 1;
        uint8_t ch = 0;
        CHECK(model_mtp_step(c, 1, &seq, &pos, &tok, &ch) == KILN_ERR_STATE);
    }
    kiln_context_free(c);
}

/* ---- 7. repacking ---- */

/* The prompt, then n_chain chained MTP steps; their logits into dst. */
static void mtp_chain_logits(kiln_model *m, const fixture *f, float *dst) {
    kiln_context *c = new_ctx(m, 1, KILN_KV_F32, 1);
    if (!c) return;
    kiln_batch b = {f->n_prompt, f->prompt, NULL, NULL, NULL};
    CHECK(kiln_decode(c, &b) == KILN_OK);
    int32_t seq = 0, pos = f->n_prompt, tok = f->greedy[0];
    uint8_t chain = 0;
    for (int i = 0; i < f->n_chain; i++) {
        CHECK(model_mtp_step(c, 1, &seq, &pos, &tok, &chain) == KILN_OK);
        memcpy(dst + (size_t)i * f->n_vocab, model_mtp_logits(c, 0), (size_t)f->n_vocab * sizeof(float));
        tok = f->chain[i];
        pos++;
        chain = 1;
    }
    kiln_context_free(c);
}

static void repacked(const char *name, const fixture *f) {
    char dir[] = "/tmp/kiln-mtp-XXXXXX", path[64], err[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/q8.gguf", dir);
    char src[96];
    snprintf(src, sizeof src, "data/spec/%s.gguf", name);
    CHECKF(kiln_quantize(src, path, "Q8_0", 1) == KILN_OK, "%s: %s", name, kiln_last_error());
    /* what repacking must cover: every interleavable matrix but the token
     * embeddings (read by rows, never multiplied) unless tied to the head,
     * expert by expert */
    size_t want = 0;
    gguf_file *g;
    if (gguf_open(path, &g)) snprintf(err, sizeof err, "%s", kiln_last_error());
    CHECKF(g != NULL, "%s", err);
    const int tied = g && !gguf_find_tensor(g, "output.weight");
    for (int i = 0; g && i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        kern_mat one = {t->data, (int)t->type, t->ne[0], t->ne[1], NULL};
        if (t->n_dims < 2 || !kern_mat_interleavable(&one) || strstr(t->name, "embed_tokens.weight") ||
            (!tied && !strcmp(t->name, "token_embd.weight")))
            continue;
        want += (size_t)t->ne[2] * ((kern_x8_matrix_size((int)t->type, t->ne[0], t->ne[1]) + 63) & ~(size_t)63);
    }
    gguf_close(g);
    kiln_model *m[2] = {NULL, NULL};
    float *lg[2];
    for (int k = 0; k < 2; k++) {
        kiln_model_params mp = kiln_model_default_params();
        mp.repack = 1 - k;
        CHECKF(kiln_model_load(path, &mp, &m[k]) == KILN_OK, "%s", kiln_last_error());
        lg[k] = calloc((size_t)f->n_chain * f->n_vocab, sizeof(float));
        if (m[k] && lg[k]) mtp_chain_logits(m[k], f, lg[k]);
    }
    if (m[0]) {
        kiln_model_info info;
        kiln_model_get_info(m[0], &info);
        /* the vectors are copied too: the matrices alone are a lower bound */
        CHECKF(info.repacked_bytes >= want, "%s Q8_0: %llu bytes repacked, the matrices alone take %zu", name,
               (unsigned long long)info.repacked_bytes, want);
    }
    for (int i = 0; i < f->n_chain && lg[0] && lg[1]; i++) {
        const float *a = lg[0] + (size_t)i * f->n_vocab, *b = lg[1] + (size_t)i * f->n_vocab;
        double d = 0, mx = 0;
        for (int v = 0; v < f->n_vocab; v++) {
            d = fmax(d, fabs((double)a[v] - b[v]));
            mx = fmax(mx, fabs((double)b[v]));
        }
        CHECKF(d <= 1e-5 * (mx > 0 ? mx : 1), "%s Q8_0: MTP step %d: repacked against file layout %.3g", name, i, d);
        CHECK(argmax(a, f->n_vocab) == argmax(b, f->n_vocab));
    }
    for (int k = 0; k < 2; k++) {
        free(lg[k]);
        kiln_model_free(m[k]);
    }
    unlink(path);
    CHECK(rmdir(dir) == 0);
}

/* ---- 6. the command line ---- */

static void cli(void) {
    const char *bin = getenv("KILN_BIN");
    CHECKF(bin != NULL, "KILN_BIN is not set");
    if (!bin) return;
    char dir[] = "/tmp/kiln-mtp-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char cmd[1024], *a = NULL, *ae = NULL, *b = NULL, *be = NULL;
    const char *base = "-m data/spec/mtp-agree.gguf -p 'Once upon a time' -n 40 --temp 0 -t 1";
    snprintf(cmd, sizeof cmd, "%s run %s", bin, base);
    CHECK(t_run_capture(cmd, dir, &a, &ae) == 0);
    snprintf(cmd, sizeof cmd, "%s run %s --spec mtp --spec-n 4 -v", bin, base);
    CHECK(t_run_capture(cmd, dir, &b, &be) == 0);
    CHECKF(a && b && *a && !strcmp(a, b), "kiln run --spec mtp printed another text");
    CHECKF(be && strstr(be, "speculative decoding (mtp)"), "no speculation line: %s", be ? be : "");
    free(a);
    free(ae);
    free(b);
    free(be);
    snprintf(cmd, sizeof cmd, "%s run -m data/fixtures/qwen35moe.gguf -p hi -n 2 --spec mtp", bin);
    CHECK(t_run_capture(cmd, dir, &a, &ae) != 0);
    CHECKF(ae && strstr(ae, "no MTP (nextn) blocks"), "stderr: %s", ae ? ae : "");
    free(a);
    free(ae);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    fixture f[N_FIX];
    for (int i = 0; i < N_FIX; i++) {
        if (fixture_load(k_fix[i], &f[i])) return t_done();
        CHECK(model_mtp_blocks(f[i].m) == 1);
        parity(k_fix[i], &f[i], 64);
        parity(k_fix[i], &f[i], 7);
        identity(k_fix[i], &f[i], KILN_KV_F16);
        identity(k_fix[i], &f[i], KILN_KV_F32);
        no_trace(k_fix[i], &f[i]);
        repacked(k_fix[i], &f[i]);
    }
    errors(&f[0]);
    cli();
    for (int i = 0; i < N_FIX; i++) fixture_free(&f[i]);
    return t_done();
}
