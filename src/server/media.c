/* Images out of requests: data: URLs and base64 decoded, http(s) URLs
 * fetched (only with --allow-image-urls), all within the request's byte
 * limit, and the messages rewritten with a marker per image. */
#include "server/media.h"

#include "server/buf.h"
#include "server/prompt.h"
#include "server/srv.h"

#include "base/base.h"
#include "model/model.h"
#include "vision/decode.h"
#include "vision/vision.h"

#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int server_media_model_ok(server_model *r) { return r && r->model && kiln_model_has_vision(r->model); }

void server_media_free(server_media *m) {
    if (!m) return;
    for (int32_t i = 0; i < m->n; i++) free(m->im[i].data);
    free(m->im);
    memset(m, 0, sizeof *m);
}

static int b64_val(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

int server_media_b64(const char *s, size_t n, size_t max, uint8_t **out, size_t *len, size_t *bad) {
    *out = NULL;
    *len = 0;
    *bad = 0;
    /* an upper bound of the output first: nothing is allocated past max */
    size_t digits = 0, end = n;
    while (end > 0 && (s[end - 1] == '=' || s[end - 1] == '\n' || s[end - 1] == '\r' || s[end - 1] == ' ')) end--;
    for (size_t i = end; i < n; i++)
        if (s[i] == '=' && ++digits > 2) {
            *bad = i;
            return -1;
        }
    digits = 0;
    for (size_t i = 0; i < end; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n' || c == '\r' || c == ' ' || c == '\t') continue;
        if (b64_val(c) < 0) {
            *bad = i;
            return -1;
        }
        digits++;
    }
    if (digits % 4 == 1) {
        *bad = end;
        return -1;
    }
    size_t bytes = digits / 4 * 3 + (digits % 4 ? digits % 4 - 1 : 0);
    if (bytes > max) return -2;
    uint8_t *p = base_malloc(bytes ? bytes : 1);
    if (!p) return -3;
    uint32_t acc = 0;
    int k = 0;
    size_t o = 0;
    for (size_t i = 0; i < end; i++) {
        int v = b64_val((unsigned char)s[i]);
        if (v < 0) continue;
        acc = acc << 6 | (uint32_t)v;
        if (++k == 4) {
            p[o++] = (uint8_t)(acc >> 16);
            p[o++] = (uint8_t)(acc >> 8);
            p[o++] = (uint8_t)acc;
            acc = 0;
            k = 0;
        }
    }
    if (k == 2) p[o++] = (uint8_t)(acc >> 4);
    if (k == 3) {
        p[o++] = (uint8_t)(acc >> 10);
        p[o++] = (uint8_t)(acc >> 2);
    }
    *out = p;
    *len = o;
    return 0;
}

int server_media_prompt(server_model *r, const char *text, const server_media *m, int32_t **ids, int32_t *n,
                        server_prompt_media *pm, int *status, char *err, size_t cap) {
    *ids = NULL;
    *n = 0;
    memset(pm, 0, sizeof *pm);
    kiln_image_input *in = base_calloc((size_t)m->n, sizeof *in);
    if (!in) {
        *status = 500;
        snprintf(err, cap, "out of memory");
        return -1;
    }
    for (int32_t k = 0; k < m->n; k++) {
        in[k].data = m->im[k].data;
        in[k].len = m->im[k].len;
    }
    vision_prompt vp;
    memset(&vp, 0, sizeof vp);
    kiln_status st =
        model_image_prompt(r->model, text, strlen(text), server_add_bos(r->model, text, 1), 1, in, m->n, &vp);
    free(in);
    if (st != KILN_OK) {
        *status = st == KILN_ERR_NOMEM || st == KILN_ERR_INTERNAL ? 500 : 400;
        snprintf(err, cap, "%s", kiln_last_error());
        return -1;
    }
    /* the tokens and rows go to the request */
    *ids = vp.tok;
    *n = vp.n_tok;
    pm->embd = vp.embd;
    pm->n_rows = vp.n_rows;
    pm->mpos = vp.mpos;
    vp.tok = NULL;
    vp.embd = NULL;
    vp.mpos = NULL;
    vision_prompt_free(&vp);
    return 0;
}

/* ---- one request's images ---- */

typedef struct take {
    server_model *r;
    size_t max; /* bytes allowed, all images together */
    int allow_urls;
    server_media *m;
    const char **urls; /* [m->n]: an http(s) URL still to fetch, else NULL */
    int status;
    char *err;
    size_t cap;
} take;

static int refuse(take *t, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(take *t, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, t->cap, fmt, ap);
    va_end(ap);
    t->status = status;
    return -1;
}

static int over_limit(take *t, const char *where) {
    return refuse(t, 413, "%s: the request's images exceed the limit of %zu bytes (kiln serve --max-image-bytes)",
                  where, t->max);
}

/* A new slot at the end of t->m (data NULL until filled). */
static int add_slot(take *t) {
    server_media *m = t->m;
    if (m->n >= 4096) return refuse(t, 400, "too many images in one request (at most 4096)");
    server_image *im = base_realloc(m->im, ((size_t)m->n + 1) * sizeof *im);
    if (!im) return refuse(t, 500, "out of memory");
    m->im = im;
    const char **u = base_realloc(t->urls, ((size_t)m->n + 1) * sizeof *u);
    if (!u) return refuse(t, 500, "out of memory");
    t->urls = u;
    m->im[m->n] = (server_image){NULL, 0};
    t->urls[m->n] = NULL;
    m->n++;
    return 0;
}

/* Base64 text of an image into a new slot. */
static int add_b64(take *t, const char *s, size_t n, const char *where) {
    if (add_slot(t)) return -1;
    uint8_t *p;
    size_t len, bad;
    int rc = server_media_b64(s, n, t->max - t->m->bytes, &p, &len, &bad);
    if (rc == -1)
        return refuse(t, 400,
                      "%s: the image's base64 is invalid (at character %zu; the standard alphabet A-Z a-z 0-9 + /)",
                      where, bad);
    if (rc == -2) return over_limit(t, where);
    if (rc == -3) return refuse(t, 500, "out of memory");
    t->m->im[t->m->n - 1] = (server_image){p, len};
    t->m->bytes += len;
    if (!vision_format(p, len))
        return refuse(t, 400, "%s: the image is not a PNG, JPEG or WebP file (by its first bytes)", where);
    return 0;
}

/* A URL: data: is decoded now; http(s) waits for the fetch (after the
 * model is known to take images). */
static int add_url(take *t, const char *u, const char *where) {
    if (!u) return refuse(t, 400, "%s: the image part needs its URL as a string", where);
    if (!strncasecmp(u, "data:", 5)) {
        const char *comma = strchr(u, ',');
        if (!comma || comma - u < 12 || strncasecmp(comma - 7, ";base64", 7))
            return refuse(t, 400, "%s: a data: URL of an image must be base64 (data:image/png;base64,...)", where);
        return add_b64(t, comma + 1, strlen(comma + 1), where);
    }
    if (strncasecmp(u, "http://", 7) && strncasecmp(u, "https://", 8))
        return refuse(t, 400, "%s: an image URL must be a data: URL (base64) or http(s)", where);
    if (!t->allow_urls)
        return refuse(t, 400,
                      "%s: kiln fetches no image URLs unless started with --allow-image-urls; send the image as a "
                      "data: URL (data:image/png;base64,...)",
                      where);
    if (add_slot(t)) return -1;
    t->urls[t->m->n - 1] = u;
    return 0;
}

/* The part's image, when it is one: 1 taken, 0 not an image part, -1 refused. */
static int image_part(take *t, json_t *part, const char *where) {
    const char *type = json_string_value(json_object_get(part, "type"));
    if (!type) return 0;
    if (!strcmp(type, "image_url")) {
        json_t *iu = json_object_get(part, "image_url");
        const char *u = json_is_string(iu) ? json_string_value(iu) : json_string_value(json_object_get(iu, "url"));
        return add_url(t, u, where) ? -1 : 1;
    }
    if (!strcmp(type, "input_image")) {
        json_t *iu = json_object_get(part, "image_url");
        const char *u = json_is_string(iu) ? json_string_value(iu) : json_string_value(json_object_get(iu, "url"));
        if (!u && json_object_get(part, "file_id"))
            return refuse(t, 400, "%s: kiln keeps no files: send the image as a data: URL in 'image_url'", where);
        return add_url(t, u, where) ? -1 : 1;
    }
    if (!strcmp(type, "image")) {
        json_t *src = json_object_get(part, "source");
        const char *st = json_string_value(json_object_get(src, "type"));
        if (st && !strcmp(st, "base64")) {
            json_t *d = json_object_get(src, "data");
            if (!json_is_string(d)) return refuse(t, 400, "%s: a base64 image source needs 'data' as a string", where);
            return add_b64(t, json_string_value(d), json_string_length(d), where) ? -1 : 1;
        }
        if (st && !strcmp(st, "url")) return add_url(t, json_string_value(json_object_get(src, "url")), where) ? -1 : 1;
        return refuse(t, 400, "%s: an image source must be of type 'base64' or 'url' (kiln keeps no files)", where);
    }
    return 0;
}

static int is_text_part(const char *type) {
    return type && (!strcmp(type, "text") || !strcmp(type, "input_text") || !strcmp(type, "output_text"));
}

/* Ollama's images: base64 strings, each a marker into text. */
static int ollama_images(take *t, json_t *images, const char *what, server_buf *text) {
    if (!json_is_array(images)) return refuse(t, 400, "%s must be an array of base64 strings", what);
    size_t i;
    json_t *v;
    json_array_foreach(images, i, v) {
        char where[96];
        snprintf(where, sizeof where, "%s[%zu]", what, i);
        if (!json_is_string(v)) return refuse(t, 400, "%s must be a base64 string", where);
        if (add_b64(t, json_string_value(v), json_string_length(v), where)) return -1;
        if (text) server_buf_puts(text, SERVER_MEDIA_MARKER);
    }
    return 0;
}

/* The http(s) URLs, fetched in order within what the limit leaves. */
typedef struct sink {
    uint8_t *p;
    size_t n, cap, max;
    int over, oom;
} sink;

static size_t sink_write(char *d, size_t sz, size_t nm, void *user) {
    sink *s = user;
    size_t n = sz * nm;
    if (n > s->max - s->n) {
        s->over = 1;
        return 0;
    }
    if (s->n + n > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 65536;
        while (cap < s->n + n) cap *= 2;
        if (cap > s->max) cap = s->max;
        uint8_t *q = base_realloc(s->p, cap);
        if (!q) {
            s->oom = 1;
            return 0;
        }
        s->p = q;
        s->cap = cap;
    }
    memcpy(s->p + s->n, d, n);
    s->n += n;
    return n;
}

int server_media_fetch(const char *url, size_t max, uint8_t **out, size_t *len, char *err, size_t cap) {
    *out = NULL;
    *len = 0;
    CURL *h = curl_easy_init();
    if (!h) {
        snprintf(err, cap, "out of memory");
        return 500;
    }
    sink s = {NULL, 0, 0, max, 0, 0};
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, (long)SERVER_MEDIA_MAX_REDIRECTS);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)SERVER_MEDIA_FETCH_SECONDS);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)max);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "kiln");
    CURLcode cc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    int st = 0;
    if (s.over || cc == CURLE_FILESIZE_EXCEEDED) {
        snprintf(err, cap, "%.200s is larger than the %zu bytes left for the request's images", url, max);
        st = 413;
    } else if (s.oom) {
        snprintf(err, cap, "out of memory");
        st = 500;
    } else if (cc != CURLE_OK) {
        snprintf(err, cap, "fetching %.200s failed: %s", url, cerr[0] ? cerr : curl_easy_strerror(cc));
        st = 400;
    } else if (code != 200) {
        snprintf(err, cap, "fetching %.200s gave HTTP %ld", url, code);
        st = 400;
    } else if (!vision_format(s.p, s.n)) {
        snprintf(err, cap, "%.200s is not a PNG, JPEG or WebP file (by its first bytes)", url);
        st = 400;
    }
    if (st) {
        free(s.p);
        return st;
    }
    *out = s.p;
    *len = s.n;
    return 0;
}

static int fetch(take *t, int32_t k) {
    char msg[400];
    uint8_t *p;
    size_t n;
    int st = server_media_fetch(t->urls[k], t->max - t->m->bytes, &p, &n, msg, sizeof msg);
    char where[32];
    snprintf(where, sizeof where, "image %d", (int)k + 1);
    if (st == 413) return over_limit(t, where);
    if (st) return refuse(t, st, "%s: %s", where, msg);
    t->m->im[k] = (server_image){p, n};
    t->m->bytes += n;
    return 0;
}

/* After the parts: no images is 0; a model without a projector is
 * refused before anything is fetched. */
static int finish(take *t) {
    if (t->m->n == 0) return 0;
    if (!server_media_model_ok(t->r))
        return refuse(t, 400, "model \"%s\" does not take images: it has no vision projector (mmproj)",
                      t->r ? t->r->name : "");
    for (int32_t k = 0; k < t->m->n; k++)
        if (t->urls[k] && fetch(t, k)) return -1;
    return 1;
}

static void take_init(take *t, server_model *r, server_media *out, char *err, size_t cap) {
    memset(out, 0, sizeof *out);
    memset(t, 0, sizeof *t);
    t->r = r;
    t->m = out;
    t->err = err;
    t->cap = cap;
    t->status = 400;
    t->max = r && r->srv && r->srv->cfg.max_image_bytes ? r->srv->cfg.max_image_bytes : SERVER_MEDIA_MAX_BYTES;
    t->allow_urls = r && r->srv && r->srv->cfg.allow_image_urls;
}

/* 1 when the message holds an image part or Ollama's images. */
static int has_images(json_t *msg) {
    json_t *images = json_object_get(msg, "images");
    if (images && !json_is_null(images)) return 1;
    size_t k;
    json_t *part;
    json_array_foreach(json_object_get(msg, "content"), k, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        if (type && (!strcmp(type, "image_url") || !strcmp(type, "input_image") || !strcmp(type, "image"))) return 1;
    }
    return 0;
}

int server_media_chat(server_model *r, json_t *messages, json_t **rewritten, server_media *out, int *status, char *err,
                      size_t cap) {
    take t;
    take_init(&t, r, out, err, cap);
    *rewritten = NULL;
    size_t i;
    json_t *msg;
    int any = 0;
    json_array_foreach(messages, i, msg) any |= json_is_object(msg) && has_images(msg);
    if (!any) return 0;
    json_t *copy = json_array();
    if (!copy) {
        *status = 500;
        snprintf(err, cap, "out of memory");
        return -1;
    }
    int rc = 0;
    json_array_foreach(messages, i, msg) {
        json_t *content = json_object_get(msg, "content");
        json_t *images = json_object_get(msg, "images");
        size_t k;
        json_t *part;
        if (!json_is_object(msg) || !has_images(msg)) {
            if (json_array_append(copy, msg)) rc = refuse(&t, 500, "out of memory");
            if (rc) break;
            continue;
        }
        server_buf text = {0};
        char where[96];
        snprintf(where, sizeof where, "messages[%zu].images", i);
        if (images && !json_is_null(images) && ollama_images(&t, images, where, &text)) rc = -1;
        if (!rc && json_is_string(content))
            server_buf_put(&text, json_string_value(content), json_string_length(content));
        json_array_foreach(content, k, part) {
            if (rc) break;
            snprintf(where, sizeof where, "messages[%zu].content[%zu]", i, k);
            int got = image_part(&t, part, where);
            if (got < 0) {
                rc = -1;
            } else if (got) {
                server_buf_puts(&text, SERVER_MEDIA_MARKER);
            } else if (is_text_part(json_string_value(json_object_get(part, "type")))) {
                json_t *tx = json_object_get(part, "text");
                if (json_is_string(tx)) server_buf_put(&text, json_string_value(tx), json_string_length(tx));
            }
        }
        json_t *m = rc ? NULL : json_copy(msg);
        if (m) {
            json_t *str = text.failed ? NULL : server_jstr(text.p ? text.p : "", text.len);
            json_object_del(m, "images");
            if (!str || json_object_set_new(m, "content", str)) {
                json_decref(m);
                rc = refuse(&t, 500, "out of memory");
            } else if (json_array_append_new(copy, m)) {
                rc = refuse(&t, 500, "out of memory");
            }
        } else if (!rc) {
            rc = refuse(&t, 500, "out of memory");
        }
        server_buf_free(&text);
        if (rc) break;
    }
    if (!rc) rc = finish(&t);
    free(t.urls);
    if (rc <= 0) {
        json_decref(copy);
        if (rc < 0) *status = t.status;
        server_media_free(out);
        return rc;
    }
    *rewritten = copy;
    return 1;
}

int server_media_list(server_model *r, json_t *images, server_media *out, int *status, char *err, size_t cap) {
    take t;
    take_init(&t, r, out, err, cap);
    int rc = 0;
    if (images && !json_is_null(images)) rc = ollama_images(&t, images, "images", NULL);
    if (!rc) rc = finish(&t);
    free(t.urls);
    if (rc <= 0) {
        if (rc < 0) *status = t.status;
        server_media_free(out);
    }
    return rc;
}
