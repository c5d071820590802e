/*
 * Allocation failure, injected at every site an operation reaches (as
 * sqlite's and curl's test suites do): for n = 1, 2, ... the n-th
 * allocation made by kiln's own code after base_fault_arm(n) fails, until an
 * operation completes without reaching n.  This binary is linked with
 * ld --wrap=malloc,calloc,realloc, so every malloc, calloc and realloc in
 * kiln's objects counts (not only the kb_* ones); the libraries below
 * (libc's own callers, jansson, libmicrohttpd, libcurl) are not counted.
 *
 * Each failure must be a clean error: the call returns a status with a
 * message (or the server an HTTP error, or it drops that connection),
 * nothing crashes, and what stays behind is not corrupted: the next
 * operation without a failure gives exactly the answer it gave before.
 * Under AddressSanitizer a leak on any failure path fails the run at exit.
 *
 * The paths: loading a model (a dense one and a mixture of experts), a
 * context and greedy tokens; installing a GGUF into a model store; and
 * requests to a running server (a completion and a chat, whole and
 * streamed).
 */
#include "kiln.h"
#include "testutil.h"

#include "base/base.h"
#include "server/server.h"

#include <curl/curl.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODEL "../models/stories260K.gguf"
/* a walk ends at the first n its operation does not reach; this bounds a
 * walk that does not end (an operation whose allocations grow with n) */
#define MAX_SITES 20000

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n) { return base_fault_site() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t k, size_t n) { return base_fault_site() ? NULL : __real_calloc(k, n); }
void *__wrap_realloc(void *p, size_t n) { return base_fault_site() ? NULL : __real_realloc(p, n); }

/* ---- a model, a context and greedy tokens ---- */

/* Loads the model at path and a context, decodes the prompt and 6 greedy
 * tokens into out.  Returns KILN_OK or the first failure. */
static kiln_status greedy(const char *path, int32_t *out) {
    kiln_model *m = NULL;
    kiln_context *c = NULL;
    kiln_status st = kiln_model_load(path, NULL, &m);
    if (st != KILN_OK) return st;
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    st = kiln_context_new(m, &cp, &c);
    int32_t ids[64];
    int n = 0;
    if (st == KILN_OK) {
        n = kiln_tokenize(m, "Once upon a time", 16, 1, 0, ids, 64);
        if (n < 1) st = n < 0 ? (kiln_status)n : KILN_ERR_INTERNAL;
    }
    kiln_batch b = {n, ids, NULL, NULL, NULL};
    for (int k = 0; st == KILN_OK && k < 6; k++) {
        st = kiln_decode(c, &b);
        if (st != KILN_OK) break;
        const float *lg = kiln_get_logits(c, b.n - 1);
        kiln_model_info info;
        kiln_model_get_info(m, &info);
        const int32_t nv = info.n_vocab;
        int32_t best = 0;
        for (int32_t v = 1; v < nv; v++)
            if (lg[v] > lg[best]) best = v;
        out[k] = best;
        ids[0] = best;
        b.n = 1;
    }
    kiln_context_free(c);
    kiln_model_free(m);
    return st;
}

static void test_model_load(const char *path) {
    int32_t want[6], got[6];
    CHECK(greedy(path, want) == KILN_OK);
    long n = 1, failed = 0;
    for (; n <= MAX_SITES; n++) {
        base_fault_arm(n);
        kiln_status st = greedy(path, got);
        const int fired = base_fault_fired();
        base_fault_arm(0);
        if (!fired) {
            CHECK(st == KILN_OK);
            break;
        }
        if (st != KILN_OK) {
            failed++;
            CHECKF(*kiln_last_error(), "allocation %ld: status %d without a message", n, st);
        } else {
            /* a failure the code absorbed (a cache it does without) must
             * not change the answer */
            CHECKF(!memcmp(got, want, sizeof want), "allocation %ld failed and the tokens changed", n);
        }
    }
    CHECKF(n <= MAX_SITES, "the model walk did not end");
    CHECK(greedy(path, got) == KILN_OK && !memcmp(got, want, sizeof want));
    printf("model load (%s): %ld allocation sites, %ld of them failed the load\n", path, n - 1, failed);
}

/* ---- the model store ---- */

static char g_dir[] = "/tmp/kiln-fault-XXXXXX";

static void rm_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[4096];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            rm_tree(sub);
        }
        if (d) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* Imports the model as name into the store at root (opening it first). */
static kiln_status install(const char *root, const char *name) {
    kiln_store *s = NULL;
    kiln_status st = kiln_store_open(root, &s);
    if (st == KILN_OK) st = kiln_store_import(s, MODEL, name, KILN_STORE_COPY, NULL, NULL, NULL);
    kiln_store_close(s);
    return st;
}

/* The store at root, without failures: name resolves to a whole file and
 * verifies, or (present 0) is not there; and a new name installs. */
static void store_sound(const char *root, const char *name, int present, long n) {
    kiln_store *s = NULL;
    CHECKF(kiln_store_open(root, &s) == KILN_OK, "allocation %ld: the store does not open: %s", n, kiln_last_error());
    if (!s) return;
    kiln_store_lease *l = NULL;
    kiln_status st = kiln_store_resolve(s, name, &l);
    if (present) {
        CHECKF(st == KILN_OK, "allocation %ld: the installed name does not resolve: %s", n, kiln_last_error());
        CHECKF(kiln_store_verify(s, name, NULL, NULL) == KILN_OK, "allocation %ld: verify: %s", n, kiln_last_error());
    } else {
        CHECKF(st == KILN_ERR_NOT_FOUND, "allocation %ld: a failed install left name behind (status %d)", n, st);
    }
    kiln_store_release(l);
    char *list = NULL;
    CHECKF(kiln_store_list(s, &list) == KILN_OK, "allocation %ld: list: %s", n, kiln_last_error());
    kiln_store_free_string(list);
    kiln_store_close(s);
}

static void test_store_install(void) {
    long n = 1, failed = 0;
    char root[256];
    for (; n <= MAX_SITES; n++) {
        snprintf(root, sizeof root, "%s/store", g_dir);
        rm_tree(root);
        base_fault_arm(n);
        kiln_status st = install(root, "stories");
        const int fired = base_fault_fired();
        base_fault_arm(0);
        if (st != KILN_OK) {
            failed++;
            CHECKF(*kiln_last_error(), "allocation %ld: status %d without a message", n, st);
        }
        store_sound(root, "stories", st == KILN_OK, n);
        /* the store a failure left behind takes the next install */
        CHECKF(install(root, "again") == KILN_OK, "allocation %ld: a later install fails: %s", n, kiln_last_error());
        store_sound(root, "again", 1, n);
        if (!fired) break;
    }
    CHECKF(n <= MAX_SITES, "the store walk did not end");
    rm_tree(root);
    printf("store install: %ld allocation sites, %ld of them failed the install\n", n - 1, failed);
}

/* ---- a running server ---- */

typedef struct body {
    char *p;
    size_t len;
} body;

static size_t take(char *p, size_t s, size_t k, void *u) {
    body *b = u;
    char *q = __real_realloc(b->p, b->len + s * k + 1); /* the client's own memory never fails */
    if (!q) return 0;
    memcpy(q + b->len, p, s * k);
    b->p = q;
    b->len += s * k;
    b->p[b->len] = 0;
    return s * k;
}

/* POSTs json to url; the status (0 when the connection broke) and the
 * body (freed by the caller). */
static long post(const char *url, const char *json, char **out) {
    body b = {NULL, 0};
    CURL *h = curl_easy_init();
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, json);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, take);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    long code = 0;
    if (curl_easy_perform(h) == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    *out = b.p;
    return code;
}

/* The generated text of a response, whole or streamed: every "text",
 * "content" and "response" string of it, end to end (escapes as sent). */
static char *texts_of(const char *s) {
    if (!s) return NULL;
    size_t cap = strlen(s) + 1, o = 0;
    char *out = __real_malloc(cap);
    static const char *const keys[] = {"\"text\":\"", "\"content\":\"", "\"response\":\""};
    for (const char *p = s; *p; p++) {
        for (size_t k = 0; k < 3; k++) {
            const size_t kl = strlen(keys[k]);
            if (strncmp(p, keys[k], kl)) continue;
            p += kl;
            while (*p && *p != '"') {
                if (*p == '\\' && p[1]) out[o++] = *p++;
                out[o++] = *p++;
            }
            break;
        }
        if (!*p) break;
    }
    out[o] = 0;
    return out;
}

/* A 200's body is a whole answer: a JSON object, or a stream that ends. */
static int answer_whole(const char *s) {
    const size_t n = strlen(s);
    if (strstr(s, "data: ")) return strstr(s, "data: [DONE]") != NULL;
    return n > 1 && s[0] == '{' && s[n - 1 - (s[n - 1] == '\n')] == '}';
}

typedef struct request {
    const char *path, *json;
} request;

static const request k_requests[] = {
    {"/v1/completions", "{\"prompt\": \"Once upon a time\", \"max_tokens\": 6, \"temperature\": 0}"},
    {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 6, "
                             "\"temperature\": 0, \"stream\": true}"},
    {"/api/generate", "{\"prompt\": \"Once upon a time\", \"options\": {\"num_predict\": 6, \"temperature\": 0}, "
                      "\"stream\": false}"},
};

static void test_server(void) {
    const char *models[] = {MODEL};
    server_config cfg = server_config_default();
    cfg.port = 0;
    cfg.models = models;
    cfg.n_models = 1;
    cfg.parallel = 2;
    cfg.n_ctx = 128;
    cfg.n_threads = 1;
    cfg.keep_alive = -1;
    char store[256];
    snprintf(store, sizeof store, "%s/server-store", g_dir);
    cfg.store_root = store;
    server_server *srv = NULL;
    CHECK(server_server_start(&cfg, &srv) == KILN_OK);
    if (!srv) return;
    char msg[256];
    CHECK(server_server_wait_loaded(srv, msg, sizeof msg) == KILN_OK);
    for (size_t r = 0; r < sizeof k_requests / sizeof *k_requests; r++) {
        char url[256];
        snprintf(url, sizeof url, "http://127.0.0.1:%d%s", server_server_port(srv), k_requests[r].path);
        char *want = NULL, *got = NULL;
        CHECK(post(url, k_requests[r].json, &want) == 200 && want);
        long n = 1, errors = 0;
        for (; n <= MAX_SITES; n++) {
            base_fault_arm(n);
            const long code = post(url, k_requests[r].json, &got);
            const int fired = base_fault_fired();
            base_fault_arm(0);
            /* a 200 is the whole answer; anything else an error (or a
             * connection the server dropped), never a cut text */
            if (code != 200) {
                /* a failed allocation is the server's trouble, never the
                 * client's: a 5xx, or the connection dropped (0) */
                CHECKF(code == 0 || code >= 500, "%s, allocation %ld: out of memory answered %ld: %.200s",
                       k_requests[r].path, n, code, got ? got : "");
                errors++;
            } else
                CHECKF(got && answer_whole(got), "%s, allocation %ld: a 200 without a whole answer: %.200s",
                       k_requests[r].path, n, got ? got : "");
            free(got);
            got = NULL;
            /* the server stays sound: the same request answers the same
             * tokens (ids and times aside, the text is the same) */
            char *again = NULL;
            CHECKF(post(url, k_requests[r].json, &again) == 200, "%s, allocation %ld: the next request fails",
                   k_requests[r].path, n);
            char *tw = texts_of(want), *ta = texts_of(again);
            CHECKF(tw && ta && !strcmp(tw, ta), "%s, allocation %ld: the answer changed: '%s' then '%s'",
                   k_requests[r].path, n, tw ? tw : "", ta ? ta : "");
            free(tw);
            free(ta);
            free(again);
            if (!fired) break;
        }
        CHECKF(n <= MAX_SITES, "the %s walk did not end", k_requests[r].path);
        printf("server %s: %ld allocation sites, %ld answered with an error\n", k_requests[r].path, n - 1, errors);
        free(want);
    }
    server_server_drain(srv, 5);
    server_server_free(srv);
}

/* KILN_ASSERT on a false invariant: the line names the file, the line and
 * the condition, and the process aborts (a bug, not a user error). */
static void test_assert(void) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        const int two = 2;
        KILN_ASSERT(two == 3);
        _exit(0);
    }
    close(fds[1]);
    char line[512] = {0};
    size_t n = 0;
    ssize_t k;
    while (n < sizeof line - 1 && (k = read(fds[0], line + n, sizeof line - 1 - n)) > 0) n += (size_t)k;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "KILN_ASSERT did not abort (status %d)", status);
    CHECKF(strstr(line, "test_fault.c:") && strstr(line, "'two == 3'") && strstr(line, "internal error"),
           "KILN_ASSERT said: %s", line);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_assert();
    test_model_load(MODEL);
    test_model_load("data/arch/qwen3moe-f32.gguf");  /* a mixture of experts */
    test_model_load("data/arch/deepseek2-f16.gguf"); /* MLA, a shared expert */
    test_model_load("data/arch/gemma4-f32.gguf");    /* per-layer KV shapes, shared caches */
    test_model_load("data/arch/gpt-oss-f32.gguf");   /* sinks, windows, biased experts */
    test_store_install();
    test_server();
    curl_global_cleanup();
    rm_tree(g_dir);
    return t_done();
}
