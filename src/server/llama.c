/* llama-server's utility routes, with its field names:
 *   POST /tokenize        {content, add_special (false), parse_special
 *                         (true), with_pieces (false)} -> {tokens: [id] or
 *                         [{id, piece}]}; a piece that is not whole UTF-8
 *                         is its bytes as an array of numbers
 *   POST /detokenize      {tokens} -> {content}
 *   POST /apply-template  {messages, tools?, chat_template_kwargs?} ->
 *                         {prompt}: the text a chat request would decode
 *   GET  /props           the model's context, chat template, special
 *                         tokens and the generation defaults
 * Each takes "model" (in the body, or ?model= for /props) as the other
 * routes do; without it the first -m model answers. */
#include "server/api.h"
#include "server/buf.h"
#include "server/defaults.h"
#include "server/log.h"
#include "server/media.h"
#include "server/models.h"
#include "server/opts.h"
#include "server/prompt.h"
#include "server/reply.h"
#include "server/srv.h"

#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad(struct MHD_Connection *c, const char *msg, const char *param) {
    return server_send_error(c, 400, "invalid_request_error", msg, param);
}

static server_model *use(server_srv *s, struct MHD_Connection *c, const char *name, int *rc) {
    int status = 404;
    char msg[600];
    server_model *r = server_model_use(s, name, SERVER_TASK_INFO, NULL, &status, msg, sizeof msg);
    server_reqlog_model(server_reqlog_current(), r ? r->name : name);
    if (!r)
        *rc = server_send_error(c, status,
                                status == 404   ? "not_found_error"
                                : status == 400 ? "invalid_request_error"
                                                : "server_error",
                                msg, "model");
    if (r && !r->model) { /* speech to text: no text tokenizer or template */
        snprintf(msg, sizeof msg, "'%s' is not a text model", r->name);
        server_model_done(r, NAN);
        *rc = server_send_error(c, 400, "invalid_request_error", msg, "model");
        return NULL;
    }
    return r;
}

/* 1 when s[0..n) is whole, valid UTF-8 (what a JSON string can carry). */
static int utf8_ok(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!need || i + need > n) return 0;
        for (size_t k = 1; k < need; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80) return 0;
        i += need;
    }
    return 1;
}

static json_t *piece_json(kiln_model *m, int32_t id) {
    char buf[256];
    int n = kiln_token_to_piece(m, id, buf, sizeof buf, 1);
    if (n < 0 || n > (int)sizeof buf) n = 0;
    if (utf8_ok(buf, (size_t)n)) return json_stringn(buf, (size_t)n);
    json_t *bytes = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)buf[i]));
    return bytes;
}

static int flag(json_t *body, const char *k, int dflt) {
    json_t *v = json_object_get(body, k);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static int tokenize(server_srv *s, struct MHD_Connection *c, json_t *body) {
    json_t *content = json_object_get(body, "content");
    if (!json_is_string(content)) return bad(c, "'content' must be a string", "content");
    int rc = MHD_NO;
    server_model *r = use(s, c, json_string_value(json_object_get(body, "model")), &rc);
    if (!r) return rc;
    const char *text = json_string_value(content);
    size_t len = json_string_length(content);
    int add = flag(body, "add_special", 0), special = flag(body, "parse_special", 1);
    int cap = (int)len + 8;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int n = ids ? kiln_tokenize(r->model, text, len, add, special, ids, cap) : -1;
    if (n > cap) {
        int32_t *nb = realloc(ids, (size_t)n * sizeof *ids);
        n = nb ? kiln_tokenize(r->model, text, len, add, special, (ids = nb), n) : -1;
    }
    if (n < 0) {
        free(ids);
        server_model_done(r, NAN);
        return server_send_error(c, 500, "server_error", "tokenization failed", NULL);
    }
    int pieces = flag(body, "with_pieces", 0);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        if (!pieces) {
            json_array_append_new(arr, json_integer(ids[i]));
            continue;
        }
        json_t *e = json_object();
        json_object_set_new(e, "id", json_integer(ids[i]));
        json_object_set_new(e, "piece", piece_json(r->model, ids[i]));
        json_array_append_new(arr, e);
    }
    free(ids);
    server_model_done(r, NAN);
    json_t *j = json_object();
    json_object_set_new(j, "tokens", arr);
    return server_send_json(c, 200, j);
}

static int detokenize(server_srv *s, struct MHD_Connection *c, json_t *body) {
    json_t *toks = json_object_get(body, "tokens");
    if (!json_is_array(toks)) return bad(c, "'tokens' must be an array of token ids", "tokens");
    int rc = MHD_NO;
    server_model *r = use(s, c, json_string_value(json_object_get(body, "model")), &rc);
    if (!r) return rc;
    kiln_detok *dt = kiln_detok_new(r->model);
    server_buf out = {0};
    size_t i;
    json_t *t;
    int bad_id = -1;
    json_array_foreach(toks, i, t) {
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (id < 0 || id >= r->n_vocab) {
            bad_id = (int)i;
            break;
        }
        size_t n;
        const char *p = kiln_detok_push(dt, (int32_t)id, &n);
        server_buf_put(&out, p, n);
    }
    size_t n;
    const char *tail = dt ? kiln_detok_flush(dt, &n) : NULL;
    if (tail) server_buf_put(&out, tail, n);
    kiln_detok_free(dt);
    server_model_done(r, NAN);
    if (!dt || bad_id >= 0) {
        server_buf_free(&out);
        if (!dt) return server_send_error(c, 500, "server_error", "out of memory", NULL);
        char msg[120];
        snprintf(msg, sizeof msg, "tokens[%d] is not a token id of this model (0..%d)", bad_id, r->n_vocab - 1);
        return bad(c, msg, "tokens");
    }
    json_t *j = json_object();
    json_object_set_new(j, "content", server_jstr(out.p ? out.p : "", out.len));
    server_buf_free(&out);
    return server_send_json(c, 200, j);
}

static int apply_template(server_srv *s, struct MHD_Connection *c, json_t *body) {
    json_t *messages = json_object_get(body, "messages");
    if (!json_is_array(messages) || !json_array_size(messages))
        return bad(c, "'messages' must be a non-empty array", "messages");
    int rc = MHD_NO;
    server_model *r = use(s, c, json_string_value(json_object_get(body, "model")), &rc);
    if (!r) return rc;
    json_t *kw = json_object_get(body, "chat_template_kwargs");
    json_t *et = json_object_get(kw, "enable_thinking");
    int think = json_is_boolean(et) ? json_is_true(et) : -1;
    char err[300];
    json_t *msgs = server_defaults_messages(r, messages); /* a pack's system prompt, as a chat request gets it */
    const chat_opts ro = {.cancelled = server_conn_gone_fn, .cancel_arg = c}; /* stops when the client goes */
    char *prompt = server_render_chat(r, msgs, json_object_get(body, "tools"), think, &ro, err, sizeof err);
    json_decref(msgs);
    server_model_done(r, NAN);
    if (!prompt) {
        const int code = server_render_status(err);
        return server_send_error(c, code, code == 500 ? "server_error" : "invalid_request_error", err,
                                 code == 500 ? NULL : "messages");
    }
    json_t *j = json_object();
    json_object_set_new(j, "prompt", server_jstr(prompt, strlen(prompt)));
    free(prompt);
    return server_send_json(c, 200, j);
}

static json_t *token_str(kiln_model *m, int32_t id) {
    char buf[128];
    int n = id >= 0 ? kiln_token_to_piece(m, id, buf, sizeof buf, 1) : 0;
    if (n < 0 || n > (int)sizeof buf) n = 0;
    return server_jstr(buf, (size_t)n);
}

static int props(server_srv *s, struct MHD_Connection *c) {
    int rc = MHD_NO;
    server_model *r = use(s, c, MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "model"), &rc);
    if (!r) return rc;
    /* the defaults a request without sampling fields gets (OpenAI routes) */
    server_gen_opts o;
    server_parse_opts(c, NULL, 0, &o, &rc);
    json_t *params = json_object();
    json_object_set_new(params, "n_predict", json_integer(-1));
    json_object_set_new(params, "temperature", json_real(o.sp.temperature));
    json_object_set_new(params, "top_k", json_integer(o.sp.top_k));
    json_object_set_new(params, "top_p", json_real(o.sp.top_p));
    json_object_set_new(params, "min_p", json_real(o.sp.min_p));
    json_object_set_new(params, "repeat_penalty", json_real(o.sp.repeat_penalty));
    json_object_set_new(params, "repeat_last_n", json_integer(o.sp.repeat_last_n));
    json_object_set_new(params, "presence_penalty", json_real(o.sp.presence_penalty));
    json_object_set_new(params, "frequency_penalty", json_real(o.sp.frequency_penalty));
    json_object_set_new(params, "seed", json_integer(-1)); /* a new seed per request */
    json_object_set_new(params, "stop", json_array());
    json_t *dgs = json_object();
    json_object_set_new(dgs, "n_ctx", json_integer(r->n_ctx));
    json_object_set_new(dgs, "params", params);
    json_t *j = json_object();
    json_object_set_new(j, "default_generation_settings", dgs);
    json_object_set_new(j, "total_slots", json_integer(r->srv->cfg.parallel));
    json_object_set_new(j, "model_alias", json_string(r->name));
    json_object_set_new(j, "model_path", json_string(r->ref));
    json_object_set_new(j, "n_ctx", json_integer(r->n_ctx));
    json_object_set_new(j, "n_vocab", json_integer(r->n_vocab));
    const char *tmpl = server_template_text(r);
    json_object_set_new(j, "chat_template", json_string(tmpl ? tmpl : ""));
    json_object_set_new(j, "bos_token", token_str(r->model, kiln_token_bos(r->model)));
    json_object_set_new(j, "eos_token", token_str(r->model, kiln_token_eos(r->model)));
    json_object_set_new(j, "modalities", json_pack("{s:b,s:b}", "vision", server_media_model_ok(r), "audio", 0));
    json_object_set_new(j, "build_info", json_string("kiln " KILN_VERSION));
    json_object_set_new(j, "backend", json_string(r->backend ? r->backend : "cpu")); /* kiln's: cpu or cuda */
    json_object_set_new(j, "size_vram", json_integer((json_int_t)r->vram_bytes));
    server_model_done(r, NAN);
    return server_send_json(c, 200, j);
}

int server_llama_path(const char *url) {
    return !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize") || !strcmp(url, "/apply-template") ||
           !strcmp(url, "/props");
}

int server_llama_route(server_srv *s, struct MHD_Connection *c, const char *method, const char *url, json_t *body) {
    int post = !strcmp(method, "POST");
    if (!strcmp(url, "/props")) {
        if (!strcmp(method, "GET") || !strcmp(method, "HEAD")) return props(s, c);
        return server_send_error(c, 405, "invalid_request_error",
                                 "GET /props only (kiln's settings are fixed at start)", NULL);
    }
    if (!post) return server_send_error(c, 405, "invalid_request_error", "this route takes POST", NULL);
    if (!body) return bad(c, "the request has no JSON body", NULL);
    if (!strcmp(url, "/tokenize")) return tokenize(s, c, body);
    if (!strcmp(url, "/detokenize")) return detokenize(s, c, body);
    return apply_template(s, c, body);
}
