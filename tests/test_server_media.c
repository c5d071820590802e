/* Images in requests (src/server/media.c) through a real server on
 * 127.0.0.1: the base64 decoder; each API's image parts (OpenAI chat
 * image_url, Responses input_image, Anthropic image blocks, Ollama's
 * images on /api/chat and /api/generate) reach the server and are refused
 * by name for a model without a vision projector, never dropped; bad
 * base64, data: URLs that are not base64, bytes that are no image, http(s)
 * URLs without --allow-image-urls (400) and images over the byte limit
 * (413) are refused with a clear message; /props and /api/show say the
 * model takes no images; server_media_fetch against a local HTTP server (an
 * image, a redirect, 404, a body over the limit, a redirect to ftp, bytes
 * that are no image).  With the Gemma 3 vision fixture (a store-like pack
 * of model and mmproj): /props, /api/show and /v1/models say vision, and
 * one image with the same words through each API gives the same greedy
 * text, by URL too.  Every wait is bounded. */
#define _GNU_SOURCE
#include "server/media.h"
#include "server/server.h"

#include "testutil.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MODEL "../models/stories260K.gguf"
#define LIMIT 4096 /* the servers' --max-image-bytes */

static int g_port;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* POSTs body (or GETs when body is NULL) and reads the whole response
 * (Connection: close) for up to 60 s: its status, the response in out. */
static int request(const char *path, const char *body, char *out, size_t cap) {
    out[0] = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&to, sizeof to)) {
        if (fd >= 0) close(fd);
        return 0;
    }
    size_t bl = body ? strlen(body) : 0;
    char *req = malloc(bl + 512);
    int h = body ? snprintf(req, 512,
                            "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                            path, bl)
                 : snprintf(req, 512, "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", path);
    if (body) memcpy(req + h, body, bl);
    for (size_t sent = 0, len = (size_t)h + bl; sent < len;) {
        ssize_t k = send(fd, req + sent, len - sent, MSG_NOSIGNAL);
        if (k <= 0) break;
        sent += (size_t)k;
    }
    free(req);
    size_t n = 0;
    const double end = now() + 60;
    while (n + 1 < cap && now() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 1000) <= 0) continue;
        ssize_t k = recv(fd, out + n, cap - 1 - n, 0);
        if (k <= 0) break;
        n += (size_t)k;
        out[n] = 0;
    }
    close(fd);
    return n > 12 && !strncmp(out, "HTTP/1.", 7) ? atoi(out + 9) : 0;
}

static char *b64(const uint8_t *p, size_t n) {
    static const char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(n / 3 * 4 + 8), *q = o;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t x = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *q++ = k[x >> 18 & 63];
        *q++ = k[x >> 12 & 63];
        *q++ = i + 1 < n ? k[x >> 6 & 63] : '=';
        *q++ = i + 2 < n ? k[x & 63] : '=';
    }
    *q = 0;
    return o;
}

static void test_b64(void) {
    uint8_t *p;
    size_t len, bad;
    CHECK(server_media_b64("QUJD", 4, 100, &p, &len, &bad) == 0 && len == 3 && !memcmp(p, "ABC", 3));
    free(p);
    CHECK(server_media_b64("QUI=", 4, 100, &p, &len, &bad) == 0 && len == 2 && !memcmp(p, "AB", 2));
    free(p);
    CHECK(server_media_b64("QUI", 3, 100, &p, &len, &bad) == 0 && len == 2 && !memcmp(p, "AB", 2));
    free(p);
    CHECK(server_media_b64("QQ==", 4, 100, &p, &len, &bad) == 0 && len == 1 && p[0] == 'A');
    free(p);
    CHECK(server_media_b64("QU\r\nJD\n", 7, 100, &p, &len, &bad) == 0 && len == 3 && !memcmp(p, "ABC", 3));
    free(p);
    CHECK(server_media_b64("", 0, 100, &p, &len, &bad) == 0 && len == 0);
    free(p);
    CHECK(server_media_b64("QU@D", 4, 100, &p, &len, &bad) == -1 && bad == 2 && p == NULL);
    CHECK(server_media_b64("Q", 1, 100, &p, &len, &bad) == -1);
    CHECK(server_media_b64("QUJD====", 8, 100, &p, &len, &bad) == -1);
    CHECK(server_media_b64("QU=D", 4, 100, &p, &len, &bad) == -1);
    CHECK(server_media_b64("QUJDQUJD", 8, 5, &p, &len, &bad) == -2 && p == NULL);
    CHECK(server_media_b64("QUJDQUJD", 8, 6, &p, &len, &bad) == 0 && len == 6);
    free(p);
}

/* expects status and words in the response to POST body to path */
static void expect(const char *what, const char *path, const char *body, int status, const char *words) {
    static char out[1 << 16];
    int st = request(path, body, out, sizeof out);
    CHECKF(st == status, "%s: status %d, not %d: %.400s", what, st, status, out);
    CHECKF(strstr(out, words) != NULL, "%s: the response lacks '%s': %.400s", what, words, out);
}

static server_server *start_with(const char *model, const char *mmproj, int allow_urls) {
    server_config cfg = server_config_default();
    cfg.mmproj = mmproj;
    cfg.port = 0;
    cfg.models = &model;
    cfg.n_models = 1;
    cfg.parallel = 1;
    cfg.n_ctx = 256;
    cfg.allow_image_urls = allow_urls;
    cfg.n_threads = 1;
    cfg.keep_alive = -1;
    cfg.max_image_bytes = LIMIT;
    server_server *srv = NULL;
    CHECK(server_server_start(&cfg, &srv) == KILN_OK);
    if (!srv) return NULL;
    char msg[256];
    CHECKF(server_server_wait_loaded(srv, msg, sizeof msg) == KILN_OK, "%s", msg);
    g_port = server_server_port(srv);
    return srv;
}

static server_server *start(const char *model, int allow_urls) { return start_with(model, NULL, allow_urls); }

static char *fmt(const char *f, const char *a) {
    size_t n = strlen(f) + strlen(a) + 1;
    char *s = malloc(n);
    snprintf(s, n, f, a);
    return s;
}

static void test_server(const char *model_path) {
    server_server *srv = start(model_path, 0);
    if (!srv) return;
    size_t plen;
    char *png = t_read_file("data/vision/rgb.png", &plen);
    CHECK(png != NULL);
    if (!png) return;
    char *img = b64((const uint8_t *)png, plen);
    uint8_t big[LIMIT + 16];
    memset(big, 0, sizeof big);
    memcpy(big, png, plen);
    char *large = b64(big, sizeof big);
    char *text = b64((const uint8_t *)"hello, world", 12);
    const char *no = "does not take images";

    /* a text chat still runs */
    expect("text chat", "/v1/chat/completions",
           "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 200, "chat.completion");

    /* OpenAI chat: image_url parts */
    const char *oai = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"what is it\"},"
                      "{\"type\":\"image_url\",\"image_url\":{\"url\":\"%s\"}}]}]}";
    char *u = fmt("data:image/png;base64,%s", img), *b = fmt(oai, u);
    expect("chat image", "/v1/chat/completions", b, 400, no);
    free(b);
    free(u);
    b = fmt(oai, "data:image/png;base64,iVBO@@@@");
    expect("chat bad base64", "/v1/chat/completions", b, 400, "base64 is invalid (at character 4");
    free(b);
    b = fmt(oai, "data:image/png,iVBO");
    expect("chat data URL not base64", "/v1/chat/completions", b, 400, "must be base64");
    free(b);
    b = fmt(oai, "http://127.0.0.1:9/cat.png");
    expect("chat URL without the flag", "/v1/chat/completions", b, 400, "--allow-image-urls");
    free(b);
    b = fmt(oai, "ftp://example.com/cat.png");
    expect("chat ftp URL", "/v1/chat/completions", b, 400, "data: URL (base64) or http(s)");
    free(b);
    u = fmt("data:image/png;base64,%s", text);
    b = fmt(oai, u);
    expect("chat not an image", "/v1/chat/completions", b, 400, "not a PNG, JPEG or WebP");
    free(b);
    free(u);
    u = fmt("data:image/png;base64,%s", large);
    b = fmt(oai, u);
    expect("chat over the limit", "/v1/chat/completions", b, 413, "exceed the limit of 4096 bytes");
    free(b);
    free(u);

    /* Responses: input_image */
    const char *resp = "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"what\"},"
                       "{\"type\":\"input_image\",\"image_url\":\"%s\"}]}]}";
    u = fmt("data:image/png;base64,%s", img);
    b = fmt(resp, u);
    expect("responses image", "/v1/responses", b, 400, no);
    free(b);
    free(u);
    b = fmt(resp, "data:image/png;base64,!!!!");
    expect("responses bad base64", "/v1/responses", b, 400, "base64 is invalid");
    free(b);
    expect("responses file_id", "/v1/responses",
           "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"file_id\":\"f1\"}]}]}", 400,
           "keeps no files");

    /* Anthropic: image blocks */
    const char *ant = "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
                      "\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"%s\"}},"
                      "{\"type\":\"text\",\"text\":\"what\"}]}]}";
    b = fmt(ant, img);
    expect("messages image", "/v1/messages", b, 400, no);
    free(b);
    b = fmt(ant, large);
    expect("messages over the limit", "/v1/messages", b, 413, "request_too_large");
    free(b);
    expect("messages file source", "/v1/messages",
           "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":"
           "{\"type\":\"file\",\"file_id\":\"f\"}}]}]}",
           400, "'base64' or 'url'");
    expect("messages URL source", "/v1/messages",
           "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":"
           "{\"type\":\"url\",\"url\":\"https://example.com/a.png\"}}]}]}",
           400, "--allow-image-urls");

    /* Ollama: images on /api/chat and /api/generate */
    b = fmt("{\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"what\",\"images\":[\"%s\"]}]}", img);
    expect("ollama chat image", "/api/chat", b, 400, no);
    free(b);
    expect("ollama chat bad base64", "/api/chat",
           "{\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"what\",\"images\":[\"a b!\"]}]}", 400,
           "messages[0].images[0]: the image's base64 is invalid");
    expect("ollama chat images not strings", "/api/chat",
           "{\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"what\",\"images\":[1]}]}", 400,
           "must be a base64 string");
    b = fmt("{\"stream\":false,\"prompt\":\"what\",\"images\":[\"%s\"]}", img);
    expect("ollama generate image", "/api/generate", b, 400, no);
    free(b);
    b = fmt("{\"stream\":false,\"prompt\":\"what\",\"images\":[\"%s\"]}", large);
    expect("ollama generate over the limit", "/api/generate", b, 413, "exceed the limit");
    free(b);

    /* what the model says of itself */
    static char out[1 << 16];
    CHECK(request("/props", NULL, out, sizeof out) == 200);
    CHECKF(strstr(out, "\"vision\": false") || strstr(out, "\"vision\":false"), "/props: %.300s", out);
    CHECK(request("/api/show", "{\"model\":\"chat\"}", out, sizeof out) == 200);
    CHECKF(strstr(out, "\"capabilities\"") && !strstr(out, "\"vision\""), "/api/show: %.400s", out);

    free(img);
    free(large);
    free(text);
    free(png);
    server_server_drain(srv, 5);
    server_server_free(srv);
}

/* ---- image URLs ---- */

static char *g_png;
static size_t g_png_len;

static enum MHD_Result serve(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                             const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)cls, (void)method, (void)version, (void)upload, (void)upload_size, (void)con_cls;
    static char big[LIMIT * 2];
    struct MHD_Response *r;
    unsigned code = 200;
    if (!strcmp(url, "/cat.png")) {
        r = MHD_create_response_from_buffer(g_png_len, g_png, MHD_RESPMEM_PERSISTENT);
    } else if (!strcmp(url, "/big.png")) {
        memcpy(big, g_png, g_png_len);
        r = MHD_create_response_from_buffer(sizeof big, big, MHD_RESPMEM_PERSISTENT);
    } else if (!strcmp(url, "/text")) {
        r = MHD_create_response_from_buffer(5, "hello", MHD_RESPMEM_PERSISTENT);
    } else if (!strcmp(url, "/moved") || !strcmp(url, "/to-ftp")) {
        r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(r, "Location", !strcmp(url, "/moved") ? "/cat.png" : "ftp://127.0.0.1/cat.png");
        code = 302;
    } else {
        r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        code = 404;
    }
    enum MHD_Result ok = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ok;
}

static void test_fetch(void) {
    g_png = t_read_file("data/vision/rgb.png", &g_png_len);
    CHECK(g_png != NULL);
    if (!g_png) return;
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, serve, NULL,
                                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a, MHD_OPTION_END);
    CHECK(d != NULL);
    if (!d) return;
    int port = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port;
    char url[128], err[512];
    uint8_t *p;
    size_t n;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/cat.png", port);
    CHECKF(server_media_fetch(url, LIMIT, &p, &n, err, sizeof err) == 0, "%s", err);
    CHECK(p && n == g_png_len && !memcmp(p, g_png, n));
    free(p);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/moved", port);
    CHECKF(server_media_fetch(url, LIMIT, &p, &n, err, sizeof err) == 0 && n == g_png_len, "%s", err);
    free(p);
    static const struct {
        const char *path;
        int status;
        const char *words;
    } bad[] = {
        {"/missing.png", 400, "gave HTTP 404"},
        {"/big.png", 413, "larger than the 4096 bytes"},
        {"/text", 400, "not a PNG, JPEG or WebP"},
        {"/to-ftp", 400, "failed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, bad[i].path);
        int st = server_media_fetch(url, LIMIT, &p, &n, err, sizeof err);
        CHECKF(st == bad[i].status && strstr(err, bad[i].words) && p == NULL, "%s: %d %s", bad[i].path, st, err);
    }
    MHD_stop_daemon(d);
    free(g_png);
}

/* ---- a model that takes images (the Gemma 3 vision fixture) ---- */

#define VDIR "data/vision/"

static int copy_file(const char *from, const char *to) {
    size_t n;
    char *b = t_read_file(from, &n);
    FILE *f = b ? fopen(to, "wb") : NULL;
    int ok = f && fwrite(b, 1, n, f) == n;
    if (f) ok &= fclose(f) == 0;
    free(b);
    return ok ? 0 : -1;
}

/* The text of a response: the JSON body's field at the path of keys and
 * indexes ("choices", "0", "message", "content"), or "" */
static const char *field(json_t *j, const char *const *path) {
    for (; j && *path; path++)
        j = json_is_array(j) ? json_array_get(j, (size_t)atoi(*path)) : json_object_get(j, *path);
    return json_string_value(j) ? json_string_value(j) : "";
}

static json_t *post_json(const char *path, const char *body, int *status) {
    static char out[1 << 17];
    *status = request(path, body, out, sizeof out);
    const char *b = strstr(out, "\r\n\r\n");
    return b ? json_loads(b + 4, 0, NULL) : NULL;
}

/* The same image and words through every API give the same greedy text;
 * an http(s) URL (with --allow-image-urls) gives what its data: URL does. */
static void test_vision(void) {
    size_t n;
    char *probe = t_read_file(VDIR "gemma3-mmproj.gguf", &n);
    if (!probe) {
        printf("skipped: no vision fixture (" VDIR "gemma3-mmproj.gguf)\n");
        return;
    }
    free(probe);
    char dir[] = "/tmp/kiln-media-pack-XXXXXX";
    if (!mkdtemp(dir)) return;
    char model[128], proj[128], man[128];
    snprintf(model, sizeof model, "%s/model.gguf", dir);
    snprintf(proj, sizeof proj, "%s/mmproj.gguf", dir);
    snprintf(man, sizeof man, "%s/manifest.json", dir);
    CHECK(copy_file(VDIR "gemma3-text.gguf", model) == 0 && copy_file(VDIR "gemma3-mmproj.gguf", proj) == 0);
    FILE *f = fopen(man, "w");
    if (f) {
        fputs("{\"artifacts\": [{\"role\": \"model\", \"path\": \"model.gguf\"}, "
              "{\"role\": \"mmproj\", \"path\": \"mmproj.gguf\"}]}\n",
              f);
        fclose(f);
    }
    size_t plen;
    char *png = t_read_file(VDIR "image.png", &plen);
    CHECK(png != NULL);
    server_server *srv = png ? start(model, 1) : NULL;
    if (srv) {
        char *img = b64((const uint8_t *)png, plen);
        static char out[1 << 16];
        CHECK(request("/props", NULL, out, sizeof out) == 200);
        CHECKF(strstr(out, "\"vision\": true") || strstr(out, "\"vision\":true"), "/props: %.300s", out);
        CHECK(request("/api/show", "{\"model\":\"model\"}", out, sizeof out) == 200);
        CHECKF(strstr(out, "\"vision\""), "/api/show: %.400s", out);
        CHECK(request("/v1/models", NULL, out, sizeof out) == 200);
        CHECKF(strstr(out, "\"vision\""), "/v1/models: %.400s", out);

        const char *q = "Describe this image.";
        char *body[6];
        body[0] = malloc(strlen(img) + 512);
        sprintf(body[0],
                "{\"max_tokens\":8,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                "\"image_url\",\"image_url\":{\"url\":\"data:image/"
                "png;base64,%s\"}},{\"type\":\"text\",\"text\":\"%s\"}]}]}",
                img, q);
        body[1] = malloc(strlen(img) + 512);
        sprintf(
            body[1],
            "{\"max_output_tokens\":8,\"temperature\":0,\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
            "\"input_image\",\"image_url\":\"data:image/png;base64,%s\"},{\"type\":\"input_text\",\"text\":\"%s\"}]}]}",
            img, q);
        body[2] = malloc(strlen(img) + 512);
        sprintf(body[2],
                "{\"max_tokens\":8,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                "\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"%s\"}},"
                "{\"type\":\"text\",\"text\":\"%s\"}]}]}",
                img, q);
        body[3] = malloc(strlen(img) + 512);
        sprintf(body[3],
                "{\"stream\":false,\"options\":{\"num_predict\":8,\"temperature\":0},\"messages\":[{\"role\":"
                "\"user\",\"content\":\"%s\",\"images\":[\"%s\"]}]}",
                q, img);
        body[4] = malloc(strlen(img) + 512);
        sprintf(body[4],
                "{\"stream\":false,\"options\":{\"num_predict\":8,\"temperature\":0},\"prompt\":\"%s\","
                "\"images\":[\"%s\"]}",
                q, img);
        const char *paths[5] = {"/v1/chat/completions", "/v1/responses", "/v1/messages", "/api/chat", "/api/generate"};
        const char *const at[5][6] = {{"choices", "0", "message", "content", NULL},
                                      {"output", NULL}, /* its message item, below */
                                      {"content", "0", "text", NULL},
                                      {"message", "content", NULL},
                                      {"response", NULL}};
        char first[512] = "";
        for (int k = 0; k < 5; k++) {
            int st = 0;
            json_t *j = post_json(paths[k], body[k], &st);
            const char *text = field(j, at[k]);
            json_t *item;
            size_t i;
            json_array_foreach(k == 1 ? json_object_get(j, "output") : NULL, i, item) {
                const char *type = json_string_value(json_object_get(item, "type"));
                if (type && !strcmp(type, "message"))
                    text = field(item, (const char *const[]){"content", "0", "text", NULL});
            }
            CHECKF(st == 200 && *text, "%s: status %d, text '%s'", paths[k], st, text);
            if (k == 0) snprintf(first, sizeof first, "%s", text);
            CHECKF(!strcmp(text, first), "%s says '%s', chat completions '%s'", paths[k], text, first);
            if (k == 0) {
                json_int_t pt = json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens"));
                CHECKF(pt > 16, "the prompt holds the image's tokens: %lld", (long long)pt);
            }
            json_decref(j);
            free(body[k]);
        }
        /* the same image fetched from a URL */
        g_png = png;
        g_png_len = plen;
        struct sockaddr_in a = {.sin_family = AF_INET};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, serve, NULL,
                                                MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a, MHD_OPTION_END);
        CHECK(d != NULL);
        if (d) {
            body[5] = malloc(512);
            snprintf(body[5], 512,
                     "{\"max_tokens\":8,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                     "\"image_url\",\"image_url\":{\"url\":\"http://127.0.0.1:%d/cat.png\"}},{\"type\":\"text\","
                     "\"text\":\"%s\"}]}]}",
                     MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port, q);
            int st = 0;
            json_t *j = post_json("/v1/chat/completions", body[5], &st);
            const char *text = field(j, at[0]);
            CHECKF(st == 200 && !strcmp(text, first), "URL: status %d, '%s' (data: URL '%s')", st, text, first);
            json_decref(j);
            free(body[5]);
            MHD_stop_daemon(d);
        }
        /* a marker typed into the text with no image to match */
        expect("a marker without its image", "/v1/chat/completions",
               "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
               "\"<__media__><__media__>\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,"
               "iVBORw0KGgo=\"}}]}]}",
               400, "error");
        free(img);
        server_server_drain(srv, 5);
        server_server_free(srv);
    }
    free(png);
    unlink(model);
    unlink(proj);
    unlink(man);
    rmdir(dir);
}

/* A plain model file with its projector named beside it (kiln serve -m FILE
 * --mmproj FILE) takes images; the same file alone refuses them. */
static void test_mmproj_flag(void) {
    size_t n;
    char *probe = t_read_file(VDIR "gemma3-mmproj.gguf", &n);
    if (!probe) return;
    free(probe);
    static char out[1 << 16];
    server_server *srv = start_with(VDIR "gemma3-text.gguf", VDIR "gemma3-mmproj.gguf", 0);
    if (srv) {
        CHECK(request("/props", NULL, out, sizeof out) == 200);
        CHECKF(strstr(out, "\"vision\": true") || strstr(out, "\"vision\":true"), "/props with --mmproj: %.300s", out);
        server_server_free(srv);
    }
    srv = start_with(VDIR "gemma3-text.gguf", NULL, 0);
    if (srv) {
        CHECK(request("/props", NULL, out, sizeof out) == 200);
        CHECKF(strstr(out, "\"vision\": false") || strstr(out, "\"vision\":false"), "/props without: %.300s", out);
        server_server_free(srv);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    test_b64();
    test_fetch();
    char dir[] = "/tmp/kiln-media-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char model[128];
    snprintf(model, sizeof model, "%s/chat.gguf", dir);
    CHECK(t_write_chat_model(MODEL, model) == 0);
    test_server(model);
    test_vision();
    test_mmproj_flag();
    unlink(model);
    rmdir(dir);
    return t_done();
}
