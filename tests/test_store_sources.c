/* Pulls by name: Hugging Face references and the Ollama registry, against
 * source_server.py (a hub, its CDN and a registry on three 127.0.0.1
 * ports).  Checks what is chosen and pinned, what each source failure
 * turns into, that a token never reaches the CDN, that signed URLs and
 * response bodies never reach a message or the store, and that a wrong
 * digest is quarantined. */
#include "testutil.h"

#include "kiln.h"
#include "gguf/gguf.h"

#include <curl/curl.h>
#include <jansson.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *k_model = "../models/stories260K.gguf";
#define COMMIT_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1"
#define COMMIT_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb2"
#define TOKEN "hf_SECRETtokenvalue0123456789abcdefghij"

static char g_tmp[256], g_root[512], g_log[512];
static int g_hub, g_cdn, g_reg;
static pid_t g_server = -1;
static const char *g_kiln;

static char g_chat[600];

static int start_server(void) {
    snprintf(g_chat, sizeof g_chat, "%s/chat.gguf", g_tmp);
    if (t_write_chat_model(k_model, g_chat) != 0) return -1;
    int fds[2];
    if (pipe(fds) != 0) return -1;
    snprintf(g_log, sizeof g_log, "%s/server.log", g_tmp);
    g_server = fork();
    if (g_server == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the test */
        dup2(fds[1], 1);
        close(fds[0]);
        execl("/usr/bin/python3", "python3", "source_server.py", "--file", k_model, "--chat-file", g_chat,
              "--whisper-file", "../models/whisper-espeak.bin", "--log", g_log, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char line[128] = {0};
    size_t n = 0;
    while (n < sizeof line - 1 && read(fds[0], line + n, 1) == 1 && line[n] != '\n') n++;
    close(fds[0]);
    return sscanf(line, "PORTS %d %d %d", &g_hub, &g_cdn, &g_reg) == 3 ? 0 : -1;
}

static size_t sink(char *p, size_t s, size_t n, void *u) {
    (void)p, (void)u;
    return s * n;
}

static void ctl(const char *query) {
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/_ctl?%s", g_hub, query);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    CURLcode rc = curl_easy_perform(h);
    CHECKF(rc == CURLE_OK, "control request %s: %s", query, curl_easy_strerror(rc));
    curl_easy_cleanup(h);
}

/* Log lines of role whose path contains path_part (NULL: any) and that
 * contain extra (NULL: any). */
static int log_count(const char *role, const char *path_part, const char *extra) {
    char *txt = t_read_file(g_log, NULL);
    int n = 0;
    char r[64];
    snprintf(r, sizeof r, "\"role\": \"%s\"", role);
    for (char *line = txt; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char *path = strstr(line, "\"path\": \"");
        if (strstr(line, r) && (!path_part || (path && strstr(path, path_part))) && (!extra || strstr(line, extra)))
            n++;
        line = nl ? nl + 1 : line + strlen(line);
    }
    free(txt);
    return n;
}

/* ---- helpers ---- */

static kiln_store *open_store(void) {
    kiln_store *s = NULL;
    kiln_status st = kiln_store_open(g_root, &s);
    CHECKF(st == KILN_OK, "open: %s", kiln_last_error());
    return s;
}

static json_t *info(kiln_store *s, const char *name) {
    char *txt = NULL;
    if (kiln_store_info(s, name, &txt) != KILN_OK) return NULL;
    json_t *j = json_loads(txt, 0, NULL);
    kiln_store_free_string(txt);
    return j;
}

static const char *jstr(json_t *o, const char *k) {
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : "";
}

static json_t *artifact(json_t *inf, int i) {
    return json_array_get(json_object_get(json_object_get(inf, "manifest"), "artifacts"), (size_t)i);
}

static int n_artifacts(json_t *inf) {
    return (int)json_array_size(json_object_get(json_object_get(inf, "manifest"), "artifacts"));
}

static int count_dir(const char *sub) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", g_root, sub);
    DIR *d = opendir(p);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

/* The message must not carry what a source error may never show. */
static void clean_message(const char *what) {
    const char *e = kiln_last_error();
    CHECKF(!strstr(e, "BODY-SECRET") && !strstr(e, "secret") && !strstr(e, "SECRET") && !strchr(e, '?'),
           "%s: message shows a body, query or token: %s", what, e);
}

typedef struct counts {
    int retries, warnings;
} counts;

static void on_progress(const kiln_store_progress *p, void *user) {
    counts *c = user;
    if (!strcmp(p->event, "retry")) c->retries++;
    if (!strcmp(p->event, "warning")) c->warnings++;
}

static kiln_status pull(kiln_store *s, const char *ref, const char *token, counts *c) {
    kiln_store_pull_params pp = {.token = token, .progress = on_progress, .user = c};
    counts dummy = {0};
    if (!c) pp.user = &dummy;
    return kiln_store_pull(s, ref, NULL, NULL, &pp, NULL);
}

/* The bytes of a pack file are the model's followed by zeros only. */
static int is_padded_model(const char *path) {
    size_t a, b;
    char *m = t_read_file(k_model, &a), *f = t_read_file(path, &b);
    int ok = m && f && b > a && !memcmp(m, f, a);
    for (size_t i = a; ok && i < b; i++) ok = f[i] == 0;
    free(m);
    free(f);
    return ok;
}

static int loads(kiln_store *s, const char *name) {
    kiln_store_lease *l = NULL;
    if (kiln_store_resolve(s, name, &l) != KILN_OK) return 0;
    kiln_model *m = NULL;
    int ok = kiln_model_load(kiln_store_lease_path(l), NULL, &m) == KILN_OK;
    kiln_model_free(m);
    kiln_store_release(l);
    return ok;
}

/* ---- Hugging Face ---- */

static void test_hub_default(void) {
    kiln_store *s = open_store();
    CHECKF(pull(s, "hf.co/acme/tiny-GGUF", NULL, NULL) == KILN_OK, "%s", kiln_last_error());
    CHECK(kiln_store_last_source_result() == KILN_SOURCE_OK);
    json_t *inf = info(s, "hf.co/acme/tiny-GGUF");
    CHECK(inf && !strcmp(jstr(inf, "name"), "hf.co/acme/tiny-GGUF:latest"));
    json_t *man = json_object_get(inf, "manifest");
    CHECKF(!strcmp(jstr(man, "origin"), "hf:acme/tiny-GGUF@" COMMIT_A ":tiny-Q4_K_M.gguf"), "origin %s",
           jstr(man, "origin"));
    json_t *src = json_object_get(man, "source");
    CHECK(!strcmp(jstr(src, "commit"), COMMIT_A) && !strcmp(jstr(src, "revision"), "main") &&
          !strcmp(jstr(src, "repo"), "acme/tiny-GGUF"));
    /* Q4_K_M by default, with the projector beside it */
    CHECK(n_artifacts(inf) == 2);
    CHECK(!strcmp(jstr(artifact(inf, 0), "path"), "tiny-Q4_K_M.gguf") &&
          !strcmp(jstr(artifact(inf, 0), "role"), "model"));
    CHECK(!strcmp(jstr(artifact(inf, 1), "path"), "mmproj-tiny-F16.gguf") &&
          !strcmp(jstr(artifact(inf, 1), "role"), "mmproj"));
    for (int i = 0; i < n_artifacts(inf); i++) {
        const char *u = jstr(artifact(inf, i), "source");
        CHECKF(strstr(u, "/resolve/" COMMIT_A "/") && !strchr(u, '?'), "source %s", u);
    }
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/packs/%s/tiny-Q4_K_M.gguf", g_root, jstr(inf, "id"));
    CHECK(is_padded_model(p));
    CHECK(loads(s, "hf.co/acme/tiny-GGUF:latest"));
    json_decref(inf);
    /* the revision, three pages of the tree, a HEAD per file, no token */
    CHECK(log_count("hub", "/revision/main", NULL) == 1);
    CHECKF(log_count("hub", "/tree/" COMMIT_A, NULL) == 3, "%d tree pages", log_count("hub", "/tree/", NULL));
    CHECK(log_count("hub", "/resolve/" COMMIT_A "/tiny-Q4_K_M.gguf", "\"HEAD\"") == 1);
    CHECK(log_count("hub", NULL, "\"auth\": true") == 0);
    CHECK(log_count("cdn", NULL, "\"status\": 200") == 2);
    kiln_store_close(s);
}

static void test_hub_token_quant(void) {
    kiln_store *s = open_store();
    int cdn0 = log_count("cdn", NULL, NULL);
    CHECKF(pull(s, "hf.co/acme/tiny-GGUF:Q8_0", TOKEN, NULL) == KILN_OK, "%s", kiln_last_error());
    json_t *inf = info(s, "hf.co/acme/tiny-GGUF:Q8_0");
    CHECK(inf && !strcmp(jstr(artifact(inf, 0), "path"), "tiny-Q8_0.gguf"));
    json_decref(inf);
    /* the token went to the hub, never to the CDN the hub redirects to */
    CHECK(log_count("hub", "/tiny-Q8_0.gguf", "\"auth\": true") == 2); /* HEAD and GET */
    CHECK(log_count("cdn", NULL, NULL) > cdn0);
    CHECK(log_count("cdn", NULL, "\"auth\": true") == 0);
    /* HF_TOKEN is read the same way */
    setenv("HF_TOKEN", TOKEN, 1);
    CHECK(pull(s, "hf.co/acme/private-GGUF", NULL, NULL) == KILN_ERR_NOT_FOUND); /* a token without access */
    unsetenv("HF_TOKEN");
    kiln_store_close(s);
}

static void test_hub_split_file(void) {
    kiln_store *s = open_store();
    const char *ref = "hf.co/acme/tiny-GGUF/sub/tiny-Q2_K-00002-of-00002.gguf@v1";
    CHECKF(pull(s, ref, NULL, NULL) == KILN_OK, "%s", kiln_last_error());
    json_t *inf = info(s, ref);
    CHECK(inf && n_artifacts(inf) == 3);
    CHECK(!strcmp(jstr(artifact(inf, 0), "path"), "tiny-Q2_K-00001-of-00002.gguf") &&
          !strcmp(jstr(artifact(inf, 0), "role"), "model"));
    CHECK(!strcmp(jstr(artifact(inf, 1), "path"), "tiny-Q2_K-00002-of-00002.gguf") &&
          !strcmp(jstr(artifact(inf, 1), "role"), "shard"));
    CHECK(!strcmp(jstr(artifact(inf, 2), "role"), "mmproj"));
    CHECK(!strcmp(jstr(json_object_get(json_object_get(inf, "manifest"), "source"), "revision"), "v1"));
    json_decref(inf);
    CHECK(loads(s, ref)); /* both shards open as one model */
    kiln_store_close(s);
}

/* The hub's own page URLs name the references they show: a repository's
 * tree at a tag, a file's page (inspected before any download). */
static void test_hub_page_urls(void) {
    kiln_store *s = open_store();
    char url[300];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/acme/tiny-GGUF/tree/v1", g_hub);
    CHECKF(pull(s, url, NULL, NULL) == KILN_OK, "%s", kiln_last_error());
    json_t *inf = info(s, "hf.co/acme/tiny-GGUF@v1");
    CHECK(inf && !strcmp(jstr(json_object_get(json_object_get(inf, "manifest"), "source"), "commit"), COMMIT_A));
    CHECK(inf && !strcmp(jstr(artifact(inf, 0), "path"), "tiny-Q4_K_M.gguf"));
    json_decref(inf);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/acme/tiny-GGUF/blob/main/tiny-Q8_0.gguf", g_hub);
    char *txt = NULL;
    kiln_status st = kiln_store_inspect(url, NULL, &txt);
    json_t *j = txt ? json_loads(txt, 0, NULL) : NULL;
    kiln_store_free_string(txt);
    CHECKF(st == KILN_OK && j && json_is_true(json_object_get(j, "metadata_verified")), "%s", kiln_last_error());
    CHECK(j && !strcmp(jstr(j, "reference"), "hf.co/acme/tiny-GGUF/tiny-Q8_0.gguf@main"));
    json_decref(j);
    kiln_store_close(s);
}

static void test_hub_errors(void) {
    kiln_store *s = open_store();
    struct {
        const char *ref, *token;
        kiln_status st;
        kiln_store_source_result r;
        const char *says;
    } cases[] = {
        {"hf.co/acme/private-GGUF", NULL, KILN_ERR_NOT_FOUND, KILN_SOURCE_NOT_FOUND, "private"},
        {"hf.co/acme/nothing-GGUF", NULL, KILN_ERR_NOT_FOUND, KILN_SOURCE_NOT_FOUND, "not found"},
        {"hf.co/acme/gated-GGUF", NULL, KILN_ERR_STATE, KILN_SOURCE_AUTH_REQUIRED, "authentication required"},
        {"hf.co/acme/gated-GGUF", "hf_good", KILN_ERR_STATE, KILN_SOURCE_GATED, "gated"},
        {"hf.co/acme/denied-GGUF", "hf_good", KILN_ERR_STATE, KILN_SOURCE_DENIED, "denied"},
        {"hf.co/acme/tiny-GGUF:IQ1_S", NULL, KILN_ERR_NOT_FOUND, KILN_SOURCE_NOT_FOUND, "Q4_K_M"},
        {"hf.co/acme/tiny-GGUF:Q8_0@nope", NULL, KILN_ERR_NOT_FOUND, KILN_SOURCE_NOT_FOUND, "revision"},
        {"hf.co/acme/tiny-GGUF/none.gguf", NULL, KILN_ERR_NOT_FOUND, KILN_SOURCE_NOT_FOUND, "none.gguf"},
        {"hf.co/acme/tiny-GGUF/../x.gguf", NULL, KILN_ERR_INVALID_ARG, KILN_SOURCE_OTHER, "relative path"},
        {"hf.co/acme", NULL, KILN_ERR_INVALID_ARG, KILN_SOURCE_OTHER, "ORG/REPO"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_status st = pull(s, cases[i].ref, cases[i].token, NULL);
        CHECKF(st == cases[i].st && kiln_store_last_source_result() == cases[i].r &&
                   strstr(kiln_last_error(), cases[i].says),
               "%s: status %d, result %s: %s", cases[i].ref, st,
               kiln_store_source_result_str(kiln_store_last_source_result()), kiln_last_error());
        clean_message(cases[i].ref);
    }
    /* access granted, the same repositories pull */
    CHECKF(pull(s, "hf.co/acme/private-GGUF", "hf_good", NULL) == KILN_OK, "%s", kiln_last_error());
    CHECKF(pull(s, "hf.co/acme/gated-GGUF", "hf_accepted", NULL) == KILN_OK, "%s", kiln_last_error());
    /* transient failures are retried with backoff, then reported as such */
    counts c = {0};
    ctl("fail503=2");
    CHECKF(pull(s, "hf.co/acme/tiny-GGUF:Q8_0", NULL, &c) == KILN_OK, "%s", kiln_last_error());
    CHECK(c.retries == 2);
    ctl("fail503=50");
    CHECK(pull(s, "hf.co/acme/tiny-GGUF:Q8_0", NULL, NULL) == KILN_ERR_IO);
    CHECKF(kiln_store_last_source_result() == KILN_SOURCE_TRANSIENT && strstr(kiln_last_error(), "503"), "%s",
           kiln_last_error());
    ctl("fail503=0");
    kiln_store_close(s);
}

/* A port of this machine with nothing listening: bound once, then closed. */
static int closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    int port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &n) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* A refused connection is an answer: the pull fails at once with the reason,
 * as a failure that is not transient, without a single retry. */
static void test_refused(void) {
    kiln_store *s = open_store();
    int port = closed_port();
    CHECK(port > 0);
    char url[200];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/model.gguf", port);
    counts c = {0};
    kiln_status st = pull(s, url, NULL, &c);
    CHECKF(st == KILN_ERR_IO && kiln_store_last_source_result() != KILN_SOURCE_TRANSIENT &&
               strstr(kiln_last_error(), "connection refused"),
           "status %d, result %s: %s", st, kiln_store_source_result_str(kiln_store_last_source_result()),
           kiln_last_error());
    CHECKF(c.retries == 0, "%d retries", c.retries);
    /* the hub's metadata requests follow the same rule */
    const char *hub = getenv("HF_ENDPOINT");
    char saved[300];
    snprintf(saved, sizeof saved, "%s", hub ? hub : "");
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    setenv("HF_ENDPOINT", url, 1);
    c = (counts){0};
    st = pull(s, "hf.co/acme/tiny-GGUF", NULL, &c);
    CHECKF(st == KILN_ERR_IO && kiln_store_last_source_result() != KILN_SOURCE_TRANSIENT &&
               strstr(kiln_last_error(), "connection refused") && c.retries == 0,
           "status %d, %d retries: %s", st, c.retries, kiln_last_error());
    char *txt = NULL;
    c = (counts){0};
    kiln_store_pull_params pp = {.progress = on_progress, .user = &c};
    st = kiln_store_inspect("hf.co/acme/tiny-GGUF", &pp, &txt);
    kiln_store_free_string(txt);
    CHECKF(st != KILN_OK && kiln_store_last_source_result() != KILN_SOURCE_TRANSIENT && c.retries == 0,
           "inspect: status %d, %d retries: %s", st, c.retries, kiln_last_error());
    setenv("HF_ENDPOINT", saved, 1);
    kiln_store_close(s);
}

/* whisper.cpp's models on the hub: an hf.co reference to a .bin file pulls
 * with the hub's length and SHA-256, and a built-in name goes there by
 * default (the stand-in's file is not the published one, so its SHA-1
 * check refuses it). */
static void test_hub_whisper(void) {
    kiln_store *s = open_store();
    const char *ref = "hf.co/ggerganov/whisper.cpp/ggml-tiny.en.bin";
    CHECKF(pull(s, ref, NULL, NULL) == KILN_OK, "%s", kiln_last_error());
    json_t *inf = info(s, ref);
    char sha[65] = "";
    FILE *f = popen("sha256sum ../models/whisper-espeak.bin", "r");
    if (f) {
        if (fscanf(f, "%64s", sha) != 1) sha[0] = 0;
        pclose(f);
    }
    CHECK(inf && n_artifacts(inf) == 1 && !strcmp(jstr(artifact(inf, 0), "path"), "ggml-tiny.en.bin"));
    CHECKF(inf && sha[0] && !strcmp(jstr(artifact(inf, 0), "sha256"), sha), "sha256 %s, want %s",
           jstr(artifact(inf, 0), "sha256"), sha);
    CHECK(inf && !strcmp(jstr(json_object_get(json_object_get(inf, "manifest"), "source"), "commit"), COMMIT_A));
    json_decref(inf);
    CHECK(log_count("hub", "/ggerganov/whisper.cpp/resolve/" COMMIT_A "/ggml-tiny.en.bin", "\"HEAD\"") == 1);
    int n0 = log_count("hub", "/api/models/ggerganov/whisper.cpp/revision/main", NULL);
    counts c = {0};
    kiln_store_pull_params pp = {.progress = on_progress, .user = &c};
    kiln_status st = kiln_builtin_pull(s, "whisper:tiny.en", NULL, &pp, NULL);
    CHECKF(st == KILN_ERR_FORMAT && strstr(kiln_last_error(), "SHA-1"), "status %d: %s", st, kiln_last_error());
    CHECK(log_count("hub", "/api/models/ggerganov/whisper.cpp/revision/main", NULL) == n0 + 1);
    kiln_store_lease *l = NULL;
    CHECK(kiln_store_resolve(s, "whisper:tiny.en", &l) == KILN_ERR_NOT_FOUND);
    /* a .bin file's page on the hub names the same reference */
    char url[300];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ggerganov/whisper.cpp/blob/main/ggml-tiny.en.bin", g_hub);
    CHECKF(pull(s, url, NULL, NULL) == KILN_OK, "%s", kiln_last_error());
    inf = info(s, "hf.co/ggerganov/whisper.cpp/ggml-tiny.en.bin@main");
    CHECK(inf &&
          !strcmp(jstr(json_object_get(json_object_get(inf, "manifest"), "source"), "file"), "ggml-tiny.en.bin"));
    json_decref(inf);
    kiln_store_close(s);
}

static void test_hub_integrity(void) {
    kiln_store *s = open_store();
    int q0 = count_dir("quarantine"), cdn0 = log_count("cdn", NULL, NULL);
    /* the listing and the file's own headers disagree: nothing is fetched */
    ctl("badlink=1");
    CHECK(pull(s, "hf.co/acme/tiny-GGUF/tiny-Q4_K_M.gguf@" COMMIT_B, NULL, NULL) == KILN_ERR_FORMAT);
    CHECKF(kiln_store_last_source_result() == KILN_SOURCE_UNVERIFIED && strstr(kiln_last_error(), "unverified"), "%s",
           kiln_last_error());
    CHECK(log_count("cdn", NULL, NULL) == cdn0);
    ctl("badlink=0");
    /* a consistent but wrong SHA-256: the download is quarantined */
    ctl("badsha=1");
    CHECK(pull(s, "hf.co/acme/tiny-GGUF/tiny-Q4_K_M.gguf@" COMMIT_B, NULL, NULL) == KILN_ERR_FORMAT);
    CHECKF(strstr(kiln_last_error(), "sha256 mismatch"), "%s", kiln_last_error());
    CHECK(count_dir("quarantine") == q0 + 1);
    ctl("badsha=0");
    kiln_store_close(s);
}

static void test_hub_resume(void) {
    kiln_store *s = open_store();
    /* the CDN drops the connection: the pull resumes with a Range request,
     * through the hub's redirect again, still without the token there */
    ctl("drop=300000");
    const char *ref = "hf.co/acme/tiny-GGUF/tiny-Q4_K_M.gguf@" COMMIT_B;
    CHECKF(pull(s, ref, TOKEN, NULL) == KILN_OK, "%s", kiln_last_error());
    CHECK(log_count("cdn", NULL, "\"range\": \"bytes=300000-\"") == 1);
    CHECK(log_count("cdn", NULL, "\"auth\": true") == 0);
    CHECK(loads(s, ref));
    kiln_store_close(s);
}

static void test_hub_revision_moves(void) {
    kiln_store *s = open_store();
    json_t *before = info(s, "hf.co/acme/tiny-GGUF:Q8_0");
    char id0[65];
    snprintf(id0, sizeof id0, "%s", jstr(before, "id"));
    json_decref(before);
    /* the same commit again: the installed pack is reused, nothing moves */
    int cdn0 = log_count("cdn", NULL, NULL);
    CHECK(pull(s, "hf.co/acme/tiny-GGUF:Q8_0", NULL, NULL) == KILN_OK);
    CHECK(log_count("cdn", NULL, NULL) == cdn0);
    /* main moves to another commit: a new pack, and the name follows it */
    ctl("main=b");
    CHECKF(pull(s, "hf.co/acme/tiny-GGUF:Q8_0", NULL, NULL) == KILN_OK, "%s", kiln_last_error());
    json_t *after = info(s, "hf.co/acme/tiny-GGUF:Q8_0");
    CHECK(after && strcmp(jstr(after, "id"), id0) &&
          !strcmp(jstr(json_object_get(json_object_get(after, "manifest"), "source"), "commit"), COMMIT_B));
    json_decref(after);
    ctl("main=a");
    kiln_store_close(s);
}

/* ---- the Ollama registry ---- */

static void test_registry(void) {
    kiln_store *s = open_store();
    int cdn0 = log_count("cdn", NULL, NULL);
    CHECKF(pull(s, "tiny", NULL, NULL) == KILN_OK, "%s", kiln_last_error());
    json_t *inf = info(s, "tiny");
    CHECK(inf && !strcmp(jstr(inf, "name"), "tiny:latest"));
    json_t *d = json_object_get(inf, "defaults");
    CHECK(!strcmp(jstr(d, "system"), "You are a tiny test model."));
    CHECK(!strcmp(jstr(d, "template_format"), "go") && strstr(jstr(d, "template"), "{{ .System }}"));
    json_t *opts = json_object_get(d, "options");
    CHECK(json_real_value(json_object_get(opts, "temperature")) == 0.25 &&
          json_integer_value(json_object_get(opts, "num_ctx")) == 96);
    CHECK(json_array_size(json_object_get(d, "license")) == 1 &&
          !strcmp(json_string_value(json_array_get(json_object_get(d, "license"), 0)), "Tiny License 1.0\n"));
    CHECK(n_artifacts(inf) == 5 && !strcmp(jstr(artifact(inf, 0), "role"), "model"));
    json_t *man = json_object_get(inf, "manifest");
    CHECK(!strncmp(jstr(man, "origin"), "ollama:http://127.0.0.1:", 24) && strstr(jstr(man, "origin"), "@sha256:"));
    for (int i = 0; i < n_artifacts(inf); i++) CHECK(!strchr(jstr(artifact(inf, i), "source"), '?'));
    /* the lease carries the same defaults for the server */
    kiln_store_lease *l = NULL;
    CHECK(kiln_store_resolve(s, "tiny:latest", &l) == KILN_OK);
    json_t *ld = l ? json_loads(kiln_store_lease_defaults(l), 0, NULL) : NULL;
    CHECK(ld && json_equal(ld, d));
    json_decref(ld);
    kiln_store_release(l);
    json_decref(inf);
    CHECK(log_count("cdn", NULL, NULL) == cdn0 + 5);
    CHECK(log_count("registry", "/blobs/sha256:", "\"status\": 307") == 5);

    /* the same manifest by its full name: installed already */
    char ref[128];
    snprintf(ref, sizeof ref, "127.0.0.1:%d/library/tiny:latest", g_reg);
    CHECKF(pull(s, ref, NULL, NULL) == KILN_OK, "%s", kiln_last_error());
    CHECK(log_count("cdn", NULL, NULL) == cdn0 + 5);
    CHECK(loads(s, ref));

    /* a layer whose bytes are not its digest */
    int q0 = count_dir("quarantine");
    CHECK(pull(s, "wrong", NULL, NULL) == KILN_ERR_FORMAT && strstr(kiln_last_error(), "sha256 mismatch"));
    CHECK(count_dir("quarantine") == q0 + 1);
    kiln_store_lease *none = NULL;
    CHECK(kiln_store_resolve(s, "wrong", &none) == KILN_ERR_NOT_FOUND);

    /* access and absence */
    CHECK(pull(s, "team/private", NULL, NULL) == KILN_ERR_STATE &&
          kiln_store_last_source_result() == KILN_SOURCE_AUTH_REQUIRED);
    clean_message("team/private");
    CHECK(pull(s, "team/private", "wrongtoken", NULL) == KILN_ERR_STATE &&
          kiln_store_last_source_result() == KILN_SOURCE_DENIED);
    CHECKF(pull(s, "team/private", "regtoken", NULL) == KILN_OK, "%s", kiln_last_error());
    CHECK(log_count("registry", "/team/private/manifests/", "\"auth\": true") == 2);
    /* the token exchange (401 + WWW-Authenticate: Bearer realm=...): an
     * anonymous token given as access_token, with the scope kiln names
     * when the challenge does not; the blobs carry it, the CDN never */
    int tok0 = log_count("registry", "/token\"", NULL);
    CHECKF(pull(s, "team/tokened", NULL, NULL) == KILN_OK, "%s", kiln_last_error());
    CHECK(log_count("registry", "/token\"", "\"status\": 200") == 1 &&
          log_count("registry", "/token\"", NULL) == tok0 + 1);
    CHECK(log_count("registry", "/team/tokened/manifests/", "\"status\": 401") == 1 &&
          log_count("registry", "/team/tokened/manifests/", "\"status\": 200") == 1);
    CHECK(log_count("registry", "/team/tokened/blobs/", "\"status\": 307") == 1 &&
          log_count("registry", "/team/tokened/blobs/", "\"auth\": true") == 1);
    CHECK(loads(s, "team/tokened"));
    /* a token for the caller's credentials: refused without them, and
     * the failed exchange reports the registry's 401 */
    CHECK(pull(s, "team/keyed", NULL, NULL) == KILN_ERR_STATE &&
          kiln_store_last_source_result() == KILN_SOURCE_AUTH_REQUIRED);
    clean_message("team/keyed");
    CHECK(log_count("registry", "/token\"", "\"status\": 401") >= 1);
    CHECKF(pull(s, "team/keyed", "regtoken", NULL) == KILN_OK, "%s", kiln_last_error());
    CHECK(log_count("registry", "/team/keyed/manifests/", "\"status\": 200") == 1);
    /* a realm on another origin is asked without the caller's token */
    CHECKF(pull(s, "team/farauth", "regtoken", NULL) == KILN_OK, "%s", kiln_last_error());
    CHECK(log_count("cdn", "/token\"", "\"status\": 200") == 1 && log_count("cdn", "/token\"", "\"auth\": true") == 0);
    CHECK(pull(s, "nothing:here", NULL, NULL) == KILN_ERR_NOT_FOUND &&
          kiln_store_last_source_result() == KILN_SOURCE_NOT_FOUND);
    clean_message("nothing:here");
    CHECK(pull(s, "a/b/c/d", NULL, NULL) == KILN_ERR_INVALID_ARG);
    CHECK(log_count("cdn", NULL, "\"auth\": true") == 0);
    kiln_store_close(s);
}

/* ---- inspection before download ---- */

static json_t *inspect(const char *ref, kiln_status *st) {
    char *txt = NULL;
    *st = kiln_store_inspect(ref, NULL, &txt);
    json_t *j = txt ? json_loads(txt, 0, NULL) : NULL;
    kiln_store_free_string(txt);
    return j;
}

static void test_inspect(void) {
    kiln_status st;
    int staging0 = count_dir(".staging"), cdn0 = log_count("cdn", NULL, NULL);
    json_t *j = inspect("hf.co/acme/tiny-GGUF:Q8_0", &st);
    CHECKF(st == KILN_OK && j, "%s", kiln_last_error());
    CHECK(!strcmp(jstr(j, "arch"), "llama") && json_is_true(json_object_get(j, "runnable")));
    CHECK(json_integer_value(json_object_get(j, "context_length")) == 2048 &&
          json_integer_value(json_object_get(j, "layers")) == 5 && !strcmp(jstr(j, "quantization"), "F32"));
    CHECK(json_integer_value(json_object_get(j, "range_requests")) == 1 &&
          json_integer_value(json_object_get(j, "header_bytes_read")) == 1 << 20);
    CHECK(json_is_true(json_object_get(j, "metadata_verified")) &&
          !strcmp(jstr(json_array_get(json_object_get(j, "files"), 0), "path"), "tiny-Q8_0.gguf"));
    json_decref(j);
    /* one range read at the CDN, no token there, nothing in the store */
    CHECK(log_count("cdn", NULL, NULL) == cdn0 + 1 && log_count("cdn", NULL, "\"range\": \"bytes=0-1048575\"") >= 1);
    CHECK(count_dir(".staging") == staging0);

    j = inspect("tiny", &st);
    CHECKF(st == KILN_OK && j && json_is_true(json_object_get(j, "runnable")), "%s", kiln_last_error());
    json_decref(j);
    /* a header longer than the first range: the next range is twice as long */
    j = inspect("hf.co/acme/big-GGUF", &st);
    CHECKF(st == KILN_OK && j, "%s", kiln_last_error());
    CHECK(json_integer_value(json_object_get(j, "range_requests")) == 2 &&
          json_integer_value(json_object_get(j, "header_bytes_read")) > 1 << 20);
    CHECK(!json_is_true(json_object_get(j, "runnable")) && strstr(jstr(j, "runnable_reason"), "no tensors"));
    json_decref(j);
    /* past the budget: unverified, after reading at most 64 MiB */
    j = inspect("hf.co/acme/huge-GGUF", &st);
    CHECKF(st == KILN_ERR_FORMAT && kiln_store_last_source_result() == KILN_SOURCE_UNVERIFIED &&
               strstr(kiln_last_error(), "64 MiB"),
           "%s", kiln_last_error());
    json_decref(j);
    /* a server that ignores Range: unverified, never a whole-file read */
    ctl("norange=1");
    j = inspect("tiny", &st);
    CHECKF(st == KILN_ERR_FORMAT && kiln_store_last_source_result() == KILN_SOURCE_UNVERIFIED &&
               strstr(kiln_last_error(), "Range"),
           "%s", kiln_last_error());
    json_decref(j);
    ctl("norange=0");
    /* a plain URL: no published length or hash */
    char url[256];
    size_t len;
    char *m = t_read_file(k_model, &len);
    FILE *p = popen("sha256sum ../models/stories260K.gguf", "r");
    char sha[65] = "";
    CHECK(p && fscanf(p, "%64s", sha) == 1);
    if (p) pclose(p);
    free(m);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/blob/%s", g_cdn, sha);
    j = inspect(url, &st);
    CHECKF(st == KILN_OK && j && !json_is_true(json_object_get(j, "metadata_verified")) &&
               json_integer_value(json_object_get(j, "size")) == (json_int_t)len,
           "%s", kiln_last_error());
    json_decref(j);
    j = inspect("hf.co/acme/nothing-GGUF", &st);
    CHECK(st == KILN_ERR_NOT_FOUND && kiln_store_last_source_result() == KILN_SOURCE_NOT_FOUND);
    json_decref(j);
    CHECK(log_count("cdn", NULL, "\"auth\": true") == 0);
}

/* ---- the command line ---- */

/* Runs kiln with args on the test's store; stdin from infile (NULL:
 * /dev/null), stdout to outfile (NULL: /dev/null), stderr to errfile. */
static int run_kiln_io(const char *const *args, const char *infile, const char *outfile, const char *errfile) {
    pid_t pid = fork();
    if (pid == 0) {
        const char *argv[24];
        int n = 0;
        argv[n++] = g_kiln;
        for (int i = 0; args[i] && n < 21; i++) argv[n++] = args[i];
        argv[n++] = "--store";
        argv[n++] = g_root;
        argv[n] = NULL;
        if (!freopen(errfile, "w", stderr) || !freopen(outfile ? outfile : "/dev/null", "w", stdout) ||
            !freopen(infile ? infile : "/dev/null", "r", stdin))
            _exit(126);
        execv(g_kiln, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    for (int i = 0; i < 600 && waitpid(pid, &status, WNOHANG) == 0; i++) {
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    if (waitpid(pid, &status, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int run_kiln(const char *const *args, const char *errfile) { return run_kiln_io(args, NULL, NULL, errfile); }

/* stdout of kiln args (NULL when it failed) */
static char *kiln_out(const char *const *args, const char *infile) {
    char out[PATH_MAX], err[PATH_MAX];
    snprintf(out, sizeof out, "%s/out.txt", g_tmp);
    snprintf(err, sizeof err, "%s/out.err", g_tmp);
    if (run_kiln_io(args, infile, out, err) != 0) return NULL;
    return t_read_file(out, NULL);
}

/* An Ollama model's params and system prompt are run's and chat's
 * defaults; the command line still wins. */
static void test_pack_defaults(void) {
    char err[PATH_MAX], in[PATH_MAX];
    snprintf(err, sizeof err, "%s/defaults.err", g_tmp);
    /* num_ctx 96 */
    const char *too_long[] = {"run", "-m", "tiny", "-p", "Once", "-n", "200", NULL};
    CHECK(run_kiln(too_long, err) != 0);
    char *e = t_read_file(err, NULL);
    CHECKF(e && strstr(e, "context of 96"), "%s", e ? e : "");
    free(e);
    const char *wider[] = {"run", "-m", "tiny", "-p", "Once", "-n", "200", "-c", "512", NULL};
    CHECK(run_kiln(wider, err) == 0);
    /* temperature 0.25 and top_k 7, as if given */
    const char *packed[] = {"run", "-m", "tiny", "-p", "Once upon", "-n", "24", "--seed", "5", NULL};
    const char *flags[] = {"run",    "-m",        "../models/stories260K.gguf",
                           "-p",     "Once upon", "-n",
                           "24",     "--seed",    "5",
                           "--temp", "0.25",      "--top-k",
                           "7",      NULL};
    const char *plain[] = {"run", "-m", "../models/stories260K.gguf", "-p", "Once upon", "-n", "24", "--seed",
                           "5",   NULL};
    char *a = kiln_out(packed, NULL), *b = kiln_out(flags, NULL), *c = kiln_out(plain, NULL);
    CHECKF(a && b && c && !strcmp(a, b) && strcmp(a, c), "pack '%s', flags '%s', defaults '%s'", a ? a : "", b ? b : "",
           c ? c : "");
    free(a);
    free(b);
    free(c);
    /* chat: the pack's system prompt and temperature 0, and its Go template
     * (ChatML), which renders this conversation as the GGUF's does */
    snprintf(in, sizeof in, "%s/chat.in", g_tmp);
    FILE *f = fopen(in, "w");
    CHECK(f && fputs("Hello there\n", f) >= 0);
    if (f) fclose(f);
    const char *chat_pack[] = {"chat", "-m", "chatty", NULL};
    const char *chat_flags[] = {"chat", "-m", g_chat, "--system", "Be brief.", "--temp", "0", "-n", "8", NULL};
    const char *chat_nosys[] = {"chat", "-m", g_chat, "--temp", "0", "-n", "8", NULL};
    a = kiln_out(chat_pack, in);
    b = kiln_out(chat_flags, in);
    c = kiln_out(chat_nosys, in);
    CHECKF(a && b && c && *a && !strcmp(a, b) && strcmp(a, c), "pack '%s', flags '%s', no system '%s'", a ? a : "",
           b ? b : "", c ? c : "");
    free(a);
    free(b);
    free(c);
}

static void test_cli(void) {
    if (!g_kiln || access(g_kiln, X_OK) != 0) {
        printf("command-line cases skipped: KILN_BIN is not set\n");
        return;
    }
    char err[PATH_MAX];
    snprintf(err, sizeof err, "%s/cli.err", g_tmp);
    const char *gated[] = {"pull", "hf.co/acme/gated-GGUF", NULL};
    CHECK(run_kiln(gated, err) == 3);
    char *txt = t_read_file(err, NULL);
    CHECKF(txt && strstr(txt, "authentication required") && !strstr(txt, "BODY-SECRET"), "%s", txt ? txt : "");
    free(txt);
    const char *missing[] = {"pull", "hf.co/acme/tiny-GGUF:Q3_K_S", NULL};
    CHECK(run_kiln(missing, err) == 4);
    const char *run[] = {"run", "-m", "hf.co/acme/tiny-GGUF:Q8_0", "-p", "Once", "-n", "4", NULL};
    if (run_kiln(run, err) != 0) {
        char *why = t_read_file(err, NULL);
        CHECKF(0, "kiln run of a pulled model: %s", why ? why : "");
        free(why);
    }
    const char *tok[] = {"pull", "hf.co/acme/private-GGUF", "--token", "hf_good", NULL};
    CHECK(run_kiln(tok, err) == 0);
    const char *show[] = {"show", "hf.co/acme/private-GGUF", "--remote", NULL};
    CHECK(run_kiln(show, err) == 4);
    const char *show_tok[] = {"show", "hf.co/acme/private-GGUF", "--remote", "--token", "hf_good", NULL};
    CHECK(run_kiln(show_tok, err) == 0);
    const char *chatty[] = {"pull", "chatty", NULL};
    CHECK(run_kiln(chatty, err) == 0);
    test_pack_defaults();
}

static void cleanup(void) {
    if (g_server > 0) {
        kill(g_server, SIGTERM);
        waitpid(g_server, NULL, 0);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "chmod -R u+w %s; rm -rf %s", g_tmp, g_tmp);
    if (g_tmp[0]) CHECK(system(cmd) == 0);
}

int main(void) {
    alarm(120); /* a hung transfer fails the test instead of blocking ctest */
    g_kiln = getenv("KILN_BIN");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/kiln-sources-XXXXXX");
    CHECK(mkdtemp(g_tmp) != NULL);
    snprintf(g_root, sizeof g_root, "%s/root", g_tmp);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (start_server() != 0) {
        CHECKF(0, "the source servers did not start");
        cleanup();
        return t_done();
    }
    char env[400];
    snprintf(env, sizeof env, "http://127.0.0.1:%d/", g_hub);
    setenv("HF_ENDPOINT", env, 1);
    snprintf(env, sizeof env, "http://127.0.0.1:%d", g_reg);
    setenv("KILN_REGISTRY", env, 1);
    snprintf(env, sizeof env, "%s/no-token-file", g_tmp);
    setenv("HF_TOKEN_PATH", env, 1);
    unsetenv("HF_TOKEN");
    unsetenv("HUGGING_FACE_HUB_TOKEN");
    unsetenv("KILN_AUTH_HEADER");
    setenv("KILN_PULL_STALL_SECONDS", "2", 1);
    setenv("KILN_PULL_BACKOFF_MS", "20", 1);
    setenv("KILN_PULL_RETRIES", "4", 1);

    test_hub_default();
    test_hub_token_quant();
    test_hub_split_file();
    test_hub_page_urls();
    test_hub_errors();
    test_refused();
    test_hub_whisper();
    test_hub_integrity();
    test_hub_resume();
    test_hub_revision_moves();
    test_registry();
    test_inspect();
    test_cli();

    /* nothing secret was written anywhere in the store */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "grep -r -q -e SECRET -e sig-secret -e reg-secret -e hf_good %s", g_root);
    CHECK(system(cmd) != 0);
    cleanup();
    return t_done();
}
