/* A server with two models, one whose GGUF chat template is hostile (what
 * it renders depends on the last message: 100,000 searches of a megabyte,
 * a flood of output, lists made in a loop) and stories260K with a plain one.
 * Each hostile request fails with a message naming the budget it went over
 * (500: the template is at fault; 413 when the conversation itself is over
 * a megabyte); while several run at once from threads and 300 slow
 * clients hold connections, /health and a chat with the other model are
 * answered and the process's peak memory stays bounded.  On a second server whose step budget lets the searches run
 * on, a render whose client disconnects stops: /metrics counts it as
 * cancelled and no render is left running.  Raw sockets on 127.0.0.1;
 * every wait is bounded. */
#define _GNU_SOURCE
#include "server/server.h"

#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MODEL "../models/stories260K.gguf"

/* the last message picks the attack; any other text is rendered as is */
static const char k_hostile[] =
    "{%- set c = messages[-1]['content'] -%}"
    "{%- if c == 'steps' -%}"
    "{%- set s = 'a' * 1000000 -%}{%- for i in range(100000) -%}{%- if 'ab' in s -%}{%- endif -%}{%- endfor -%}"
    "{%- elif c == 'output' -%}"
    "{%- for i in range(100000) -%}{{ 'x' * 100000 }}{%- endfor -%}"
    "{%- elif c == 'memory' -%}"
    "{%- for i in range(100000) -%}{{ (range(100000)|list)|length }}{%- endfor -%}"
    "{%- else -%}{{ c }}{%- endif -%}";

static int g_port;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A connected socket from address src, or -1. */
static int dial_from(const char *src) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || connect(fd, (struct sockaddr *)&to, sizeof to)) {
        close(fd);
        return -1;
    }
    return fd;
}

static int dial(void) { return dial_from("127.0.0.1"); }

/* Sends req and reads the response until the server closes (every
 * request says Connection: close) or secs pass; its status (0: none came)
 * with the response in out (NUL-terminated, cut at cap). */
static int exchange(const char *req, size_t len, char *out, size_t cap, double secs) {
    out[0] = 0;
    int fd = dial();
    if (fd < 0) return 0;
    for (size_t sent = 0; sent < len;) {
        ssize_t k = send(fd, req + sent, len - sent, MSG_NOSIGNAL);
        if (k <= 0) break;
        sent += (size_t)k;
    }
    size_t n = 0;
    const double end = now() + secs;
    while (n + 1 < cap) {
        const double left = end - now();
        if (left <= 0) break;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;
        ssize_t k = recv(fd, out + n, cap - 1 - n, 0);
        if (k <= 0) break;
        n += (size_t)k;
        out[n] = 0;
    }
    close(fd);
    return n > 12 && !strncmp(out, "HTTP/1.", 7) ? atoi(out + 9) : 0;
}

static int get(const char *path, char *out, size_t cap) {
    char req[256];
    const int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", path);
    return exchange(req, (size_t)n, out, cap, 60);
}

/* The request that POSTs body to path (malloc'd), its length in *len. */
static char *post_req(const char *path, const char *body, size_t *len) {
    const size_t bl = strlen(body), cap = bl + 256;
    char *req = malloc(cap);
    if (!req) return NULL;
    int h = snprintf(req, cap,
                     "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     path, bl);
    memcpy(req + h, body, bl + 1);
    *len = (size_t)h + bl;
    return req;
}

static int post(const char *path, const char *body, char *out, size_t cap) {
    size_t len = 0;
    char *req = post_req(path, body, &len);
    const int st = req ? exchange(req, len, out, cap, 120) : 0;
    free(req);
    return st;
}

/* A chat request to model with the one user message text. */
static int chat(const char *path, const char *model, const char *text, char *out, size_t cap) {
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": \"%s\"}], \"max_tokens\": 4, "
             "\"temperature\": 0, \"stream\": false}",
             model, text);
    return post(path, body, out, cap);
}

/* The value of the metric line that starts with name (its labels
 * included), or -1. */
static long long metric(const char *name) {
    static char out[65536];
    if (get("/metrics", out, sizeof out) != 200) return -1;
    char key[160];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(out, key);
    return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

/* kB of the process's status field ("VmHWM:", "VmRSS:"), or -1. */
static long status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, strlen(field))) kb = strtol(line + strlen(field), NULL, 10);
    fclose(f);
    return kb;
}

static const char *const k_kinds[3] = {"steps", "output", "memory"};
static const char *const k_budget_msg[3] = {"render exceeded its step budget (4000000 steps)",
                                            "render exceeded its output budget (8388608 bytes)",
                                            "render exceeded its memory budget (67108864 bytes)"};

/* one at a time: each attack's status and message, on three routes, counted */
static void test_budgets(void) {
    static char out[16384];
    for (int k = 0; k < 3; k++) {
        char name[96];
        snprintf(name, sizeof name, "kiln_template_budget_exceeded_total{budget=\"%s\"}", k_kinds[k]);
        const long long before = metric(name);
        int st = chat("/v1/chat/completions", "hostile", k_kinds[k], out, sizeof out);
        CHECKF(st == 500 && strstr(out, k_budget_msg[k]) && strstr(out, "\"server_error\""), "%s: %d %.400s",
               k_kinds[k], st, out);
        st = chat("/api/chat", "hostile", k_kinds[k], out, sizeof out);
        CHECKF(st == 500 && strstr(out, k_budget_msg[k]), "/api/chat %s: %d %.400s", k_kinds[k], st, out);
        /* llama-server's /apply-template renders without generating */
        char body[160];
        snprintf(body, sizeof body,
                 "{\"model\": \"hostile\", \"messages\": [{\"role\": \"user\", \"content\": \"%s\"}]}", k_kinds[k]);
        st = post("/apply-template", body, out, sizeof out);
        CHECKF(st == 500 && strstr(out, k_budget_msg[k]), "/apply-template %s: %d %.400s", k_kinds[k], st, out);
        CHECKF(metric(name) == before + 3, "%s went from %lld to %lld", name, before, metric(name));
    }
    /* the same searches with a conversation over a megabyte: the client's */
    const size_t pad = (size_t)1 << 20;
    char *body = malloc(pad + 512);
    CHECK(body);
    if (!body) return;
    int n = snprintf(body, 512, "{\"model\": \"hostile\", \"messages\": [{\"role\": \"user\", \"content\": \"");
    memset(body + n, 'a', pad);
    snprintf(body + n + pad, 512, "\"}, {\"role\": \"user\", \"content\": \"steps\"}], \"max_tokens\": 4}");
    const int st = post("/v1/chat/completions", body, out, sizeof out);
    CHECKF(st == 413 && strstr(out, "the conversation is too large for the chat template's budgets") &&
               strstr(out, "step budget"),
           "a large conversation: %d %.400s", st, out);
    free(body);
    /* an ordinary message renders through the same template */
    CHECKF(chat("/v1/chat/completions", "hostile", "Once upon a time", out, sizeof out) == 200, "%.400s", out);
}

typedef struct attacker {
    int id, n_done, n_wrong;
    char wrong[512];
} attacker;

enum { N_ATTACKERS = 4, ROUNDS = 3, N_SLOW = 300, MAX_PER_IP = 30 };
static atomic_int g_attacking;

static void *attack(void *arg) {
    attacker *a = arg;
    static __thread char out[16384];
    for (int r = 0; r < ROUNDS; r++) {
        const int k = (a->id + r) % 3;
        const int st = chat("/v1/chat/completions", "hostile", k_kinds[k], out, sizeof out);
        if (st != 500 || !strstr(out, k_budget_msg[k])) {
            if (!a->n_wrong) snprintf(a->wrong, sizeof a->wrong, "%s: %d %.400s", k_kinds[k], st, out);
            a->n_wrong++;
        }
        a->n_done++;
    }
    atomic_fetch_sub(&g_attacking, 1);
    return NULL;
}

/* 1 when the server has not closed fd. */
static int still_open(int fd) {
    char b[64];
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) == 0 || (recv(fd, b, sizeof b, MSG_DONTWAIT) < 0 && errno == EAGAIN);
}

/* several hostile renders at once, with N_SLOW slow clients holding
 * connections from other addresses (MAX_PER_IP each): the rest of the
 * server answers, and the peak memory stays within the renders' budgets */
static void test_concurrent(void) {
    static char out[16384];
    CHECK(chat("/v1/chat/completions", "normal", "Hello", out, sizeof out) == 200);
    static int slow[N_SLOW];
    int n_slow = 0;
    for (int i = 0; i < N_SLOW; i++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.0.%d", 2 + i / MAX_PER_IP);
        if ((slow[n_slow] = dial_from(src)) < 0) break; /* where the system does not route 127.0.0.x here */
        send(slow[n_slow++], "P", 1, MSG_NOSIGNAL);
    }
    const long base_kb = status_kb("VmRSS:");
    CHECK(base_kb > 0);
    pthread_t th[N_ATTACKERS];
    attacker at[N_ATTACKERS];
    atomic_store(&g_attacking, N_ATTACKERS);
    for (int i = 0; i < N_ATTACKERS; i++) {
        memset(&at[i], 0, sizeof at[i]);
        at[i].id = i;
        CHECK(pthread_create(&th[i], NULL, attack, &at[i]) == 0);
    }
    int rounds = 0, health = 0, chats = 0, seen_running = 0;
    do {
        rounds++;
        const int h = get("/health", out, sizeof out);
        health += h == 200;
        CHECKF(h == 200, "/health during the attack: %d %.200s", h, out);
        const int c = chat("/v1/chat/completions", "normal", "Hello", out, sizeof out);
        chats += c == 200 && strstr(out, "\"choices\"") != NULL;
        CHECKF(c == 200, "a chat with the other model during the attack: %d %.400s", c, out);
        if (metric("kiln_template_renders_running") > 0) seen_running++;
    } while (atomic_load(&g_attacking) > 0 && rounds < 10000);
    for (int i = 0; i < N_ATTACKERS; i++) {
        pthread_join(th[i], NULL);
        CHECKF(at[i].n_done == ROUNDS && at[i].n_wrong == 0, "attacker %d: %d wrong of %d; first: %s", i, at[i].n_wrong,
               at[i].n_done, at[i].wrong);
    }
    CHECK(health == rounds && chats == rounds);
    int held = 0;
    for (int i = 0; i < n_slow; i++) {
        held += still_open(slow[i]);
        close(slow[i]);
    }
    CHECKF(held == n_slow, "%d of %d slow connections were closed", n_slow - held, n_slow);
    /* each render holds at most its 64 MiB memory budget and 8 MiB of
     * output; a gigabyte over the start leaves room for the allocator's
     * (and a sanitizer's) own, and is far below the gigabytes each of
     * these templates took with no budget */
    const long hwm_kb = status_kb("VmHWM:");
    printf("%d rounds of /health and a chat during %d hostile renders (seen running %d times) with %d slow "
           "connections held; RSS %ld MiB at the start, peak %ld MiB\n",
           rounds, N_ATTACKERS * ROUNDS, seen_running, n_slow, base_kb >> 10, hwm_kb >> 10);
    CHECKF(hwm_kb > 0 && hwm_kb - base_kb < (1L << 20), "peak RSS %ld MiB over a start of %ld MiB", hwm_kb >> 10,
           base_kb >> 10);
    CHECK(metric("kiln_template_renders_running") == 0);
}

/* a render whose client goes is stopped (under this server's step budget
 * the searches scan 100 GB: far longer than the wait for the count) */
static void test_cancel(void) {
    static char out[4096];
    const long long before = metric("kiln_template_renders_cancelled_total");
    CHECK(before >= 0 && metric("kiln_template_renders_running") == 0);
    size_t len = 0;
    char *req =
        post_req("/v1/chat/completions",
                 "{\"model\": \"hostile\", \"messages\": [{\"role\": \"user\", \"content\": \"steps\"}]}", &len);
    int fd = dial();
    CHECK(fd >= 0 && req);
    if (fd < 0 || !req) {
        free(req);
        return;
    }
    CHECK(send(fd, req, len, MSG_NOSIGNAL) == (ssize_t)len);
    free(req);
    int running = 0;
    for (double t0 = now(); !running && now() - t0 < 20; usleep(20000))
        running = metric("kiln_template_renders_running") == 1;
    CHECKF(running, "the hostile render did not start");
    /* no answer yet: the render is still going */
    struct pollfd p = {fd, POLLIN, 0};
    CHECK(poll(&p, 1, 0) == 0);
    close(fd);
    long long cancelled = before;
    for (double t0 = now(); cancelled == before && now() - t0 < 20; usleep(20000))
        cancelled = metric("kiln_template_renders_cancelled_total");
    CHECKF(cancelled == before + 1, "renders cancelled: %lld, then %lld", before, cancelled);
    for (double t0 = now(); running && now() - t0 < 20; usleep(20000))
        running = metric("kiln_template_renders_running") != 0;
    CHECK(!running);
    CHECK(get("/health", out, sizeof out) == 200);
}

static server_server *start(const char *const *models, uint64_t template_steps, const char *store) {
    server_config cfg = server_config_default();
    cfg.port = 0;
    cfg.models = models;
    cfg.n_models = 2;
    cfg.parallel = 2;
    cfg.n_ctx = 128;
    cfg.n_threads = 1;
    cfg.keep_alive = -1;
    cfg.store_root = store;
    cfg.template_steps = template_steps;
    cfg.header_timeout = 600; /* the slow clients are held for the whole test, however long it takes */
    server_server *srv = NULL;
    CHECK(server_server_start(&cfg, &srv) == KILN_OK);
    if (!srv) return NULL;
    char msg[256];
    CHECKF(server_server_wait_loaded(srv, msg, sizeof msg) == KILN_OK, "%s", msg);
    g_port = server_server_port(srv);
    return srv;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    char dir[] = "/tmp/kiln-hostile-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char hostile[128], normal[128], store[128];
    snprintf(hostile, sizeof hostile, "%s/hostile.gguf", dir);
    snprintf(normal, sizeof normal, "%s/normal.gguf", dir);
    snprintf(store, sizeof store, "%s/store", dir);
    CHECK(t_write_chat_model_with(MODEL, hostile, k_hostile) == 0);
    CHECK(t_write_chat_model(MODEL, normal) == 0);
    const char *models[] = {hostile, normal};
    server_server *srv = start(models, 0, store);
    if (srv) {
        test_budgets();
        test_concurrent();
        server_server_drain(srv, 5);
        server_server_free(srv);
    }
    srv = start(models, (uint64_t)1 << 50, store);
    if (srv) {
        test_cancel();
        server_server_drain(srv, 5);
        server_server_free(srv);
    }
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return t_done();
}
