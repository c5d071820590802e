/* The embedding family through the engine on the random-weight BERT
 * fixture: load validation on the call, vectors equal to the embedder's
 * own, query and document requests, family/task checks. */
#include "kiln.h"
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#define BERT "data/fixtures/bert-embed.gguf"
#define LIMIT_MS 20000

static const char *const docs[] = {"the cat sat on the mat", "a dog barked", "rain fell all night long"};

int main(void) {
    alarm(120);
    kiln_engine *e = NULL;
    CHECK(kiln_engine_create(KILN_ENGINE_EMBEDDING, KILN_ENGINE_BACKEND_CPU, &e) == KILN_OK);
    CHECK(kiln_engine_start(e) == KILN_OK);
    CHECK(kiln_engine_load(e, "testutil.c", NULL) == KILN_ERR_FORMAT);
    CHECK(kiln_engine_load(e, BERT, NULL) == KILN_OK);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK);

    kiln_embed_request req = {3, docs, NULL, KILN_EMBED_DOCUMENT, 0, 0, NULL};
    kiln_embed_job *job = NULL;
    CHECK(kiln_engine_embed(e, &req, NULL, &job) == KILN_OK && job);

    kiln_embedder *direct = NULL;
    kiln_embed_job *ref = NULL;
    CHECK(kiln_embedder_new(BERT, NULL, &direct) == KILN_OK);
    CHECK(kiln_embed(direct, &req, &ref) == KILN_OK);
    if (job && ref) {
        const kiln_embeddings *a = kiln_embed_result(job), *b = kiln_embed_result(ref);
        CHECK(a->n == 3 && a->dim == b->dim && a->dim > 0);
        CHECK(strcmp(a->fingerprint, b->fingerprint) == 0);
        float worst = 0, norm = 0;
        for (int32_t i = 0; i < a->n * a->dim; i++) worst = fmaxf(worst, fabsf(a->vectors[i] - b->vectors[i]));
        for (int32_t k = 0; k < a->dim; k++) norm += a->vectors[k] * a->vectors[k];
        CHECKF(worst == 0, "engine vs direct differ by %g", worst);
        CHECKF(fabsf(norm - 1) < 1e-5f, "norm %g", norm);
    }
    kiln_embed_job_free(job);
    kiln_embed_job_free(ref);

    /* A query (urgent) with a smaller dimension. */
    kiln_embed_request q = {1, docs, NULL, KILN_EMBED_QUERY, 8, 0, NULL};
    CHECK(kiln_engine_embed(e, &q, NULL, &job) == KILN_OK && job && kiln_embed_result(job)->dim == 8);
    kiln_embed_job_free(job);

    /* A cancelled request leaves no job. */
    kiln_engine_cancel *tok = kiln_engine_cancel_new();
    kiln_engine_cancel_fire(tok);
    CHECK(kiln_engine_embed(e, &req, tok, &job) == KILN_ERR_CANCELLED && !job);
    kiln_engine_cancel_free(tok);

    /* Tasks belong to families. */
    kiln_engine_generate_request g = kiln_engine_generate_default();
    g.prompt = "hi";
    CHECK(kiln_engine_generate(e, &g, NULL) == KILN_ERR_UNSUPPORTED);
    kiln_engine *llm = NULL;
    CHECK(kiln_engine_create(KILN_ENGINE_LLM, KILN_ENGINE_BACKEND_AUTO, &llm) == KILN_OK);
    CHECK(kiln_engine_start(llm) == KILN_OK);
    CHECK(kiln_engine_load(llm, BERT, NULL) == KILN_ERR_UNSUPPORTED);          /* an encoder cannot generate */
    CHECK(kiln_engine_embed(llm, &req, NULL, &job) == KILN_ERR_STATE && !job); /* embeds, but holds no model */
    kiln_engine_free(llm);

    kiln_embedder_free(direct);
    CHECK(kiln_engine_destroy(e, NULL) == KILN_OK);
    kiln_engine_free(e);
    return t_done();
}
