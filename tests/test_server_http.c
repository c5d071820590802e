/* The HTTP layer against hostile clients, on a server with no model: the Host
 * rules (none, empty or several: 400), a declared Content-Length over the
 * body limit answered 413 before any body is sent, a chunked body over it,
 * the cap on connections from one address, and the deadline of a request's
 * head that a client trickling bytes cannot push back.  Raw sockets on
 * 127.0.0.1 (and 127.0.0.2 for "another client", where the system routes
 * it); every wait is bounded. */
#define _GNU_SOURCE
#include "server/server.h"

#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int g_port;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A connected socket from address src ("127.0.0.1"...), or -1. */
static int dial(const char *src) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || connect(fd, (struct sockaddr *)&to, sizeof to)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads what fd sends until it closes, cap bytes are in or secs pass;
 * out is NUL-terminated.  Returns the bytes read, or -1 when the wait ran
 * out before the peer closed and before anything came. */
static int drain(int fd, char *out, size_t cap, double secs, int until_close) {
    size_t n = 0;
    const double end = now() + secs;
    out[0] = 0;
    while (n + 1 < cap) {
        const double left = end - now();
        if (left <= 0) return n ? (int)n : -1;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;
        ssize_t k = recv(fd, out + n, cap - 1 - n, 0);
        if (k <= 0) break; /* closed (or reset) */
        n += (size_t)k;
        out[n] = 0;
        if (!until_close && strstr(out, "\r\n\r\n")) {
            /* the head is in; the body follows by its Content-Length */
            const char *cl = strcasestr(out, "Content-Length: ");
            const char *body = strstr(out, "\r\n\r\n") + 4;
            if (cl && (size_t)(out + n - body) >= strtoul(cl + 16, NULL, 10)) break;
        }
    }
    return (int)n;
}

/* Sends req from src and returns the response's status (0: none came,
 * the connection closed or the wait ran out); the response in out. */
static int ask_from(const char *src, const char *req, char *out, size_t cap) {
    int fd = dial(src);
    if (fd < 0) return 0;
    send(fd, req, strlen(req), MSG_NOSIGNAL);
    const int n = drain(fd, out, cap, 5, 0);
    close(fd);
    return n > 12 && !strncmp(out, "HTTP/1.", 7) ? atoi(out + 9) : 0;
}

static int ask(const char *req, char *out, size_t cap) { return ask_from("127.0.0.1", req, out, cap); }

static void test_host(void) {
    char out[4096];
    CHECK(ask("GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", out, sizeof out) == 200);
    CHECK(ask("GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", out, sizeof out) == 200);
    CHECK(ask("GET /health HTTP/1.1\r\nHost: localhost\r\nHost: localhost\r\nConnection: close\r\n\r\n", out,
              sizeof out) == 400);
    CHECKF(strstr(out, "more than one Host"), "%s", out);
    CHECK(ask("GET /health HTTP/1.1\r\nHost: localhost\r\nHOST: evil.example\r\nConnection: close\r\n\r\n", out,
              sizeof out) == 400);
    CHECK(ask("GET /health HTTP/1.0\r\n\r\n", out, sizeof out) == 400);
    CHECKF(strstr(out, "no Host"), "%s", out);
    CHECK(ask("GET /health HTTP/1.0\r\nHost:\r\n\r\n", out, sizeof out) == 400);
    CHECK(ask("GET /health HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n", out, sizeof out) == 400);
    /* the Ollama API answers in its own shape */
    CHECK(ask("GET /api/tags HTTP/1.0\r\nHost: localhost\r\nHost: localhost\r\n\r\n", out, sizeof out) == 400);
    CHECKF(strstr(out, "{\"error\":\""), "%s", out);
}

static void test_body_limit(void) {
    char out[4096];
    /* declared over the limit (4096 here): 413 with nothing of the body sent */
    double t0 = now();
    int fd = dial("127.0.0.1");
    CHECK(fd >= 0);
    const char *head = "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                       "Content-Length: 1000000000\r\n\r\n";
    send(fd, head, strlen(head), MSG_NOSIGNAL);
    drain(fd, out, sizeof out, 5, 0);
    close(fd);
    CHECKF(!strncmp(out, "HTTP/1.1 413", 12), "%s", out);
    CHECKF(strstr(out, "1000000000 bytes") && strstr(out, "limit of 4096 bytes"), "%s", out);
    CHECKF(now() - t0 < 2, "the 413 took %.2f s", now() - t0);
    /* past 2^64: a 413 too (from MHD, which cannot hold the number) */
    CHECK(ask("POST /api/chat HTTP/1.1\r\nHost: localhost\r\nContent-Length: 99999999999999999999999\r\n\r\n", out,
              sizeof out) == 413);
    /* at the limit: read and answered by its route */
    char req[8192];
    int n = snprintf(req, sizeof req,
                     "POST /nothing HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                     "Content-Length: 4096\r\n\r\n");
    memset(req + n, 'x', 4096);
    req[n + 4096] = 0;
    CHECK(ask(req, out, sizeof out) == 404);
    /* chunked, one byte over: 413 once the body has ended */
    n = snprintf(req, sizeof req,
                 "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n1001\r\n");
    memset(req + n, 'x', 4097);
    n += 4097;
    n += snprintf(req + n, sizeof req - (size_t)n, "\r\n0\r\n\r\n");
    CHECK(ask(req, out, sizeof out) == 413);
    /* chunked, endless: the connection closes once twice the limit is in */
    fd = dial("127.0.0.1");
    CHECK(fd >= 0);
    head = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n";
    send(fd, head, strlen(head), MSG_NOSIGNAL);
    char chunk[1100];
    n = snprintf(chunk, sizeof chunk, "400\r\n");
    memset(chunk + n, 'y', 1024);
    n += 1024;
    n += snprintf(chunk + n, sizeof chunk - (size_t)n, "\r\n");
    int sent = 0, closed = 0;
    for (; sent < 64 && !closed; sent++) {
        closed = send(fd, chunk, (size_t)n, MSG_NOSIGNAL) < 0;
        usleep(2000);
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 0) > 0) closed = recv(fd, out, sizeof out, MSG_DONTWAIT) <= 0;
    }
    close(fd);
    CHECKF(closed && sent <= 16, "an endless chunked body: closed %d after %d KiB", closed, sent);
}

/* 1 when fd is closed by the server within secs (nothing else sent). */
static int closed_within(int fd, double secs) {
    char b[256];
    return drain(fd, b, sizeof b, secs, 1) == 0;
}

static void test_slow_clients(void) {
    char out[4096];
    enum { N = 12, PER_IP = 4 };
    int fd[N];
    usleep(300000); /* the connections of the tests before have gone */
    const double t0 = now();
    for (int i = 0; i < N; i++) {
        fd[i] = dial("127.0.0.1");
        if (fd[i] >= 0) send(fd[i], "G", 1, MSG_NOSIGNAL);
    }
    /* past the cap the server closes a connection as it opens */
    int refused = 0;
    for (int i = PER_IP; i < N; i++) refused += fd[i] < 0 || closed_within(fd[i], 1);
    CHECKF(refused == N - PER_IP, "%d of %d connections past the cap were closed", refused, N - PER_IP);
    /* another address is served meanwhile (where 127.0.0.2 routes here) */
    int other = dial("127.0.0.2");
    if (other >= 0) {
        close(other);
        CHECK(ask_from("127.0.0.2", "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", out,
                       sizeof out) == 200);
    }
    /* the held ones trickle a byte every 100 ms, never idle, and are cut at
     * the 1 s deadline all the same */
    int open_ = PER_IP;
    double cut_at = 0;
    while (open_ > 0 && now() - t0 < 5) {
        for (int i = 0; i < PER_IP; i++) {
            if (fd[i] < 0) continue;
            char b[64];
            ssize_t k = recv(fd[i], b, sizeof b, MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || send(fd[i], "E", 1, MSG_NOSIGNAL) < 0) {
                close(fd[i]);
                fd[i] = -1;
                open_--;
                cut_at = now() - t0;
            }
        }
        usleep(100000);
    }
    CHECKF(open_ == 0, "%d trickling connections still open after 5 s", open_);
    CHECKF(cut_at > 0.8 && cut_at < 3, "cut after %.2f s (deadline 1 s)", cut_at);
    /* the address is served again */
    CHECK(ask("GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", out, sizeof out) == 200);
    CHECK(ask("GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", out, sizeof out) == 200);
    const char *m = strstr(out, "\nkiln_http_head_timeouts_total ");
    CHECKF(m && atoi(m + 31) >= PER_IP, "%s", m ? m : "no kiln_http_head_timeouts_total");
    for (int i = 0; i < N; i++)
        if (fd[i] >= 0) close(fd[i]);
}

/* A kept-alive connection answers its next request within the deadline,
 * and is closed after it when no request comes. */
static void test_keep_alive(void) {
    char out[4096];
    int fd = dial("127.0.0.1");
    CHECK(fd >= 0);
    const char *req = "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";
    for (int i = 0; i < 3; i++) {
        send(fd, req, strlen(req), MSG_NOSIGNAL);
        CHECK(drain(fd, out, sizeof out, 5, 0) > 0 && !strncmp(out, "HTTP/1.1 200", 12));
        usleep(300000);
    }
    const double t0 = now();
    CHECK(closed_within(fd, 5));
    CHECKF(now() - t0 > 0.5, "an idle kept-alive connection closed after %.2f s", now() - t0);
    close(fd);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    char store[] = "/tmp/kiln-http-XXXXXX";
    if (!mkdtemp(store)) return 1;
    server_config cfg = server_config_default();
    cfg.port = 0;
    cfg.store_root = store;
    cfg.max_body = 4096;
    cfg.max_conn_per_ip = 4;
    cfg.header_timeout = 1;
    server_server *srv = NULL;
    CHECK(server_server_start(&cfg, &srv) == KILN_OK);
    if (!srv) return t_done();
    g_port = server_server_port(srv);
    test_host();
    test_body_limit();
    test_slow_clients();
    test_keep_alive();
    server_server_drain(srv, 1);
    server_server_free(srv);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", store);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", store);
    return t_done();
}
