/* POST /v1/rerank (also /rerank, /v1/reranking, /reranking): relevance of
 * documents to a query, through the model's rerank engine.
 *
 * Request, as llama-server, Jina and Cohere take it:
 *   {"model", "query", "documents": [string | {"text"}], "top_n",
 *    "return_documents", "truncate" (default true), "urgent"}
 * Response: {"model", "object": "list", "usage", "results": [{"index",
 * "relevance_score", "document": {"text"}?}], "truncated": [indices]},
 * results sorted by score, the best first, top_n of them.  With "texts"
 * instead of "documents" the request is Text Embeddings Inference's and
 * the response its bare array [{"index", "score", "text"?}] ("return_text").
 * A rerank of at most SERVER_RR_SMALL documents (a search's) is urgent unless
 * "urgent" says otherwise: it goes ahead of queued larger ones. */
#include "server/api.h"
#include "server/buf.h"
#include "server/log.h"
#include "server/models.h"
#include "server/reply.h"
#include "server/srv.h"

#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SERVER_RR_SMALL 16

static int bad(struct MHD_Connection *c, const char *msg, const char *param) {
    return server_send_error(c, 400, "invalid_request_error", msg, param);
}

typedef struct rr_item {
    int32_t index;
    float score;
} rr_item;

static int by_score(const void *a, const void *b) {
    const rr_item *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return (x->index > y->index) - (x->index < y->index);
}

int server_rerank(server_srv *s, struct MHD_Connection *c, json_t *body) {
    if (!json_is_object(body)) return bad(c, "the body must be a JSON object", NULL);
    json_t *q = json_object_get(body, "query");
    if (!json_is_string(q)) return bad(c, "'query' must be a string", "query");
    json_t *texts = json_object_get(body, "texts");
    const int tei = texts != NULL;
    json_t *docs = tei ? texts : json_object_get(body, "documents");
    const char *dname = tei ? "texts" : "documents";
    char msg[600];
    if (!json_is_array(docs) || json_array_size(docs) == 0) {
        snprintf(msg, sizeof msg, "'%s' must be a non-empty array of strings", dname);
        return bad(c, msg, dname);
    }
    const size_t n = json_array_size(docs);
    if (n > INT32_MAX / 2) return bad(c, "too many documents", dname);
    const char **dt = malloc(n * sizeof *dt);
    size_t *dl = malloc(n * sizeof *dl);
    rr_item *it = malloc(n * sizeof *it);
    int rc = MHD_NO;
    server_model *m = NULL;
    kiln_rerank_job *job = NULL;
    json_t *out = NULL;
    if (!dt || !dl || !it) {
        rc = server_send_error(c, 500, "server_error", "out of memory", NULL);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_array_get(docs, i);
        if (json_is_object(d) && !tei) d = json_object_get(d, "text");
        if (!json_is_string(d)) {
            snprintf(msg, sizeof msg, "'%s'[%zu] must be a string%s", dname, i,
                     tei ? "" : " or an object with \"text\"");
            rc = bad(c, msg, dname);
            goto done;
        }
        dt[i] = json_string_value(d);
        dl[i] = json_string_length(d);
    }
    json_t *tn = json_object_get(body, "top_n");
    size_t top = n;
    if (tn && !json_is_null(tn)) {
        if (!json_is_integer(tn) || json_integer_value(tn) < 1) {
            rc = bad(c, "'top_n' must be a positive integer", "top_n");
            goto done;
        }
        if ((json_int_t)n > json_integer_value(tn)) top = (size_t)json_integer_value(tn);
    }
    const char *retkey = tei ? "return_text" : "return_documents";
    json_t *rd = json_object_get(body, retkey), *tr = json_object_get(body, "truncate"),
           *ur = json_object_get(body, "urgent");
    if ((rd && !json_is_boolean(rd) && !json_is_null(rd)) || (tr && !json_is_boolean(tr) && !json_is_null(tr)) ||
        (ur && !json_is_boolean(ur) && !json_is_null(ur))) {
        snprintf(msg, sizeof msg, "'%s', 'truncate' and 'urgent' are booleans", retkey);
        rc = bad(c, msg, NULL);
        goto done;
    }
    const int urgent = json_is_boolean(ur) ? json_is_true(ur) : n <= SERVER_RR_SMALL;

    /* the model: the one named, else the first -m reranker */
    const char *name = json_string_value(json_object_get(body, "model"));
    char first[256];
    if ((!name || !*name) && server_model_first(s, KILN_ENGINE_RERANK, first, sizeof first) == 0) name = first;
    int status;
    m = server_model_use(s, name, SERVER_TASK_RERANK, NULL, &status, msg, sizeof msg);
    server_reqlog_model(server_reqlog_current(), m ? m->name : name);
    if (!m) {
        rc = server_send_error(c, status,
                               status == 404   ? "not_found_error"
                               : status == 400 ? "invalid_request_error"
                               : status == 503 ? "unavailable_error"
                                               : "server_error",
                               msg, "model");
        goto done;
    }
    kiln_rerank_request req = {json_string_value(q), json_string_length(q), (int32_t)n, dt, dl, !json_is_false(tr)};
    server_watch *w = server_watch_start(c);
    kiln_status st = kiln_engine_rerank(m->eng, &req, urgent, server_watch_cancel(w), &job);
    server_watch_stop(w);
    if (st != KILN_OK) {
        const int client = st == KILN_ERR_CONTEXT_FULL || st == KILN_ERR_INVALID_ARG || st == KILN_ERR_CANCELLED;
        rc = server_send_error(c,
                               client                 ? 400
                               : st == KILN_ERR_STATE ? 503
                                                      : 500,
                               client ? "invalid_request_error" : "server_error", kiln_last_error(), NULL);
        goto done;
    }
    const kiln_rerank_scores *r = kiln_rerank_result(job);
    json_int_t ntok = 0;
    for (int32_t i = 0; i < r->n; i++) {
        it[i].index = i;
        it[i].score = r->scores[i];
        ntok += r->n_tokens[i];
    }
    qsort(it, n, sizeof *it, by_score);
    json_t *results = json_array();
    const int with_text = json_is_true(rd);
    for (size_t k = 0; k < top; k++) {
        json_t *e = json_object();
        json_object_set_new(e, "index", json_integer(it[k].index));
        json_object_set_new(e, tei ? "score" : "relevance_score", json_real(it[k].score));
        if (with_text) {
            json_t *t = server_jstr(dt[it[k].index], dl[it[k].index]);
            if (tei)
                json_object_set_new(e, "text", t);
            else
                json_object_set_new(e, "document", json_pack("{s:o}", "text", t));
        }
        json_array_append_new(results, e);
    }
    server_reqlog_tokens(server_reqlog_current(), ntok, 0);
    if (tei) {
        out = results;
    } else {
        out = json_object();
        json_object_set_new(out, "model", json_string(m->name));
        json_object_set_new(out, "object", json_string("list"));
        json_object_set_new(out, "usage", json_pack("{s:I,s:I}", "prompt_tokens", ntok, "total_tokens", ntok));
        json_object_set_new(out, "results", results);
        json_t *cut = json_array();
        for (int32_t i = 0; i < r->n_truncated; i++) json_array_append_new(cut, json_integer(r->truncated[i]));
        json_object_set_new(out, "truncated", cut);
    }
    rc = server_send_json(c, 200, out);
done:
    if (m) server_model_done(m, NAN);
    kiln_rerank_job_free(job);
    free(dt);
    free(dl);
    free(it);
    return rc;
}
