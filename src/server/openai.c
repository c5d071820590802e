/* OpenAI's endpoints and the route table of every OpenAI-style path: its
 * own (/v1/...) and the other APIs that share its error shape (Responses,
 * Anthropic's Messages, llama-server's rerank aliases). */
#include "server/api.h"
#include "server/embed.h"
#include "server/generate.h"
#include "server/media.h"
#include "server/models.h"
#include "server/opts.h"
#include "server/reply.h"
#include "server/run.h"
#include "server/srv.h"

#include "base/base.h"

#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- endpoints ---- */

/* One entry of GET /v1/models: OpenAI's fields, Anthropic's (type,
 * display_name, created_at), and the capabilities a client filters on. */
static json_t *model_entry(const char *id, json_t *caps) {
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(id));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(0));
    json_object_set_new(m, "owned_by", json_string("kiln"));
    json_object_set_new(m, "type", json_string("model"));
    json_object_set_new(m, "display_name", json_string(id));
    json_object_set_new(m, "created_at", json_string("1970-01-01T00:00:00Z"));
    json_object_set_new(m, "capabilities", caps);
    return m;
}

static int listed(json_t *data, const char *name) {
    size_t k;
    json_t *have;
    json_array_foreach(data, k, have) {
        if (server_same_model_name(json_string_value(json_object_get(have, "id")), name)) return 1;
    }
    return 0;
}

/* Every model the server can serve, once each (a -m name first, then the
 * store's names, "NAME" and "NAME:latest" being one model).  An Anthropic
 * client (anthropic-version header) asks for models to chat with, and gets
 * the text-generation models only. */
static int models(server_srv *s, struct MHD_Connection *c, json_t *body) {
    (void)body;
    const int chat_only = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "anthropic-version") != NULL;
    json_t *data = json_array();
    pthread_mutex_lock(&s->mu);
    for (server_model *m = s->models; m; m = m->next)
        if (m->pinned && (!chat_only || m->family == KILN_ENGINE_LLM) && !listed(data, m->name)) {
            json_t *caps = server_capabilities(m->family);
            /* a loaded model that takes images says so */
            if (m->state == SERVER_M_READY && m->model && server_media_model_ok(m))
                json_array_append_new(caps, json_string("vision"));
            json_array_append_new(data, model_entry(m->name, caps));
        }
    pthread_mutex_unlock(&s->mu);
    json_t *arr = server_store_models(s);
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const int fam = (int)json_integer_value(json_object_get(e, "serves"));
        if (!name || !*name || listed(data, name) || (chat_only && fam != KILN_ENGINE_LLM)) continue;
        json_array_append_new(data, model_entry(name, server_capabilities(fam)));
    }
    json_decref(arr);
    if (s->images && s->cfg.image_pack && !chat_only && !listed(data, s->cfg.image_pack))
        json_array_append_new(data, model_entry(s->cfg.image_pack, server_capabilities(KILN_ENGINE_IMAGE)));
    json_t *j = json_object();
    json_object_set_new(j, "object", json_string("list"));
    const size_t n = json_array_size(data);
    json_object_set_new(j, "has_more", json_false());
    json_object_set(j, "first_id", n ? json_object_get(json_array_get(data, 0), "id") : json_null());
    json_object_set(j, "last_id", n ? json_object_get(json_array_get(data, n - 1), "id") : json_null());
    json_object_set_new(j, "data", data);
    return server_send_json(c, 200, j);
}

static int chat(server_srv *s, struct MHD_Connection *c, json_t *body) {
    return server_chat_common(s, c, body, SERVER_F_OAI_CHAT);
}

static int completions(server_srv *s, struct MHD_Connection *c, json_t *body) {
    server_gen_opts o;
    int rc = MHD_NO;
    if (server_parse_opts(c, body, 0, &o, &rc)) return rc;
    json_t *p = json_object_get(body, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
    if (json_is_string(p))
        return server_generate_common(s, c, body, SERVER_F_OAI_COMPL, json_string_value(p), NULL, &o, NAN);
    if (json_is_array(p) && json_array_size(p) && json_is_integer(json_array_get(p, 0)))
        return server_generate_common(s, c, body, SERVER_F_OAI_COMPL, NULL, p, &o, NAN);
    return server_send_error(c, 400, "invalid_request_error",
                             "'prompt' must be a string or an array of token ids (one prompt per request)", "prompt");
}

static int messages(server_srv *s, struct MHD_Connection *c, json_t *body) { return server_msg_handle(s, c, body, 0); }
static int count_tokens(server_srv *s, struct MHD_Connection *c, json_t *body) {
    return server_msg_handle(s, c, body, 1);
}

static const server_route routes[] = {
    {"GET", "/v1/models", models, NULL},
    {"GET", "/models", models, NULL},
    {"POST", "/v1/chat/completions", chat, NULL},
    {"POST", "/v1/completions", completions, NULL},
    {"POST", "/v1/embeddings", server_embed_openai, NULL},
    {"POST", "/v1/images/generations", server_oai_images, NULL},
    {"POST", "/v1/audio/", NULL,
     server_audio_route}, /* transcriptions, translations (a path ending in / is a prefix) */
    {"POST", "/v1/responses", server_resp_handle, NULL},
    {"POST", "/v1/messages", messages, NULL},
    {"POST", "/v1/messages/count_tokens", count_tokens, NULL},
    /* llama-server's unversioned rerank paths take OpenAI-style bodies */
    {"POST", "/v1/rerank", server_rerank, NULL},
    {"POST", "/v1/reranking", server_rerank, NULL},
    {"POST", "/rerank", server_rerank, NULL},
    {"POST", "/reranking", server_rerank, NULL},
};

const server_route *server_oai_find(const char *method, const char *url, int *known, const char **allow) {
    const int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    *known = 0;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        const char *p = routes[i].path;
        const size_t n = strlen(p);
        if (p[n - 1] == '/' ? strncmp(url, p, n) : strcmp(url, p)) continue;
        const int want_get = !strcmp(routes[i].method, "GET");
        if (want_get ? get : !strcmp(method, routes[i].method)) return &routes[i];
        *known = 1;
        *allow = want_get ? "GET, HEAD" : routes[i].method;
    }
    return NULL;
}
