/*
 * test_encoders — the modern-bert and gemma-embedding families on the
 * fixtures of tests/gen_encoders.py: the tokenizers against their golden
 * ids (ModernBERT's byte-level BPE with every added token recognized, the
 * SentencePiece vocabulary of the EmbeddingGemma fixture), pooled vectors
 * against the float64 PyTorch references (cosine >= 0.99999), batch equals
 * solo (one unpadded run against each input alone), EmbeddingGemma's
 * query/document formats with titles, Matryoshka truncations, the token
 * limit counting formatting and BOS/EOS, truncation keeping EOS, and the
 * fingerprint.
 */
#include "kiln.h"
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DIR "data/encoders/"

static json_t *load(const char *name) {
    json_error_t je;
    char path[256];
    snprintf(path, sizeof path, DIR "%s", name);
    json_t *j = json_load_file(path, 0, &je);
    CHECKF(j != NULL, "%s: %s", path, je.text);
    return j;
}

/* Golden token ids: text tokenized with add_special and every special
 * token recognized. */
static void check_tokenizer(const char *model, json_t *cases) {
    kiln_model *m = NULL;
    CHECKF(kiln_model_load(model, NULL, &m) == KILN_OK, "%s", kiln_last_error());
    if (!m) return;
    int bad = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *ids = json_object_get(c, "ids");
        const char *text = json_string_value(json_object_get(c, "text"));
        int32_t got[512];
        int32_t n = kiln_tokenize(m, text, strlen(text), 1, 1, got, 512);
        int ok = n == (int32_t)json_array_size(ids);
        for (int32_t k = 0; ok && k < n; k++) ok = got[k] == json_integer_value(json_array_get(ids, (size_t)k));
        if (!ok) {
            bad++;
            fprintf(stderr, "%s: tokenizer case %zu '%s': got %d ids:", model, i, text, n);
            for (int32_t k = 0; k < n && k < 40; k++) fprintf(stderr, " %d", got[k]);
            fprintf(stderr, "\n");
        }
    }
    CHECKF(bad == 0, "%s: %d of %zu tokenizer cases differ", model, bad, json_array_size(cases));
    kiln_model_free(m);
}

typedef struct ref_input {
    const char *text, *title;
    int kind, n_ids;
    const double *vec;
} ref_input;

#define MAX_IN 16

typedef struct refs {
    int n, n_embd;
    ref_input in[MAX_IN];
    double vec[MAX_IN][64];
} refs;

static void read_inputs(json_t *root, refs *r) {
    memset(r, 0, sizeof *r);
    json_t *inputs = json_object_get(root, "inputs");
    r->n = (int)json_array_size(inputs);
    r->n_embd = (int)json_integer_value(json_object_get(root, "n_embd"));
    CHECK(r->n > 0 && r->n <= MAX_IN && r->n_embd > 0 && r->n_embd <= 64);
    for (int i = 0; i < r->n && i < MAX_IN; i++) {
        json_t *in = json_array_get(inputs, (size_t)i), *v = json_object_get(in, "vector");
        const char *kind = json_string_value(json_object_get(in, "kind"));
        r->in[i].text = json_string_value(json_object_get(in, "text"));
        r->in[i].title = json_string_value(json_object_get(in, "title"));
        r->in[i].kind = kind && !strcmp(kind, "query") ? KILN_EMBED_QUERY : KILN_EMBED_DOCUMENT;
        r->in[i].n_ids = (int)json_array_size(json_object_get(in, "ids"));
        for (int k = 0; k < r->n_embd; k++) r->vec[i][k] = json_number_value(json_array_get(v, (size_t)k));
        r->in[i].vec = r->vec[i];
    }
}

/* Embeds inputs [lo, hi) of kind in one request; vectors in out (dim each). */
static kiln_embed_job *embed_range(kiln_embedder *e, const refs *r, int lo, int hi, int dim, int trunc) {
    const char *texts[MAX_IN], *titles[MAX_IN];
    for (int i = lo; i < hi; i++) texts[i - lo] = r->in[i].text, titles[i - lo] = r->in[i].title;
    kiln_embed_request q = {hi - lo, texts, NULL, r->in[lo].kind, dim, trunc, titles};
    kiln_embed_job *j = NULL;
    kiln_status st = kiln_embed(e, &q, &j);
    CHECKF(st == KILN_OK, "%s", kiln_last_error());
    return j;
}

/* References, batch == solo, Matryoshka: over the inputs of one kind in
 * [lo, hi). */
static void check_vectors(const char *model, kiln_embedder *e, const refs *r, int lo, int hi) {
    kiln_embed_job *all = embed_range(e, r, lo, hi, 0, 0);
    if (!all) return;
    const kiln_embeddings *a = kiln_embed_result(all);
    CHECK(a->dim == r->n_embd && a->n == hi - lo);
    double worst = 1, worst_solo = 0;
    for (int i = lo; i < hi; i++) {
        const float *v = a->vectors + (size_t)(i - lo) * a->dim;
        double c = t_cosine(v, r->in[i].vec, a->dim);
        worst = fmin(worst, c);
        CHECKF(a->n_tokens[i - lo] == r->in[i].n_ids, "%s input %d: %d tokens, reference %d", model, i,
               a->n_tokens[i - lo], r->in[i].n_ids);
        kiln_embed_job *solo = embed_range(e, r, i, i + 1, 0, 0);
        if (solo) worst_solo = fmax(worst_solo, t_max_diff(v, kiln_embed_result(solo)->vectors, a->dim));
        kiln_embed_job_free(solo);
    }
    CHECKF(worst >= 0.99999, "%s: worst cosine to the reference %.9f", model, worst);
    CHECKF(worst_solo <= 1e-5, "%s: batch differs from solo by %g", model, worst_solo);
    printf("%s: %d inputs, worst cosine %.9f, batch vs solo %.3g\n", model, hi - lo, worst, worst_solo);
    /* Matryoshka: the leading values renormalized */
    for (int dim = r->n_embd / 2; dim >= r->n_embd / 8; dim /= 2) {
        kiln_embed_job *t = embed_range(e, r, lo, hi, dim, 0);
        if (!t) break;
        const kiln_embeddings *b = kiln_embed_result(t);
        CHECK(b->dim == dim);
        double w = 1;
        for (int i = lo; i < hi; i++) w = fmin(w, t_cosine(b->vectors + (size_t)(i - lo) * dim, r->in[i].vec, dim));
        CHECKF(w >= 0.99999, "%s: dim %d worst cosine %.9f", model, dim, w);
        double nrm = 0;
        for (int k = 0; k < dim; k++) nrm += (double)b->vectors[k] * b->vectors[k];
        CHECKF(fabs(nrm - 1) < 1e-5, "dim %d norm %g", dim, nrm);
        kiln_embed_job_free(t);
    }
    kiln_embed_job_free(all);
}

static void test_modernbert(void) {
    json_t *root = load("modernbert.json");
    if (!root) return;
    check_tokenizer(DIR "modernbert.gguf", json_object_get(root, "tokenizer_cases"));
    refs r;
    read_inputs(root, &r);
    kiln_embedder *e = NULL;
    kiln_embedder_params p = kiln_embedder_default_params();
    p.n_batch = 64; /* several runs: the longest input alone, the short ones together */
    p.max_tokens = 64;
    CHECKF(kiln_embedder_new(DIR "modernbert.gguf", &p, &e) == KILN_OK, "%s", kiln_last_error());
    if (e) {
        kiln_embedder_info info;
        kiln_embedder_get_info(e, &info);
        CHECK(!strcmp(info.arch, "modern-bert") && info.n_embd == r.n_embd && info.max_tokens == 64);
        CHECK(info.pooling == KILN_POOLING_MEAN && !strcmp(info.query_prefix, ""));
        check_vectors("modernbert", e, &r, 0, r.n);
        /* the engine's order: next() runs shortest first, each as alone */
        const char *texts[MAX_IN];
        for (int i = 0; i < r.n; i++) texts[i] = r.in[i].text;
        kiln_embed_request q = {r.n, texts, NULL, KILN_EMBED_DOCUMENT, 0, 0, NULL};
        kiln_embed_job *j = NULL;
        CHECK(kiln_embed_begin(e, &q, &j) == KILN_OK);
        int32_t left = r.n, runs = 0;
        while (j && left > 0 && runs < 100) {
            CHECK(kiln_embed_next(j, &left) == KILN_OK);
            runs++;
        }
        CHECKF(runs >= 2 && runs < r.n, "%d runs", runs);
        double worst = 1;
        for (int i = 0; j && i < r.n; i++)
            worst = fmin(worst, t_cosine(kiln_embed_result(j)->vectors + (size_t)i * r.n_embd, r.in[i].vec, r.n_embd));
        CHECKF(worst >= 0.99999, "next(): worst cosine %.9f", worst);
        kiln_embed_job_free(j);
    }
    kiln_embedder_free(e);
    /* runs of at most 16 tokens: the longer inputs run alone */
    p = kiln_embedder_default_params();
    p.n_batch = 16;
    e = NULL;
    CHECK(kiln_embedder_new(DIR "modernbert.gguf", &p, &e) == KILN_OK);
    if (e) check_vectors("modernbert n_batch 16", e, &r, 0, r.n);
    kiln_embedder_free(e);
    json_decref(root);
}

static void test_gemma(void) {
    json_t *root = load("gemma-embed.json");
    if (!root) return;
    check_tokenizer(DIR "gemma-embed.gguf", json_object_get(root, "tokenizer_cases"));
    refs r;
    read_inputs(root, &r);
    int nq = 0;
    while (nq < r.n && r.in[nq].kind == KILN_EMBED_QUERY) nq++;
    CHECK(nq > 0 && nq < r.n);
    kiln_embedder *e = NULL;
    CHECKF(kiln_embedder_new(DIR "gemma-embed.gguf", NULL, &e) == KILN_OK, "%s", kiln_last_error());
    if (!e) {
        json_decref(root);
        return;
    }
    kiln_embedder_info info;
    kiln_embedder_get_info(e, &info);
    CHECK(!strcmp(info.query_prefix, "task: search result | query: {text}"));
    CHECK(!strcmp(info.document_prefix, "title: {title} | text: {text}"));
    CHECK(info.max_tokens == 128 && info.n_embd == 64);
    check_vectors("gemma-embed queries", e, &r, 0, nq);
    check_vectors("gemma-embed documents", e, &r, nq, r.n);

    /* the limit counts the format, BOS and EOS: find the longest text that
     * fits by growing it, then one more word is over */
    char text[4096] = "";
    const char *texts[1] = {text};
    kiln_embed_request q = {1, texts, NULL, KILN_EMBED_DOCUMENT, 0, 0, NULL};
    kiln_embed_job *j = NULL;
    int32_t last = 0;
    for (int w = 0; w < 400; w++) {
        strcat(text, w ? " kiln" : "kiln");
        if (kiln_embed_begin(e, &q, &j) != KILN_OK) break;
        last = kiln_embed_result(j)->n_tokens[0];
        kiln_embed_job_free(j);
        j = NULL;
    }
    CHECKF(last > 100 && last <= 128, "longest accepted input %d tokens", last);
    CHECK(kiln_embed_begin(e, &q, &j) == KILN_ERR_CONTEXT_FULL && !j);
    CHECKF(strstr(kiln_last_error(), "input 0:") && strstr(kiln_last_error(), "> limit 128"), "%s", kiln_last_error());
    q.allow_truncate = 1;
    CHECK(kiln_embed(e, &q, &j) == KILN_OK && j);
    if (j) {
        const kiln_embeddings *res = kiln_embed_result(j);
        CHECK(res->n_truncated == 1 && res->truncated[0] == 0 && res->n_tokens[0] == 128);
        kiln_embed_job_free(j);
    }
    /* the fingerprint covers weights and recipe: a second load agrees */
    kiln_embedder *e2 = NULL;
    CHECK(kiln_embedder_new(DIR "gemma-embed.gguf", NULL, &e2) == KILN_OK);
    if (e2) {
        kiln_embedder_info i2;
        kiln_embedder_get_info(e2, &i2);
        CHECK(strlen(i2.fingerprint) == 64 && !strcmp(i2.fingerprint, info.fingerprint));
    }
    kiln_embedder_free(e2);
    kiln_embedder_free(e);
    json_decref(root);
}

int main(void) {
    test_modernbert();
    test_gemma();
    return t_done();
}
