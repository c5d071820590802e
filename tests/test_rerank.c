/*
 * test_rerank — kiln_reranker on the fixtures of tests/gen_encoders.py: a
 * BERT cross-encoder (WordPiece pairs with token types, tanh head, a
 * document truncated to the limit), the ModernBERT reranker head (mean
 * pooled, GELU, LayerNorm) and a Qwen3-style causal reranker (rerank
 * template, yes/no rows, prefix reuse between pairs).  Scores against the
 * float64 PyTorch references within 1e-5 (raw scores: relative to their
 * size), the exact token ids of every pair, batch equals solo, over-limit
 * errors naming the documents, and a model without a head refused.
 */
#include "kiln.h"
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DIR "data/encoders/"
#define MAX_DOCS 16

typedef struct pairs {
    json_t *root;
    const char *query;
    int n;
    const char *doc[MAX_DOCS];
    double score[MAX_DOCS];
    int n_ids[MAX_DOCS], truncated[MAX_DOCS];
} pairs;

static int load(const char *name, pairs *p) {
    memset(p, 0, sizeof *p);
    json_error_t je;
    char path[256];
    snprintf(path, sizeof path, DIR "%s", name);
    p->root = json_load_file(path, 0, &je);
    CHECKF(p->root != NULL, "%s: %s", path, je.text);
    if (!p->root) return -1;
    p->query = json_string_value(json_object_get(p->root, "query"));
    json_t *a = json_object_get(p->root, "pairs");
    p->n = (int)json_array_size(a);
    CHECK(p->query && p->n > 0 && p->n <= MAX_DOCS);
    for (int i = 0; i < p->n && i < MAX_DOCS; i++) {
        json_t *e = json_array_get(a, (size_t)i);
        p->doc[i] = json_string_value(json_object_get(e, "document"));
        p->score[i] = json_number_value(json_object_get(e, "score"));
        p->n_ids[i] = (int)json_array_size(json_object_get(e, "ids"));
        p->truncated[i] = json_is_true(json_object_get(e, "truncated"));
    }
    return 0;
}

/* Scores all pairs in one request, then each alone. */
static void check_scores(const char *name, const char *model, int truncate, double tol) {
    pairs p;
    if (load(name, &p)) return;
    kiln_reranker *r = NULL;
    CHECKF(kiln_reranker_new(model, NULL, &r) == KILN_OK, "%s: %s", model, kiln_last_error());
    if (!r) {
        json_decref(p.root);
        return;
    }
    kiln_rerank_request q = {p.query, 0, p.n, p.doc, NULL, truncate};
    kiln_rerank_job *j = NULL;
    CHECKF(kiln_rerank(r, &q, &j) == KILN_OK, "%s", kiln_last_error());
    double worst = 0, worst_solo = 0;
    int n_trunc = 0;
    for (int i = 0; j && i < p.n; i++) {
        const kiln_rerank_scores *s = kiln_rerank_result(j);
        const double err = fabs(s->scores[i] - p.score[i]) / fmax(1.0, fabs(p.score[i]));
        worst = fmax(worst, err);
        CHECKF(s->n_tokens[i] == p.n_ids[i], "%s pair %d: %d tokens, reference %d", name, i, s->n_tokens[i],
               p.n_ids[i]);
        n_trunc += p.truncated[i];
        kiln_rerank_request one = {p.query, 0, 1, &p.doc[i], NULL, truncate};
        kiln_rerank_job *o = NULL;
        CHECK(kiln_rerank(r, &one, &o) == KILN_OK);
        if (o) worst_solo = fmax(worst_solo, fabs(kiln_rerank_result(o)->scores[0] - s->scores[i]));
        kiln_rerank_job_free(o);
    }
    if (j) CHECKF(kiln_rerank_result(j)->n_truncated == n_trunc, "%d truncated", kiln_rerank_result(j)->n_truncated);
    CHECKF(worst <= tol, "%s: scores differ from the reference by %g", name, worst);
    CHECKF(worst_solo <= 1e-5, "%s: batch differs from solo by %g", name, worst_solo);
    printf("%s: %d pairs, worst error %.3g, batch vs solo %.3g\n", name, p.n, worst, worst_solo);
    kiln_rerank_job_free(j);
    if (n_trunc) { /* without truncation the long pair fails the request, named */
        q.allow_truncate = 0;
        CHECK(kiln_rerank(r, &q, &j) == KILN_ERR_CONTEXT_FULL && !j);
        CHECKF(strstr(kiln_last_error(), "document ") && strstr(kiln_last_error(), "> limit"), "%s", kiln_last_error());
    }
    kiln_reranker_info info;
    kiln_reranker_get_info(r, &info);
    CHECK(info.n_labels >= 1 && info.max_tokens > 0);
    kiln_reranker_free(r);
    json_decref(p.root);
}

static void test_causal_truncation(void) {
    kiln_reranker_params rp = kiln_reranker_default_params();
    rp.max_tokens = 120; /* the template alone is about 90 tokens */
    kiln_reranker *r = NULL;
    CHECKF(kiln_reranker_new(DIR "qwen3-rerank.gguf", &rp, &r) == KILN_OK, "%s", kiln_last_error());
    if (!r) return;
    kiln_reranker_info info;
    kiln_reranker_get_info(r, &info);
    CHECK(info.causal == 1 && info.n_labels == 2 && info.max_tokens == 120);
    const char *docs[] = {"short", "a long document that goes on and on about kilns and clay and fire, far longer "
                                   "than the room this small limit leaves for it in the prompt, so it is cut"};
    kiln_rerank_request q = {"kiln", 0, 2, docs, NULL, 0};
    kiln_rerank_job *j = NULL;
    CHECK(kiln_rerank(r, &q, &j) == KILN_ERR_CONTEXT_FULL && !j);
    CHECKF(strstr(kiln_last_error(), "document 1:") && !strstr(kiln_last_error(), "document 0:"), "%s",
           kiln_last_error());
    q.allow_truncate = 1;
    CHECK(kiln_rerank(r, &q, &j) == KILN_OK && j);
    if (j) {
        const kiln_rerank_scores *s = kiln_rerank_result(j);
        CHECK(s->n_truncated == 1 && s->truncated[0] == 1 && s->n_tokens[1] <= 120 && s->n_tokens[1] > 100);
        CHECK(s->scores[0] > 0 && s->scores[0] < 1 && s->scores[1] > 0 && s->scores[1] < 1);
    }
    kiln_rerank_job_free(j);
    kiln_reranker_free(r);
}

static void test_refusals(void) {
    kiln_reranker *r = NULL;
    CHECK(kiln_reranker_new(DIR "gemma-embed.gguf", NULL, &r) == KILN_ERR_UNSUPPORTED && !r);
    CHECKF(strstr(kiln_last_error(), "not a reranker"), "%s", kiln_last_error());
    CHECK(kiln_reranker_new("data/fixtures/qwen3.gguf", NULL, &r) == KILN_ERR_UNSUPPORTED && !r);
    /* a query that leaves no room */
    kiln_reranker_params rp = kiln_reranker_default_params();
    rp.max_tokens = 8;
    CHECK(kiln_reranker_new(DIR "bert-rerank.gguf", &rp, &r) == KILN_OK);
    const char *docs[] = {"x"};
    kiln_rerank_request q = {"a query of several words here", 0, 1, docs, NULL, 1};
    kiln_rerank_job *j = NULL;
    CHECK(kiln_rerank(r, &q, &j) == KILN_ERR_CONTEXT_FULL && !j);
    CHECKF(strstr(kiln_last_error(), "leaving no room"), "%s", kiln_last_error());
    /* no documents: an empty result */
    kiln_rerank_request none = {"q", 0, 0, NULL, NULL, 0};
    CHECK(kiln_rerank(r, &none, &j) == KILN_OK && j && kiln_rerank_result(j)->n == 0);
    kiln_rerank_job_free(j);
    kiln_reranker_free(r);
}

static void test_engine(void) {
    const kiln_engine_family *f = kiln_engine_family_find("rerank");
    CHECK(f && f->id == KILN_ENGINE_RERANK && f->available && !strcmp(f->tasks[0], "rerank"));
    kiln_engine *e = NULL;
    CHECK(kiln_engine_create(KILN_ENGINE_RERANK, KILN_ENGINE_BACKEND_CPU, &e) == KILN_OK);
    if (!e) return;
    CHECK(kiln_engine_start(e) == KILN_OK);
    /* the header check: an embedder without a head, or a decoder without
     * rank pooling, is no reranker */
    CHECK(kiln_engine_load(e, DIR "gemma-embed.gguf", NULL) == KILN_ERR_UNSUPPORTED);
    CHECK(strstr(kiln_last_error(), "not a reranker") != NULL);
    CHECK(kiln_engine_load(e, "../models/stories260K.gguf", NULL) == KILN_ERR_UNSUPPORTED);
    CHECK(kiln_engine_load(e, DIR "modernbert.gguf", NULL) == KILN_OK && kiln_engine_wait_idle(e, 60000) == KILN_OK);
    const char *docs[] = {"a kiln fires clay", "sunny weather", "glaze and cones"};
    kiln_rerank_request q = {"kiln", 0, 3, docs, NULL, 1};
    kiln_rerank_job *j = NULL, *ref = NULL;
    CHECKF(kiln_engine_rerank(e, &q, 1, NULL, &j) == KILN_OK && j, "%s", kiln_last_error());
    kiln_reranker *r = NULL;
    CHECK(kiln_reranker_new(DIR "modernbert.gguf", NULL, &r) == KILN_OK && kiln_rerank(r, &q, &ref) == KILN_OK);
    for (int i = 0; j && ref && i < 3; i++)
        CHECK(kiln_rerank_result(j)->scores[i] == kiln_rerank_result(ref)->scores[i]);
    kiln_rerank_job_free(j);
    kiln_rerank_job_free(ref);
    kiln_reranker_free(r);
    /* an embedding request goes nowhere in this family */
    kiln_embed_request er = {1, docs, NULL, KILN_EMBED_QUERY, 0, 0, NULL};
    kiln_embed_job *ej = NULL;
    CHECK(kiln_engine_embed(e, &er, NULL, &ej) == KILN_ERR_UNSUPPORTED && !ej);
    CHECK(kiln_engine_destroy(e, NULL) == KILN_OK);
    kiln_engine_free(e);
}

int main(void) {
    check_scores("bert-rerank.json", DIR "bert-rerank.gguf", 1, 1e-5);
    check_scores("modernbert.json", DIR "modernbert.gguf", 0, 1e-5);
    check_scores("qwen3-rerank.json", DIR "qwen3-rerank.gguf", 0, 1e-5);
    test_causal_truncation();
    test_refusals();
    test_engine();
    return t_done();
}
