/* POST /v1/images/generations (OpenAI's images API) over an image pack
 * that `kiln serve --image PACK` loads into an image engine (engine/image.c).
 *
 * Accepted: prompt (required), n (1..4), size ("256x256"), response_format
 * ("b64_json", the default here: kiln serves no URLs), model (any: there is
 * one image pack), quality ("standard" or "auto"), style (none), user, and
 * kiln's own seed (default 42), steps and cfg.  Anything else, or another
 * value, is a 400 naming the parameter. */
#include "server/api.h"
#include "server/buf.h"
#include "server/reply.h"
#include "server/srv.h"

#include <microhttpd.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct server_images {
    kiln_engine *e;
    char name[256];
};

server_images *server_images_start(const char *pack, char *err, size_t cap) {
    char path[4096];
    struct stat st;
    if (stat(pack, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(path, sizeof path, "%s/pack.json", pack);
    else
        snprintf(path, sizeof path, "%s", pack);
    server_images *im = calloc(1, sizeof *im);
    if (!im) {
        snprintf(err, cap, "out of memory");
        return NULL;
    }
    const char *base = strrchr(pack, '/');
    snprintf(im->name, sizeof im->name, "%s", base && base[1] ? base + 1 : pack);
    kiln_status rc = kiln_engine_create(KILN_ENGINE_IMAGE, KILN_ENGINE_BACKEND_AUTO, &im->e);
    if (!rc) rc = kiln_engine_start(im->e);
    if (!rc) rc = kiln_engine_load(im->e, path, NULL);
    if (!rc) rc = kiln_engine_wait_idle(im->e, -1);
    kiln_engine_observation ob;
    if (!rc && kiln_engine_observe(im->e, &ob) == KILN_OK && ob.state != KILN_ENGINE_LOADED) {
        snprintf(err, cap, "%s", ob.message);
        rc = KILN_ERR_FORMAT;
    } else if (rc) {
        snprintf(err, cap, "%s", kiln_last_error());
    }
    if (rc) {
        server_images_free(im);
        return NULL;
    }
    return im;
}

void server_images_free(server_images *im) {
    if (!im) return;
    kiln_engine_free(im->e);
    free(im);
}

static int bad(struct MHD_Connection *c, const char *msg, const char *param) {
    return server_send_error(c, MHD_HTTP_BAD_REQUEST, "invalid_request_error", msg, param);
}

int server_oai_images(server_srv *s, struct MHD_Connection *c, json_t *body) {
    if (!s->images)
        return server_send_error(c, MHD_HTTP_NOT_FOUND, "invalid_request_error",
                                 "no image model is served (start kiln serve with --image PACK)", "model");
    if (!json_is_object(body)) return bad(c, "the body must be a JSON object", NULL);
    kiln_image_request r = kiln_image_request_default();
    const char *key;
    json_t *v;
    char msg[300];
    json_object_foreach(body, key, v) {
        if (!strcmp(key, "prompt")) {
            if (!json_is_string(v) || !json_string_length(v)) return bad(c, "prompt must be a non-empty string", key);
            r.prompt = json_string_value(v);
        } else if (!strcmp(key, "n")) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 4)
                return bad(c, "n must be an integer from 1 to 4", key);
            r.n = (int32_t)json_integer_value(v);
        } else if (!strcmp(key, "size")) {
            if (!json_is_string(v) || strcmp(json_string_value(v), "256x256"))
                return bad(c, "size must be 256x256 (the only size this model makes)", key);
        } else if (!strcmp(key, "response_format")) {
            if (!json_is_string(v) || strcmp(json_string_value(v), "b64_json"))
                return bad(c, "response_format must be b64_json (kiln serves no image URLs)", key);
        } else if (!strcmp(key, "quality")) {
            if (!json_is_string(v) ||
                (strcmp(json_string_value(v), "standard") && strcmp(json_string_value(v), "auto")))
                return bad(c, "quality must be standard or auto", key);
        } else if (!strcmp(key, "seed")) {
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                return bad(c, "seed must be a non-negative integer", key);
            r.seed = (uint64_t)json_integer_value(v);
        } else if (!strcmp(key, "steps")) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 200)
                return bad(c, "steps must be an integer from 1 to 200", key);
            r.steps = (int32_t)json_integer_value(v);
        } else if (!strcmp(key, "cfg")) {
            if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 100)
                return bad(c, "cfg must be a number from 0 to 100", key);
            r.cfg = (float)json_number_value(v);
        } else if (!strcmp(key, "model") || !strcmp(key, "user")) {
            if (!json_is_string(v)) return bad(c, "must be a string", key);
        } else {
            snprintf(msg, sizeof msg, "parameter '%s' is not supported", key);
            return bad(c, msg, key);
        }
    }
    if (!r.prompt) return bad(c, "prompt is required", "prompt");
    kiln_image_result *res = NULL;
    kiln_status st = kiln_engine_image(s->images->e, &r, &res);
    if (st != KILN_OK) {
        snprintf(msg, sizeof msg, "%s", kiln_last_error());
        const int code = st == KILN_ERR_CONTEXT_FULL || st == KILN_ERR_INVALID_ARG || st == KILN_ERR_UNSUPPORTED
                             ? MHD_HTTP_BAD_REQUEST
                             : MHD_HTTP_INTERNAL_SERVER_ERROR;
        return server_send_error(c, code, code == MHD_HTTP_BAD_REQUEST ? "invalid_request_error" : "server_error", msg,
                                 st == KILN_ERR_CONTEXT_FULL ? "prompt" : NULL);
    }
    json_t *data = json_array();
    for (int32_t i = 0; i < res->n; i++) {
        const size_t len = res->images[i].len, b64 = 4 * ((len + 2) / 3) + 1;
        unsigned char *enc = malloc(b64);
        if (!enc) {
            json_decref(data);
            kiln_image_result_free(res);
            return server_send_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", "out of memory", NULL);
        }
        EVP_EncodeBlock(enc, res->images[i].png, (int)len);
        json_array_append_new(data, json_pack("{s:s,s:s}", "b64_json", (const char *)enc, "revised_prompt", r.prompt));
        free(enc);
    }
    kiln_image_result_free(res);
    json_t *out = json_pack("{s:I,s:o}", "created", (json_int_t)server_wall(), "data", data);
    return server_send_json(c, MHD_HTTP_OK, out);
}
