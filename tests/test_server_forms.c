/* Tool calls in the other families' forms through every chat API: a server
 * with the scripted fixtures toolform-llama3, toolform-mistral,
 * toolform-deepseek and toolform-pytag (tests/gen_fixtures.py --toolcall,
 * the last with <|python_tag|> a control token as in Meta's: each has its
 * family's real chat template and answers any chat with one call to
 * get_weather in the form the family writes).  OpenAI chat completions
 * (whole and streamed), Responses, Anthropic Messages and Ollama /api/chat
 * (whole and streamed) each return the call; a forced call (tool_choice
 * naming the tool) comes out the same; without tools the text is content,
 * as written.  Raw sockets on 127.0.0.1; every wait is bounded. */
#define _GNU_SOURCE
#include "server/server.h"

#include "testutil.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
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

/* POSTs body to path (Connection: close) and reads the response until the
 * server closes or 60 s pass.  Returns the status (0: none came); *out is
 * the body, de-chunked (malloc'd, NUL-terminated). */
static int post(const char *path, const char *body, char **out) {
    *out = NULL;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&to, sizeof to)) {
        close(fd);
        return 0;
    }
    char head[512];
    const int h = snprintf(head, sizeof head,
                           "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                           "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                           path, strlen(body));
    send(fd, head, (size_t)h, MSG_NOSIGNAL);
    send(fd, body, strlen(body), MSG_NOSIGNAL);
    size_t n = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    const double end = now() + 60;
    while (buf && now() < end) {
        if (n + 1 >= cap) buf = realloc(buf, cap *= 2);
        if (!buf) break;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t k = recv(fd, buf + n, cap - 1 - n, 0);
        if (k <= 0) break;
        n += (size_t)k;
    }
    close(fd);
    if (!buf) return 0;
    buf[n] = 0;
    const int status = n > 12 && !strncmp(buf, "HTTP/1.", 7) ? atoi(buf + 9) : 0;
    char *b = strstr(buf, "\r\n\r\n");
    if (!b) {
        free(buf);
        return 0;
    }
    *b = 0;
    const int chunked = strcasestr(buf, "Transfer-Encoding: chunked") != NULL;
    b += 4;
    char *o = malloc(strlen(b) + 1), *w = o;
    if (!o) {
        free(buf);
        return 0;
    }
    if (!chunked) {
        strcpy(o, b);
    } else {
        for (;;) {
            char *e;
            const unsigned long len = strtoul(b, &e, 16);
            char *data = strstr(e, "\r\n");
            if (!len || !data || strlen(data + 2) < len) break;
            memcpy(w, data + 2, len);
            w += len;
            b = data + 2 + len + 2;
        }
        *w = 0;
    }
    free(buf);
    *out = o;
    return status;
}

static const char k_params[] =
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"unit\": {\"type\": \"string\", "
    "\"enum\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"city\"]}";
static const char k_args[] = "{\"city\": \"Paris\", \"unit\": \"celsius\"}";
static const char k_thought[] = "I should look up the weather.";

/* 1 when args (a JSON object, or JSON text in a string) is k_args. */
static int args_ok(const json_t *args) {
    json_t *want = json_loads(k_args, 0, NULL), *got = NULL;
    if (json_is_string(args)) args = got = json_loads(json_string_value(args), 0, NULL);
    const int ok = json_equal(args, want);
    json_decref(want);
    json_decref(got);
    return ok;
}

/* The request body of api with tools (or none) and extra members. */
static char *body_of(const char *api, const char *model, int tools, int stream, const char *extra) {
    char *b = NULL;
    const char *user = "What's the weather in Paris?";
    int r;
    if (!strcmp(api, "responses"))
        r = asprintf(&b, "{\"model\": \"%s\", \"input\": \"%s\", \"stream\": %s, \"temperature\": 0%s%s%s%s}", model,
                     user, stream ? "true" : "false",
                     tools ? ", \"tools\": [{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": " : "",
                     tools ? k_params : "", tools ? "}]" : "", extra);
    else if (!strcmp(api, "messages"))
        r = asprintf(&b,
                     "{\"model\": \"%s\", \"max_tokens\": 100, \"messages\": [{\"role\": \"user\", \"content\": "
                     "\"%s\"}], \"stream\": %s%s%s%s%s}",
                     model, user, stream ? "true" : "false",
                     tools ? ", \"tools\": [{\"name\": \"get_weather\", \"input_schema\": " : "", tools ? k_params : "",
                     tools ? "}]" : "", extra);
    else
        r = asprintf(&b,
                     "{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": \"%s\"}], \"stream\": %s, "
                     "\"options\": {\"temperature\": 0}, \"temperature\": 0%s%s%s%s}",
                     model, user, stream ? "true" : "false",
                     tools ? ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                             "\"parameters\": "
                           : "",
                     tools ? k_params : "", tools ? "}}]" : "", extra);
    return r < 0 ? NULL : b;
}

/* The call of an OpenAI chat stream: the deltas' pieces joined. */
static int oai_stream_call(char *sse, char *name, size_t cap, json_t **args, json_t **reasoning) {
    int n_open = 0;
    size_t alen = 0, acap = 4096;
    char *a = calloc(1, acap);
    char rs[256] = "";
    for (char *line = strtok(sse, "\n"); line && a; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: {", 7)) continue;
        json_t *j = json_loads(line + 6, 0, NULL);
        json_t *d = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
        const char *r = json_string_value(json_object_get(d, "reasoning_content"));
        if (r && strlen(rs) + strlen(r) < sizeof rs) strcat(rs, r);
        size_t i;
        json_t *tc;
        json_array_foreach(json_object_get(d, "tool_calls"), i, tc) {
            json_t *fn = json_object_get(tc, "function");
            const char *nm = json_string_value(json_object_get(fn, "name"));
            if (nm) {
                snprintf(name, cap, "%s", nm);
                n_open++;
            }
            const char *piece = json_string_value(json_object_get(fn, "arguments"));
            if (piece && alen + strlen(piece) + 1 < acap) {
                memcpy(a + alen, piece, strlen(piece) + 1);
                alen += strlen(piece);
            }
        }
        json_decref(j);
    }
    *args = a ? json_string(a) : NULL;
    *reasoning = json_string(rs);
    free(a);
    return n_open;
}

/* Every API on one model; reasoning: what it thinks first ("" none);
 * forced: try a forced call too (its constraint takes no control token). */
static void check_model(const char *model, const char *reasoning, int forced) {
    char *out, *b;
    int st;
    /* OpenAI chat, whole */
    b = body_of("chat", model, 1, 0, ", \"max_tokens\": 64");
    st = post("/v1/chat/completions", b, &out);
    free(b);
    json_t *j = out ? json_loads(out, 0, NULL) : NULL;
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    json_t *fn = json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0), "function");
    const char *rc = json_string_value(json_object_get(msg, "reasoning_content"));
    const char *content = json_string_value(json_object_get(msg, "content"));
    CHECKF(st == 200 && json_array_size(json_object_get(msg, "tool_calls")) == 1 &&
               !strcmp(json_string_value(json_object_get(fn, "name")), "get_weather") &&
               args_ok(json_object_get(fn, "arguments")) && !strcmp(rc ? rc : "", reasoning) &&
               !(content && *content) &&
               !strcmp(json_string_value(
                           json_object_get(json_array_get(json_object_get(j, "choices"), 0), "finish_reason")),
                       "tool_calls"),
           "%s: chat completions: %d %s", model, st, out ? out : "");
    json_decref(j);
    free(out);

    /* OpenAI chat, streamed */
    b = body_of("chat", model, 1, 1, ", \"max_tokens\": 64");
    st = post("/v1/chat/completions", b, &out);
    free(b);
    char name[64] = "";
    json_t *args = NULL, *rs = NULL;
    int n = out ? oai_stream_call(out, name, sizeof name, &args, &rs) : 0;
    CHECKF(st == 200 && n == 1 && !strcmp(name, "get_weather") && args_ok(args) &&
               !strcmp(json_string_value(rs), reasoning),
           "%s: chat completions streamed: %d, %d calls, '%s', args %s, reasoning '%s'", model, st, n, name,
           json_string_value(args), json_string_value(rs));
    json_decref(args);
    json_decref(rs);
    free(out);

    /* Ollama /api/chat, whole and streamed (NDJSON: the call in one line) */
    for (int stream = 0; stream <= 1; stream++) {
        b = body_of("ollama", model, 1, stream, "");
        st = post("/api/chat", b, &out);
        free(b);
        int found = 0;
        for (char *line = out ? strtok(out, "\n") : NULL; line; line = strtok(NULL, "\n")) {
            json_t *o = json_loads(line, 0, NULL);
            json_t *tc = json_object_get(json_object_get(o, "message"), "tool_calls");
            json_t *f = json_object_get(json_array_get(tc, 0), "function");
            if (json_array_size(tc) == 1 && !strcmp(json_string_value(json_object_get(f, "name")), "get_weather") &&
                json_is_object(json_object_get(f, "arguments")) && args_ok(json_object_get(f, "arguments")))
                found++;
            json_decref(o);
        }
        CHECKF(st == 200 && found == 1, "%s: /api/chat%s: %d, %d calls", model, stream ? " streamed" : "", st, found);
        free(out);
    }

    /* Anthropic Messages */
    b = body_of("messages", model, 1, 0, "");
    st = post("/v1/messages", b, &out);
    free(b);
    j = out ? json_loads(out, 0, NULL) : NULL;
    int uses = 0;
    size_t i;
    json_t *blk;
    json_array_foreach(json_object_get(j, "content"), i, blk) {
        if (!strcmp(json_string_value(json_object_get(blk, "type")), "tool_use") &&
            !strcmp(json_string_value(json_object_get(blk, "name")), "get_weather") &&
            args_ok(json_object_get(blk, "input")))
            uses++;
    }
    CHECKF(st == 200 && uses == 1 && !strcmp(json_string_value(json_object_get(j, "stop_reason")), "tool_use"),
           "%s: messages: %d %s", model, st, out ? out : "");
    json_decref(j);
    free(out);

    /* Responses */
    b = body_of("responses", model, 1, 0, "");
    st = post("/v1/responses", b, &out);
    free(b);
    j = out ? json_loads(out, 0, NULL) : NULL;
    int calls = 0;
    json_array_foreach(json_object_get(j, "output"), i, blk) {
        if (!strcmp(json_string_value(json_object_get(blk, "type")), "function_call") &&
            !strcmp(json_string_value(json_object_get(blk, "name")), "get_weather") &&
            args_ok(json_object_get(blk, "arguments")))
            calls++;
    }
    CHECKF(st == 200 && calls == 1, "%s: responses: %d %s", model, st, out ? out : "");
    json_decref(j);
    free(out);

    /* Messages and Responses streamed: the call's block or item, its arguments' JSON in the deltas */
    for (int api = 0; api < 2; api++) {
        b = body_of(api ? "responses" : "messages", model, 1, 1, "");
        st = post(api ? "/v1/responses" : "/v1/messages", b, &out);
        free(b);
        const char *kind = api ? "\"type\":\"function_call\"" : "\"type\":\"tool_use\"";
        const char *delta = api ? "response.function_call_arguments.delta" : "input_json_delta";
        CHECKF(st == 200 && out && strstr(out, kind) && strstr(out, "get_weather") && strstr(out, delta) &&
                   strstr(out, "Paris"),
               "%s: %s streamed: %d %.600s", model, api ? "responses" : "messages", st, out ? out : "");
        free(out);
    }

    /* a forced call: the form's opening, the arguments held to the schema */
    if (forced) {
        b = body_of("chat", model, 1, 0,
                    ", \"max_tokens\": 64, \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": "
                    "\"get_weather\"}}");
        st = post("/v1/chat/completions", b, &out);
        free(b);
        j = out ? json_loads(out, 0, NULL) : NULL;
        msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
        fn = json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0), "function");
        CHECKF(st == 200 && json_array_size(json_object_get(msg, "tool_calls")) == 1 &&
                   !strcmp(json_string_value(json_object_get(fn, "name")), "get_weather"),
               "%s: forced call: %d %s", model, st, out ? out : "");
        json_decref(j);
        free(out);
    }

    /* no tools: what the model wrote is content */
    b = body_of("chat", model, 0, 0, ", \"max_tokens\": 64");
    st = post("/v1/chat/completions", b, &out);
    free(b);
    j = out ? json_loads(out, 0, NULL) : NULL;
    msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    content = json_string_value(json_object_get(msg, "content"));
    CHECKF(st == 200 && !json_object_get(msg, "tool_calls") && content && strstr(content, "get_weather") &&
               strstr(content, "Paris"),
           "%s: no tools: %d %s", model, st, out ? out : "");
    json_decref(j);
    free(out);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    char store[] = "/tmp/kiln-forms-XXXXXX";
    if (!mkdtemp(store)) return 1;
    const char *models[] = {"data/fixtures/toolform-llama3.gguf", "data/fixtures/toolform-mistral.gguf",
                            "data/fixtures/toolform-deepseek.gguf", "data/fixtures/toolform-pytag.gguf"};
    server_config cfg = server_config_default();
    cfg.port = 0;
    cfg.models = models;
    cfg.n_models = 4;
    cfg.parallel = 1;
    cfg.n_ctx = 2048;
    cfg.n_threads = 1;
    cfg.keep_alive = -1;
    cfg.store_root = store;
    server_server *srv = NULL;
    CHECK(server_server_start(&cfg, &srv) == KILN_OK);
    if (!srv) return t_done();
    char msg[256];
    CHECKF(server_server_wait_loaded(srv, msg, sizeof msg) == KILN_OK, "%s", msg);
    g_port = server_server_port(srv);
    check_model("toolform-llama3", "", 1);
    check_model("toolform-mistral", "", 1);
    check_model("toolform-deepseek", k_thought, 1);
    check_model("toolform-pytag", "", 0);
    server_server_drain(srv, 1);
    server_server_free(srv);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", store);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", store);
    return t_done();
}
