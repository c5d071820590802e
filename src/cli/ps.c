/* kiln ps and kiln stop NAME, against a running kiln serve, as ollama ps /
 * ollama stop: GET /api/ps lists the resident models (size, processor,
 * context, until when they stay); stop asks the server to unload a model
 * (POST /api/generate with keep_alive 0).  The server is --host HOST[:PORT]
 * or a URL, else $KILN_HOST, else 127.0.0.1:8080; --api-key (or
 * $KILN_API_KEY) is sent as a bearer token. */
#define _GNU_SOURCE
#include "cli/cli.h"
#include "cli/common.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct body {
    char *p;
    size_t len;
} body;

static size_t on_data(char *d, size_t sz, size_t n, void *user) {
    body *b = user;
    size_t add = sz * n;
    if (b->len + add > (16u << 20)) return 0; /* an answer this big is not the server's */
    char *np = realloc(b->p, b->len + add + 1);
    if (!np) return 0;
    memcpy(np + b->len, d, add);
    b->p = np;
    b->len += add;
    b->p[b->len] = 0;
    return add;
}

typedef struct target {
    char base[512];
    const char *key;
} target;

/* Parses the shared options; returns the index of the first other
 * argument, or -1 after a usage error. */
static int parse_target(const char *cmd, int argc, char **argv, target *t, int *json, char **name) {
    const char *host = getenv("KILN_HOST");
    t->key = getenv("KILN_API_KEY");
    *name = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--host") && has)
            host = argv[++i];
        else if (!strcmp(a, "--api-key") && has)
            t->key = argv[++i];
        else if (json && !strcmp(a, "--json"))
            *json = 1;
        else if (a[0] != '-' && !*name && !json)
            *name = argv[i];
        else {
            fprintf(stderr, "kiln %s: unexpected argument '%s'\n", cmd, a);
            cli_usage(cmd, stderr);
            return -1;
        }
    }
    if (!host || !*host) host = "127.0.0.1:8080";
    int scheme = !strncmp(host, "http://", 7) || !strncmp(host, "https://", 8);
    char auth[256];
    const char *hp = scheme ? strstr(host, "//") + 2 : host;
    size_t al = strcspn(hp, "/");
    if (al >= sizeof auth) al = sizeof auth - 1;
    memcpy(auth, hp, al);
    auth[al] = 0;
    /* an authority without a port gets the server's default port */
    const char *colon = strrchr(auth, ':'), *bracket = strrchr(auth, ']');
    int port = colon && (!bracket || colon > bracket);
    snprintf(t->base, sizeof t->base, "%.*s%s%s", scheme ? (int)(hp - host) : 0, host, scheme ? "" : "http://", auth);
    size_t bl = strlen(t->base);
    /* then the path, for a server behind a prefix, without trailing slashes */
    snprintf(t->base + bl, sizeof t->base - bl, "%s%s", port ? "" : ":8080", hp + strcspn(hp, "/"));
    bl = strlen(t->base);
    while (bl && t->base[bl - 1] == '/') t->base[--bl] = 0;
    return 0;
}

/* One request: 0 with *status and the body, -1 when the server could not
 * be reached (the message printed). */
static int request(const char *cmd, const target *t, const char *path, const char *post, long *status, body *b) {
    CURL *c = curl_easy_init();
    if (!c) {
        fprintf(stderr, "kiln %s: out of memory\n", cmd);
        return -1;
    }
    char url[1024], auth[600];
    snprintf(url, sizeof url, "%s%s", t->base, path);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (t->key && *t->key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", t->key);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "127.0.0.1,localhost,::1");
    if (post) curl_easy_setopt(c, CURLOPT_POSTFIELDS, post);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK) {
        fprintf(stderr, "kiln %s: no kiln server at %s: %s (is kiln serve running? --host or KILN_HOST names it)\n",
                cmd, t->base, curl_easy_strerror(rc));
        return -1;
    }
    return 0;
}

/* The server's error message, from either API's shape. */
static void print_error(const char *cmd, long status, const body *b) {
    json_t *j = b->p ? json_loads(b->p, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    const char *msg = json_is_string(e) ? json_string_value(e) : json_string_value(json_object_get(e, "message"));
    fprintf(stderr, "kiln %s: the server answered %ld: %s\n", cmd, status, msg ? msg : "(no message)");
    json_decref(j);
}

static void human_bytes(double v, char *buf, size_t cap) {
    const char *units[] = {"B", "KB", "MB", "GB", "TB"};
    int u = 0;
    while (v >= 1000 && u < 4) {
        v /= 1000;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%.0f B", v);
    else
        snprintf(buf, cap, v < 10 ? "%.1f %s" : "%.0f %s", v, units[u]);
}

/* "4 minutes from now", "Forever", "Stopping..." from an ISO time. */
static void until(const char *iso, char *buf, size_t cap) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (!iso || !strptime(iso, "%Y-%m-%dT%H:%M:%S", &tm)) {
        snprintf(buf, cap, "?");
        return;
    }
    if (tm.tm_year + 1900 >= 2100) {
        snprintf(buf, cap, "Forever");
        return;
    }
    double left = difftime(timegm(&tm), time(NULL));
    if (left <= 0)
        snprintf(buf, cap, "Stopping...");
    else if (left < 60)
        snprintf(buf, cap, "%d second%s from now", (int)left, (int)left == 1 ? "" : "s");
    else if (left < 3600)
        snprintf(buf, cap, "%d minute%s from now", (int)(left / 60), (int)(left / 60) == 1 ? "" : "s");
    else if (left < 172800)
        snprintf(buf, cap, "%d hour%s from now", (int)(left / 3600), (int)(left / 3600) == 1 ? "" : "s");
    else
        snprintf(buf, cap, "%d days from now", (int)(left / 86400));
}

/* GET /api/ps as parsed JSON, or NULL after printing why. */
static json_t *get_ps(const char *cmd, const target *t) {
    body b = {0};
    long status = 0;
    if (request(cmd, t, "/api/ps", NULL, &status, &b)) {
        free(b.p);
        return NULL;
    }
    if (status != 200) {
        print_error(cmd, status, &b);
        free(b.p);
        return NULL;
    }
    json_t *j = json_loads(b.p ? b.p : "", 0, NULL);
    free(b.p);
    if (!json_is_array(json_object_get(j, "models"))) {
        fprintf(stderr, "kiln %s: %s did not answer /api/ps with a list of models\n", cmd, t->base);
        json_decref(j);
        return NULL;
    }
    return j;
}

int cli_ps(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (cli_help("ps", argv[i])) return 0;
    target t;
    int json = 0;
    char *name;
    if (parse_target("ps", argc, argv, &t, &json, &name) < 0) return 2;
    json_t *j = get_ps("ps", &t);
    if (!j) return 1;
    json_t *models = json_object_get(j, "models");
    if (json) {
        char *s = json_dumps(models, JSON_INDENT(2));
        if (s) puts(s);
        free(s);
        json_decref(j);
        return 0;
    }
    printf("%-32s %-14s %-10s %-10s %-8s %s\n", "NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL");
    size_t i;
    json_t *m;
    json_array_foreach(models, i, m) {
        char size[32], when[64], proc[32];
        double total = (double)json_integer_value(json_object_get(m, "size"));
        double vram = (double)json_integer_value(json_object_get(m, "size_vram"));
        human_bytes(total, size, sizeof size);
        until(json_string_value(json_object_get(m, "expires_at")), when, sizeof when);
        const char *be = json_string_value(json_object_get(m, "backend")); /* kiln's own field */
        if (be && !strcmp(be, "cuda") && vram >= total)                    /* weights and KV cache: all on the GPU */
            snprintf(proc, sizeof proc, "100%% GPU");
        else if (vram <= 0)
            snprintf(proc, sizeof proc, "100%% CPU");
        else if (vram >= total)
            snprintf(proc, sizeof proc, "100%% GPU");
        else
            snprintf(proc, sizeof proc, "%.0f%%/%.0f%% CPU/GPU", 100 * (total - vram) / total, 100 * vram / total);
        const char *digest = json_string_value(json_object_get(m, "digest")); /* "" for a -m file */
        printf("%-32s %-14.12s %-10s %-10s %-8lld %s\n", json_string_value(json_object_get(m, "name")),
               digest && *digest ? digest : "-", size, proc,
               (long long)json_integer_value(json_object_get(m, "context_length")), when);
    }
    json_decref(j);
    return 0;
}

int cli_stop(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (cli_help("stop", argv[i])) return 0;
    target t;
    char *name;
    if (parse_target("stop", argc, argv, &t, NULL, &name) < 0) return 2;
    if (!name) {
        fprintf(stderr, "kiln stop: name the model to stop (kiln ps lists them)\n");
        cli_usage("stop", stderr);
        return 2;
    }
    json_t *ps = get_ps("stop", &t);
    if (!ps) return 1;
    int loaded = 0;
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(ps, "models"), i, m) {
        const char *n = json_string_value(json_object_get(m, "name"));
        loaded |= n && !strcmp(n, name);
    }
    json_decref(ps);
    if (!loaded) {
        fprintf(stderr, "kiln stop: model '%s' is not loaded on %s (kiln ps lists what is)\n", name, t.base);
        return 1;
    }
    json_t *req = json_pack("{s:s,s:i}", "model", name, "keep_alive", 0);
    char *post = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    body b = {0};
    long status = 0;
    int rc = post ? request("stop", &t, "/api/generate", post, &status, &b) : -1;
    free(post);
    if (!rc && status != 200) {
        print_error("stop", status, &b);
        rc = -1;
    }
    free(b.p);
    return rc ? 1 : 0;
}
