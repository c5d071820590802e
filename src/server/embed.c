/* Embeddings for both APIs: OpenAI's /v1/embeddings and Ollama's
 * /api/embed and /api/embeddings. */
#include "server/embed.h"

#include "server/buf.h"
#include "server/log.h"
#include "server/models.h"
#include "server/opts.h"
#include "server/reply.h"
#include "server/srv.h"

#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int server_embed_inputs(server_model *r, struct MHD_Connection *c, json_t *input, int kind, int dims, int truncate,
                        int ollama, json_t **vectors, int *n_tokens, int *rc) {
    const char *one[1];
    const char **texts = one;
    size_t n = 0;
    if (json_is_string(input)) {
        one[0] = json_string_value(input);
        n = 1;
    } else if (json_is_array(input) && json_array_size(input)) {
        n = json_array_size(input);
        texts = malloc(n * sizeof *texts);
        for (size_t i = 0; texts && i < n; i++) {
            texts[i] = json_string_value(json_array_get(input, i));
            if (!texts[i]) {
                free(texts);
                *rc = ollama ? server_oll_error(c, 400, "'input' must hold strings")
                             : server_send_error(c, 400, "invalid_request_error", "'input' must hold strings", "input");
                return -1;
            }
        }
    }
    if (!n || !texts) {
        *rc = ollama ? server_oll_error(c, 400, "'input' must be a string or a non-empty array of strings")
                     : server_send_error(c, 400, "invalid_request_error",
                                         "'input' must be a string or a non-empty array of strings", "input");
        return -1;
    }
    char msg[600] = "";
    int status = 0;
    kiln_embed_job *job = NULL;
    /* through the model's engine: a query goes ahead of queued documents */
    kiln_embed_request req = {(int32_t)n, texts, NULL, kind, dims, truncate, NULL};
    kiln_status st = kiln_engine_embed(r->eng, &req, NULL, &job);
    if (st != KILN_OK) {
        const int bad = st == KILN_ERR_CONTEXT_FULL || st == KILN_ERR_INVALID_ARG || st == KILN_ERR_UNSUPPORTED;
        snprintf(msg, sizeof msg, "%s%s", st == KILN_ERR_UNSUPPORTED ? "this model cannot embed: " : "",
                 kiln_last_error());
        status = bad ? 400 : st == KILN_ERR_STATE ? 503 : 500;
    }
    if (status) {
        if (texts != one) free(texts);
        *rc = ollama ? server_oll_error(c, status, msg)
                     : server_send_error(c, status, status == 400 ? "invalid_request_error" : "server_error", msg,
                                         "input");
        return -1;
    }
    const kiln_embeddings *e = kiln_embed_result(job);
    json_t *vs = json_array();
    *n_tokens = 0;
    for (int32_t i = 0; i < e->n; i++) {
        json_t *v = json_array();
        for (int32_t k = 0; k < e->dim; k++) json_array_append_new(v, json_real(e->vectors[(size_t)i * e->dim + k]));
        json_array_append_new(vs, v);
        *n_tokens += e->n_tokens[i];
    }
    server_reqlog_tokens(server_reqlog_current(), *n_tokens, 0);
    kiln_embed_job_free(job);
    if (texts != one) free(texts);
    *vectors = vs;
    return 0;
}

static int dims_of(json_t *body, struct MHD_Connection *c, int ollama, int *dims, int *rc) {
    json_t *d = json_object_get(body, "dimensions");
    *dims = 0;
    if (!d || json_is_null(d)) return 0;
    if (!json_is_integer(d) || json_integer_value(d) < 1) {
        *rc = ollama ? server_oll_error(c, 400, "'dimensions' must be a positive integer")
                     : server_send_error(c, 400, "invalid_request_error", "'dimensions' must be a positive integer",
                                         "dimensions");
        return -1;
    }
    *dims = (int)json_integer_value(d);
    return 0;
}

static const char k_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Little-endian float32 bytes, base64 (OpenAI's encoding_format). */
static json_t *b64_floats(json_t *v) {
    size_t n = json_array_size(v), nb = n * 4;
    unsigned char *raw = malloc(nb ? nb : 1);
    char *out = malloc((nb + 2) / 3 * 4 + 1);
    if (!raw || !out) {
        free(raw);
        free(out);
        return json_string("");
    }
    for (size_t i = 0; i < n; i++) {
        float f = (float)json_real_value(json_array_get(v, i));
        memcpy(raw + i * 4, &f, 4);
    }
    size_t o = 0;
    for (size_t i = 0; i < nb; i += 3) {
        uint32_t x =
            (uint32_t)raw[i] << 16 | (i + 1 < nb ? (uint32_t)raw[i + 1] << 8 : 0) | (i + 2 < nb ? raw[i + 2] : 0);
        out[o++] = k_b64[x >> 18 & 63];
        out[o++] = k_b64[x >> 12 & 63];
        out[o++] = i + 1 < nb ? k_b64[x >> 6 & 63] : '=';
        out[o++] = i + 2 < nb ? k_b64[x & 63] : '=';
    }
    out[o] = 0;
    json_t *s = json_string(out);
    free(raw);
    free(out);
    return s;
}

static server_model *embed_model(server_srv *s, struct MHD_Connection *c, json_t *body, int ollama, double *load_wait,
                                 int *rc) {
    int status;
    char msg[600];
    server_model *r = server_model_use(s, json_string_value(json_object_get(body, "model")), SERVER_TASK_EMBED,
                                       load_wait, &status, msg, sizeof msg);
    server_reqlog_model(server_reqlog_current(), r ? r->name : json_string_value(json_object_get(body, "model")));
    if (!r) {
        const char *type = status == 404   ? "not_found_error"
                           : status == 400 ? "invalid_request_error"
                           : status == 503 ? "unavailable_error"
                                           : "server_error";
        *rc = ollama ? server_oll_error(c, status, msg) : server_send_error(c, status, type, msg, "model");
        return NULL;
    }
    return r;
}

/* Whether inputs are queries or documents: "input_type" (as the embedding
 * APIs of Cohere and Voyage name it; "search_query" too), documents when
 * absent.  A query gets the model's query prefix and goes ahead of queued
 * documents. */
static int input_kind(json_t *body, struct MHD_Connection *c, int ollama, int *kind, int *rc) {
    json_t *t = json_object_get(body, "input_type");
    *kind = KILN_EMBED_DOCUMENT;
    if (!t || json_is_null(t)) return 0;
    const char *v = json_string_value(t);
    if (v && (!strcmp(v, "query") || !strcmp(v, "search_query")))
        *kind = KILN_EMBED_QUERY;
    else if (!v || (strcmp(v, "document") && strcmp(v, "search_document"))) {
        const char *msg = "'input_type' must be \"query\" or \"document\"";
        *rc = ollama ? server_oll_error(c, 400, msg)
                     : server_send_error(c, 400, "invalid_request_error", msg, "input_type");
        return -1;
    }
    return 0;
}

int server_embed_openai(server_srv *s, struct MHD_Connection *c, json_t *body) {
    int rc = MHD_NO, dims, ntok, kind;
    if (dims_of(body, c, 0, &dims, &rc) || input_kind(body, c, 0, &kind, &rc)) return rc;
    const char *enc = json_string_value(json_object_get(body, "encoding_format"));
    if (enc && strcmp(enc, "float") && strcmp(enc, "base64"))
        return server_send_error(c, 400, "invalid_request_error", "'encoding_format' must be float or base64",
                                 "encoding_format");
    server_model *r = embed_model(s, c, body, 0, NULL, &rc);
    if (!r) return rc;
    json_t *vs;
    if (server_embed_inputs(r, c, json_object_get(body, "input"), kind, dims, 0, 0, &vs, &ntok, &rc)) {
        server_model_done(r, NAN);
        return rc;
    }
    json_t *data = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(vs, i, v) {
        json_t *e = json_object();
        json_object_set_new(e, "object", json_string("embedding"));
        json_object_set_new(e, "index", json_integer((json_int_t)i));
        json_object_set_new(e, "embedding", enc && !strcmp(enc, "base64") ? b64_floats(v) : json_incref(v));
        json_array_append_new(data, e);
    }
    json_decref(vs);
    json_t *j = json_object();
    json_object_set_new(j, "object", json_string("list"));
    json_object_set_new(j, "data", data);
    json_object_set_new(j, "model", json_string(r->name));
    json_object_set_new(j, "usage", json_pack("{s:i,s:i}", "prompt_tokens", ntok, "total_tokens", ntok));
    server_model_done(r, NAN);
    return server_send_json(c, 200, j);
}

/* legacy: 1 for /api/embeddings ({"prompt"} in, {"embedding": [...]} out) */
int server_embed_ollama(server_srv *s, struct MHD_Connection *c, json_t *body, int legacy) {
    int rc = MHD_NO, dims, ntok, kind;
    if (dims_of(body, c, 1, &dims, &rc) || input_kind(body, c, 1, &kind, &rc)) return rc;
    double t0 = server_now(), load_wait = 0;
    server_model *r = embed_model(s, c, body, 1, &load_wait, &rc);
    if (!r) return rc;
    json_t *vs;
    json_t *tr = json_object_get(body, "truncate");
    const double ka = server_parse_duration(json_object_get(body, "keep_alive"));
    if (server_embed_inputs(r, c, json_object_get(body, "input"), kind, dims, !json_is_false(tr), 1, &vs, &ntok, &rc)) {
        server_model_done(r, ka);
        return rc;
    }
    json_t *j = json_object();
    if (legacy) {
        json_object_set(j, "embedding", json_array_get(vs, 0));
        json_decref(vs);
        server_model_done(r, ka);
        return server_send_json(c, 200, j);
    }
    json_object_set_new(j, "model", json_string(r->name));
    json_object_set_new(j, "embeddings", vs);
    json_object_set_new(j, "total_duration", json_integer((json_int_t)((server_now() - t0) * 1e9)));
    json_object_set_new(j, "load_duration", json_integer((json_int_t)(load_wait * 1e9)));
    json_object_set_new(j, "prompt_eval_count", json_integer(ntok));
    server_model_done(r, ka);
    return server_send_json(c, 200, j);
}
