/*
 * test_embed — kiln_embedder on the bert and qwen3-embedding fixtures
 * (tests/gen_fixtures.py): vectors against the PyTorch references (cosine
 * >= 0.99999), the ggml-vocab-bert-bge WordPiece tokenization behind them,
 * batch == solo within 1e-5 (unpadded batches, several runs, the range API),
 * Matryoshka dimensions, over-limit errors naming every input, truncation
 * lists, query prefixes, and fingerprints.
 */
#include "kiln.h"
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IN 16

typedef struct fixture {
    json_t *root;
    int n;
    const char *text[MAX_IN];
    int n_ids[MAX_IN];
    int n_full[MAX_IN];
    int truncated[MAX_IN];
    int32_t ids[MAX_IN][64];
    double vec[MAX_IN][64];
    int n_embd;
} fixture;

static int load_fixture(const char *path, fixture *f) {
    memset(f, 0, sizeof *f);
    json_error_t je;
    f->root = json_load_file(path, 0, &je);
    CHECKF(f->root != NULL, "%s: %s", path, je.text);
    if (!f->root) return -1;
    f->n_embd = (int)json_integer_value(json_object_get(f->root, "n_embd"));
    json_t *inputs = json_object_get(f->root, "inputs");
    f->n = (int)json_array_size(inputs);
    CHECK(f->n > 0 && f->n <= MAX_IN && f->n_embd <= 64);
    for (int i = 0; i < f->n && i < MAX_IN; i++) {
        json_t *in = json_array_get(inputs, (size_t)i), *ids = json_object_get(in, "ids"),
               *v = json_object_get(in, "vector");
        f->text[i] = json_string_value(json_object_get(in, "text"));
        f->n_ids[i] = (int)json_array_size(ids);
        f->n_full[i] = (int)json_integer_value(json_object_get(in, "n_tokens_full"));
        f->truncated[i] = json_is_true(json_object_get(in, "truncated"));
        for (int k = 0; k < f->n_ids[i] && k < 64; k++)
            f->ids[i][k] = (int32_t)json_integer_value(json_array_get(ids, (size_t)k));
        for (int k = 0; k < f->n_embd; k++) f->vec[i][k] = json_number_value(json_array_get(v, (size_t)k));
    }
    return 0;
}

static double norm(const float *a, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)a[i] * a[i];
    return sqrt(s);
}

static kiln_embed_request req(int n, const char *const *texts, int kind, int dim, int trunc) {
    kiln_embed_request r = {n, texts, NULL, kind, dim, trunc, NULL};
    return r;
}

/* The fixture's inputs as documents in one request, then each alone. */
static void check_vectors(kiln_embedder *e, const fixture *f, const char *name) {
    kiln_embed_request r = req(f->n, f->text, KILN_EMBED_DOCUMENT, 0, 1);
    kiln_embed_job *j = NULL;
    CHECKF(kiln_embed(e, &r, &j) == KILN_OK, "%s: %s", name, kiln_last_error());
    if (!j) return;
    const kiln_embeddings *out = kiln_embed_result(j);
    CHECK(out->n == f->n && out->dim == f->n_embd);
    int n_trunc = 0;
    for (int i = 0; i < f->n; i++) {
        const float *v = out->vectors + (size_t)i * out->dim;
        double c = t_cosine(v, f->vec[i], f->n_embd);
        CHECKF(c >= 0.99999, "%s input %d: cosine %.8f", name, i, c);
        CHECKF(fabs(norm(v, out->dim) - 1.0) < 1e-5, "%s input %d: norm %g", name, i, norm(v, out->dim));
        CHECKF(out->n_tokens[i] == f->n_ids[i], "%s input %d: %d tokens, expected %d", name, i, out->n_tokens[i],
               f->n_ids[i]);
        if (f->truncated[i]) {
            CHECK(n_trunc < out->n_truncated && out->truncated[n_trunc] == i);
            n_trunc++;
        }
        /* alone */
        kiln_embed_request r1 = req(1, &f->text[i], KILN_EMBED_DOCUMENT, 0, 1);
        kiln_embed_job *j1 = NULL;
        CHECK(kiln_embed(e, &r1, &j1) == KILN_OK);
        if (j1) {
            double d = t_max_diff(kiln_embed_result(j1)->vectors, v, out->dim);
            CHECKF(d <= 1e-5, "%s input %d: batch vs solo differ by %g", name, i, d);
            kiln_embed_job_free(j1);
        }
    }
    CHECKF(out->n_truncated == n_trunc && n_trunc == 1, "%s: %d truncated", name, out->n_truncated);

    /* the range API, one forward run per step, gives the same vectors */
    kiln_embed_job *g = NULL;
    CHECK(kiln_embed_begin(e, &r, &g) == KILN_OK);
    if (g) {
        int runs = 0;
        for (int32_t b = 0; b < f->n; runs++) {
            int32_t end = kiln_embed_batch_end(g, b);
            CHECK(end > b && end <= f->n);
            CHECK(kiln_embed_run(g, b, end) == KILN_OK);
            b = end;
        }
        double d = t_max_diff(kiln_embed_result(g)->vectors, out->vectors, f->n * out->dim);
        CHECKF(d <= 1e-5, "%s: range runs (%d) vs one call differ by %g", name, runs, d);
        kiln_embed_job_free(g);
    }

    /* Matryoshka: leading values, renormalized */
    const int dim = f->n_embd / 4;
    kiln_embed_request rd = req(f->n, f->text, KILN_EMBED_DOCUMENT, dim, 1);
    kiln_embed_job *jd = NULL;
    CHECK(kiln_embed(e, &rd, &jd) == KILN_OK);
    if (jd) {
        const kiln_embeddings *od = kiln_embed_result(jd);
        CHECK(od->dim == dim);
        for (int i = 0; i < f->n; i++) {
            const float *full = out->vectors + (size_t)i * out->dim, *small = od->vectors + (size_t)i * dim;
            double nf = norm(full, dim);
            float want[64];
            for (int k = 0; k < dim; k++) want[k] = (float)(full[k] / nf);
            CHECKF(t_max_diff(small, want, dim) < 1e-6, "%s input %d: Matryoshka dim %d", name, i, dim);
            CHECK(fabs(norm(small, dim) - 1.0) < 1e-5);
        }
        kiln_embed_job_free(jd);
    }
    kiln_embed_job_free(j);
}

/* Over the limit: every such input named, none embedded; with truncation
 * the cut inputs are listed. */
static void check_limits(kiln_embedder *e, const fixture *f, const char *name) {
    int over = -1;
    for (int i = 0; i < f->n; i++)
        if (f->truncated[i]) over = i;
    CHECK(over >= 0);
    if (over < 0) return;
    const char *texts[4] = {f->text[0], f->text[over], f->text[1], f->text[over]};
    kiln_embed_request r = req(4, texts, KILN_EMBED_DOCUMENT, 0, 0);
    kiln_embed_job *j = (kiln_embed_job *)&r;
    CHECK(kiln_embed(e, &r, &j) == KILN_ERR_CONTEXT_FULL);
    CHECK(j == NULL);
    char want1[96], want3[96];
    snprintf(want1, sizeof want1, "input 1: %d tokens > limit 64", f->n_full[over]);
    snprintf(want3, sizeof want3, "input 3: %d tokens > limit 64", f->n_full[over]);
    const char *msg = kiln_last_error();
    CHECKF(strstr(msg, want1) && strstr(msg, want3) && !strstr(msg, "input 0") && !strstr(msg, "input 2"),
           "%s: message '%s'", name, msg);
    const int32_t *idx, *ntok;
    CHECK(kiln_embed_over_limit(e, &idx, &ntok) == 2);
    CHECK(idx[0] == 1 && idx[1] == 3 && ntok[0] == f->n_full[over] && ntok[1] == f->n_full[over]);

    r.allow_truncate = 1;
    CHECK(kiln_embed(e, &r, &j) == KILN_OK);
    if (j) {
        const kiln_embeddings *out = kiln_embed_result(j);
        CHECK(out->n_truncated == 2 && out->truncated[0] == 1 && out->truncated[1] == 3);
        CHECK(out->n_tokens[0] == f->n_ids[0] && out->n_tokens[1] == 64 && out->n_tokens[3] == 64);
        CHECK(t_cosine(out->vectors + out->dim, f->vec[over], out->dim) >= 0.99999);
        kiln_embed_job_free(j);
    }
    CHECK(kiln_embed_over_limit(e, NULL, NULL) == 0);
}

/* A query gets the model's query prefix: query(x) == document(prefix + x)
 * when the document prefix is empty. */
static void check_query_prefix(kiln_embedder *e, const char *want_prefix, const char *name) {
    kiln_embedder_info info;
    kiln_embedder_get_info(e, &info);
    CHECKF(!strcmp(info.query_prefix, want_prefix), "%s: query prefix '%s'", name, info.query_prefix);
    CHECK(!strcmp(info.document_prefix, ""));
    char buf[256];
    snprintf(buf, sizeof buf, "%sHello world", want_prefix);
    const char *q = "Hello world", *d = buf;
    kiln_embed_request rq = req(1, &q, KILN_EMBED_QUERY, 0, 0), rd = req(1, &d, KILN_EMBED_DOCUMENT, 0, 0),
                       rp = req(1, &q, KILN_EMBED_DOCUMENT, 0, 0);
    kiln_embed_job *jq = NULL, *jd = NULL, *jp = NULL;
    CHECK(kiln_embed(e, &rq, &jq) == KILN_OK && kiln_embed(e, &rd, &jd) == KILN_OK &&
          kiln_embed(e, &rp, &jp) == KILN_OK);
    if (jq && jd && jp) {
        const kiln_embeddings *a = kiln_embed_result(jq), *b = kiln_embed_result(jd), *p = kiln_embed_result(jp);
        CHECKF(t_max_diff(a->vectors, b->vectors, a->dim) < 1e-6, "%s: query != prefixed document", name);
        CHECK(a->n_tokens[0] == b->n_tokens[0] && a->n_tokens[0] > p->n_tokens[0]);
        CHECK(t_max_diff(a->vectors, p->vectors, a->dim) > 1e-3);
    }
    kiln_embed_job_free(jq);
    kiln_embed_job_free(jd);
    kiln_embed_job_free(jp);
}

static int is_hex64(const char *s) {
    if (strlen(s) != 64) return 0;
    for (int i = 0; i < 64; i++)
        if (!strchr("0123456789abcdef", s[i])) return 0;
    return 1;
}

int main(void) {
    fixture fb, fq;
    if (load_fixture("data/fixtures/bert-embed.json", &fb) || load_fixture("data/fixtures/qwen3-embedding.json", &fq))
        return t_done();

    /* ---- bert, through a model loaded by the caller ---- */
    kiln_model *m = NULL;
    CHECKF(kiln_model_load("data/fixtures/bert-embed.gguf", NULL, &m) == KILN_OK, "%s", kiln_last_error());
    if (!m) return t_done();
    kiln_context *c = NULL;
    CHECK(kiln_context_new(m, NULL, &c) == KILN_ERR_UNSUPPORTED && c == NULL);

    /* the ggml-vocab-bert-bge WordPiece path: [CLS] ... [SEP] as llama.cpp */
    for (int i = 0; i < fb.n; i++) {
        int32_t ids[256];
        int n = kiln_tokenize(m, fb.text[i], strlen(fb.text[i]), 1, 0, ids, 256);
        CHECKF(n == fb.n_full[i], "bge input %d: %d tokens, expected %d", i, n, fb.n_full[i]);
        int same = n == fb.n_full[i];
        for (int k = 0; same && k < fb.n_ids[i] - 1; k++) same = ids[k] == fb.ids[i][k];
        CHECKF(same && ids[n - 1] == fb.ids[i][fb.n_ids[i] - 1], "bge input %d: ids differ", i);
    }

    kiln_embedder *eb = NULL;
    kiln_embedder_params p = kiln_embedder_default_params();
    p.n_threads = 2;
    CHECKF(kiln_embedder_new_from_model(m, &p, &eb) == KILN_OK, "%s", kiln_last_error());
    kiln_embedder_info ib;
    if (eb) {
        kiln_embedder_get_info(eb, &ib);
        CHECK(!strcmp(ib.arch, "bert") && ib.n_embd == 32 && ib.max_tokens == 64 && ib.pooling == KILN_POOLING_MEAN);
        CHECK(is_hex64(ib.fingerprint));
        check_vectors(eb, &fb, "bert");
        check_limits(eb, &fb, "bert");
        check_query_prefix(eb, "query: ", "bert");
    }

    /* small runs: the padded batch splits into several forward runs */
    kiln_embedder *es = NULL;
    p.n_batch = 64;
    CHECK(kiln_embedder_new("data/fixtures/bert-embed.gguf", &p, &es) == KILN_OK);
    if (es && eb) {
        kiln_embedder_info is;
        kiln_embedder_get_info(es, &is);
        CHECKF(!strcmp(is.fingerprint, ib.fingerprint), "fingerprint not stable: %s vs %s", is.fingerprint,
               ib.fingerprint);
        check_vectors(es, &fb, "bert n_batch 64");
    }
    kiln_embedder_free(es);

    /* ---- qwen3 as an embedder ---- */
    kiln_embedder *eq = NULL;
    p.n_batch = 8; /* inputs longer than a decode batch run in chunks */
    CHECKF(kiln_embedder_new("data/fixtures/qwen3-embedding.gguf", &p, &eq) == KILN_OK, "%s", kiln_last_error());
    if (eq) {
        kiln_embedder_info iq;
        kiln_embedder_get_info(eq, &iq);
        CHECK(!strcmp(iq.arch, "qwen3") && iq.n_embd == 16 && iq.max_tokens == 64 && iq.pooling == KILN_POOLING_LAST);
        CHECK(is_hex64(iq.fingerprint) && eb && strcmp(iq.fingerprint, ib.fingerprint) != 0);
        check_vectors(eq, &fq, "qwen3");
        check_limits(eq, &fq, "qwen3");
        check_query_prefix(eq,
                           "Instruct: Given a web search query, retrieve relevant passages that answer the query\n"
                           "Query:",
                           "qwen3");
        const char *t = fq.text[0];
        kiln_embed_request r = req(1, &t, KILN_EMBED_DOCUMENT, 0, 0);
        kiln_embed_job *j = NULL;
        CHECK(kiln_embed(eq, &r, &j) == KILN_OK && j && !strcmp(kiln_embed_result(j)->fingerprint, iq.fingerprint));
        kiln_embed_job_free(j);
    }
    kiln_embedder_free(eq);

    /* bad requests */
    if (eb) {
        const char *t = "x";
        kiln_embed_request r = req(1, &t, KILN_EMBED_DOCUMENT, 33, 0);
        kiln_embed_job *j = NULL;
        CHECK(kiln_embed(eb, &r, &j) == KILN_ERR_INVALID_ARG && !j);
        r.dim = 0;
        r.kind = 7;
        CHECK(kiln_embed(eb, &r, &j) == KILN_ERR_INVALID_ARG && !j);
    }
    kiln_embedder_free(eb);
    kiln_model_free(m);
    json_decref(fb.root);
    json_decref(fq.root);
    return t_done();
}
