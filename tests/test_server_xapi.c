/* The Responses and Messages halves that need no connection (xapi.h):
 * requests translated into the chat form (compared with the chat form
 * written out by hand), refusals by name, and the writers: a fixed
 * sequence of generated pieces must give exactly the expected event
 * types, every event's name equal to its data's type, Responses' sequence
 * numbers counting from 0, deltas that fold into the whole object, and the
 * same whole object without streaming. */
#include "server/buf.h"
#include "server/deltas.h"
#include "server/xapi.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *J(const char *text) {
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j) {
        fprintf(stderr, "bad test JSON at %d: %s\n  %s\n", e.position, e.text, text);
        exit(1);
    }
    return j;
}

static int same(json_t *got, const char *want_text, const char *what) {
    json_t *want = J(want_text);
    int ok = json_equal(got, want);
    if (!ok) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS), *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
        fprintf(stderr, "%s:\n  got  %s\n  want %s\n", what, g, w);
        free(g);
        free(w);
    }
    json_decref(want);
    return ok;
}

/* ---- Messages request ---- */

static void msg_requests(void) {
    server_xreq x;
    char err[600];
    const char *param;
    json_t *b = J("{\"model\":\"m\",\"max_tokens\":64,\"temperature\":0.5,\"top_k\":7,\"stop_sequences\":[\"END\"],"
                  "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},\"stream\":true,"
                  "\"system\":[{\"type\":\"text\",\"text\":\"Be \"},{\"type\":\"text\",\"text\":\"brief.\"}],"
                  "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Weather.\",\"input_schema\":"
                  "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}],"
                  "\"messages\":["
                  "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
                  "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"Look it up.\","
                  "\"signature\":\"x\"},{\"type\":\"text\",\"text\":\"Checking.\"},"
                  "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
                  "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":"
                  "[{\"type\":\"text\",\"text\":\"18C\"}]},{\"type\":\"tool_result\",\"tool_use_id\":\"t2\","
                  "\"content\":\"down\",\"is_error\":true},{\"type\":\"text\",\"text\":\"Thanks\"}]}]}");
    CHECK(server_msg_translate(b, 0, &x, err, sizeof err, &param) == 0);
    CHECK(x.think == 1 && x.stream == 1 && x.has_max == 1);
    CHECK(same(x.chat,
               "{\"max_tokens\":64,\"temperature\":0.5,\"top_k\":7,\"stop\":[\"END\"],\"reasoning_budget\":1024,"
               "\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
               "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
               "{\"role\":\"assistant\",\"content\":\"Checking.\",\"reasoning_content\":\"Look it up.\","
               "\"tool_calls\":[{\"id\":\"t1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
               "\"arguments\":{\"city\":\"Paris\"}}}]},"
               "{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":\"18C\"},"
               "{\"role\":\"tool\",\"tool_call_id\":\"t2\",\"content\":\"Error: down\"},"
               "{\"role\":\"user\",\"content\":\"Thanks\"}],"
               "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather.\","
               "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]}",
               "messages -> chat"));
    server_xreq_free(&x);
    json_decref(b);

    /* count_tokens needs no max_tokens; tool_choice none drops the tools */
    b = J("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tool_choice\":{\"type\":\"none\"},"
          "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]}");
    CHECK(server_msg_translate(b, 1, &x, err, sizeof err, &param) == 0);
    CHECK(same(x.chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "count form"));
    server_xreq_free(&x);
    CHECK(server_msg_translate(b, 0, &x, err, sizeof err, &param) == -1);
    CHECK(param && !strcmp(param, "max_tokens") && strstr(err, "max_tokens"));
    server_xreq_free(&x);
    json_decref(b);

    /* documents: a text source and a content source, with title and
     * context, apart from the text around them by blank lines */
    b = J("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":["
          "{\"type\":\"text\",\"text\":\"Read:\"},"
          "{\"type\":\"document\",\"title\":\"Notes\",\"context\":\"From May.\",\"source\":{\"type\":\"text\","
          "\"media_type\":\"text/plain\",\"data\":\"Line 1.\\nLine 2.\"},\"citations\":{\"enabled\":false}},"
          "{\"type\":\"document\",\"source\":{\"type\":\"content\",\"content\":[{\"type\":\"text\",\"text\":\"A\"},"
          "{\"type\":\"text\",\"text\":\"B\"}]}},"
          "{\"type\":\"text\",\"text\":\"Summarize.\"}]}]}");
    CHECK(server_msg_translate(b, 0, &x, err, sizeof err, &param) == 0);
    CHECK(same(x.chat,
               "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":"
               "\"Read:\\n\\nNotes\\n\\nFrom May.\\n\\nLine 1.\\nLine 2.\\n\\nAB\\n\\nSummarize.\"}]}",
               "documents"));
    server_xreq_free(&x);
    json_decref(b);

    /* a forced call: any is OpenAI's "required", tool a named function */
    b = J("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tool_choice\":{\"type\":\"any\"},"
          "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]}");
    CHECK(server_msg_translate(b, 0, &x, err, sizeof err, &param) == 0);
    CHECK(
        same(x.chat,
             "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tool_choice\":\"required\","
             "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]}",
             "tool_choice any"));
    server_xreq_free(&x);
    json_decref(b);
    b = J("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
          "\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\",\"disable_parallel_tool_use\":true},"
          "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]}");
    CHECK(server_msg_translate(b, 0, &x, err, sizeof err, &param) == 0);
    CHECK(same(json_object_get(x.chat, "tool_choice"), "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}",
               "tool_choice tool"));
    server_xreq_free(&x);
    json_decref(b);

    /* image blocks stay parts of the turn, in place among its text (media.c reads them) */
    b = J("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
          "{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"QUJD\"}},"
          "{\"type\":\"text\",\"text\":\"b\"}]}]}");
    CHECK(server_msg_translate(b, 0, &x, err, sizeof err, &param) == 0);
    CHECK(same(
        json_object_get(x.chat, "messages"),
        "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image\",\"source\":"
        "{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"QUJD\"}},{\"type\":\"text\",\"text\":\"b\"}]}]",
        "image block"));
    server_xreq_free(&x);
    json_decref(b);

    static const struct {
        const char *body, *param, *words;
    } refused[] = {
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":"
         "{\"type\":\"base64\",\"media_type\":\"application/pdf\",\"data\":\"JVBERi0=\"}}]}]}",
         "messages", "is a PDF; kiln reads text documents only"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":"
         "{\"type\":\"url\",\"url\":\"https://example.com/a.pdf\"}}]}]}",
         "messages", "fetches no URLs"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":"
         "{\"type\":\"text\",\"media_type\":\"text/plain\"}}]}]}",
         "messages", "'data' as a string"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":"
         "{\"type\":\"content\",\"content\":[{\"type\":\"image\"}]}}]}]}",
         "messages", "only text parts"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "messages", "role"},
        {"{\"max_tokens\":5,\"messages\":[]}", "messages", "non-empty"},
        {"{\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens", "at least 1"},
        {"{\"max_tokens\":5,\"tool_choice\":{\"type\":\"some\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "tool_choice", "'auto', 'any', 'tool' or 'none'"},
        {"{\"max_tokens\":5,\"tool_choice\":{\"type\":\"tool\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "tool_choice", "'name'"},
        {"{\"max_tokens\":5,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}],"
         "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "tools", "server tool"},
        {"{\"max_tokens\":5,\"stop_sequences\":[\"\"],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "stop_sequences", "non-empty"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]}", "messages",
         "tool_use_id"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        b = J(refused[i].body);
        int rc = server_msg_translate(b, 0, &x, err, sizeof err, &param);
        CHECK(rc == -1);
        CHECK(param && !strcmp(param, refused[i].param));
        if (!strstr(err, refused[i].words)) {
            fprintf(stderr, "refusal %zu: '%s' does not say '%s'\n", i, err, refused[i].words);
            CHECK(0);
        }
        server_xreq_free(&x);
        json_decref(b);
    }
}

/* ---- Responses request ---- */

static void resp_requests(void) {
    server_xreq x;
    char err[600];
    const char *param;
    json_t *b =
        J("{\"model\":\"m\",\"instructions\":\"Be brief.\",\"max_output_tokens\":32,\"temperature\":0,"
          "\"reasoning\":{\"effort\":\"none\"},"
          "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\",\"schema\":{\"type\":\"object\"}}},"
          "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}},"
          "{\"type\":\"function\",\"name\":\"g\"}],"
          "\"input\":["
          "{\"role\":\"developer\",\"content\":\"Rules.\"},"
          "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},"
          "{\"type\":\"input_text\",\"text\":\"b\"}]},"
          "{\"type\":\"reasoning\",\"id\":\"rs\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\","
          "\"text\":\"think\"}]},"
          "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"ok\"}]},"
          "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
          "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":\"g\",\"arguments\":\"{\\\"x\\\":1}\"},"
          "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"one\"},"
          "{\"type\":\"function_call_output\",\"call_id\":\"c2\",\"output\":[{\"type\":\"input_text\","
          "\"text\":\"two\"}]},"
          "{\"type\":\"function_call\",\"call_id\":\"c3\",\"name\":\"f\",\"arguments\":\"{}\"}]}");
    CHECK(server_resp_translate(b, &x, err, sizeof err, &param) == 0);
    CHECK(x.think == 0 && x.stream == 0 && x.has_max == 1);
    CHECK(same(x.chat,
               "{\"max_tokens\":32,\"temperature\":0,\"reasoning_effort\":\"none\","
               "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\"}}},"
               "\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
               "{\"role\":\"system\",\"content\":\"Rules.\"},"
               "{\"role\":\"user\",\"content\":\"ab\"},"
               "{\"role\":\"assistant\",\"content\":\"ok\",\"reasoning_content\":\"think\",\"tool_calls\":["
               "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}},"
               "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{\\\"x\\\":1}\"}}]},"
               "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"one\"},"
               "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"two\"},"
               "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":["
               "{\"id\":\"c3\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}],"
               "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}},"
               "{\"type\":\"function\",\"function\":{\"name\":\"g\",\"parameters\":{\"type\":\"object\","
               "\"properties\":{}}}}]}",
               "responses -> chat"));
    server_xreq_free(&x);
    json_decref(b);

    b = J("{\"input\":\"hi\",\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},"
          "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}]}");
    CHECK(server_resp_translate(b, &x, err, sizeof err, &param) == 0);
    CHECK(same(json_object_get(x.chat, "tool_choice"), "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}",
               "responses: a named function"));
    server_xreq_free(&x);
    json_decref(b);
    b = J("{\"input\":\"hi\",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}]}");
    CHECK(server_resp_translate(b, &x, err, sizeof err, &param) == 0);
    CHECK(!strcmp(json_string_value(json_object_get(x.chat, "tool_choice")), "required"));
    server_xreq_free(&x);
    json_decref(b);

    /* a user message's input_image parts stay parts, runs of text joined */
    b = J("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},{\"type\":"
          "\"input_text\",\"text\":\"b\"},{\"type\":\"input_image\",\"image_url\":\"data:image/png;base64,QUJD\"}]}]}");
    CHECK(server_resp_translate(b, &x, err, sizeof err, &param) == 0);
    CHECK(same(json_object_get(x.chat, "messages"),
               "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"ab\"},{\"type\":\"input_image\","
               "\"image_url\":\"data:image/png;base64,QUJD\"}]}]",
               "input_image"));
    server_xreq_free(&x);
    json_decref(b);

    b = J("{\"input\":\"hello\",\"stream\":true}");
    CHECK(server_resp_translate(b, &x, err, sizeof err, &param) == 0);
    CHECK(x.stream == 1 && x.think == -1 && x.has_max == 0);
    CHECK(same(x.chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}", "string input"));
    server_xreq_free(&x);
    json_decref(b);

    static const struct {
        const char *body, *param, *words;
    } refused[] = {
        {"{\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", "previous_response_id", "stores no responses"},
        {"{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", "input", "item_reference"},
        {"{\"input\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"u\"}]}]}", "input",
         "only a user message may hold input_image"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"u\"},"
         "{\"type\":\"input_file\"}]}]}",
         "input", "input_text and input_image"},
        {"{\"input\":\"x\",\"tools\":[{\"type\":\"file_search\"}]}", "tools", "file_search"},
        {"{\"input\":\"x\",\"tool_choice\":{\"type\":\"allowed_tools\"}}", "tool_choice", "'required'"},
        {"{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens", "at least 1"},
        {"{\"input\":[]}", "input", "non-empty"},
        {"{\"input\":[{\"type\":\"function_call\",\"name\":\"f\"}]}", "input", "call_id"},
        {"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}}", "text.format", "json_schema"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        b = J(refused[i].body);
        int rc = server_resp_translate(b, &x, err, sizeof err, &param);
        CHECK(rc == -1);
        CHECK(param && !strcmp(param, refused[i].param));
        if (!strstr(err, refused[i].words)) {
            fprintf(stderr, "refusal %zu: '%s' does not say '%s'\n", i, err, refused[i].words);
            CHECK(0);
        }
        server_xreq_free(&x);
        json_decref(b);
    }
}

/* ---- writers ---- */

/* The pieces of one generation: thinking, text, two tool calls (the first
 * one's arguments in two pieces). */
static void feed(server_xw *w) {
    w->ops->start(w);
    w->ops->text(w, SERVER_D_REASONING, "Look ", 5);
    w->ops->text(w, SERVER_D_REASONING, "it up.", 6);
    w->ops->text(w, SERVER_D_CONTENT, "Sure.", 5);
    w->ops->tool_open(w, "f");
    w->ops->tool_args(w, "{\"a\": ", 6);
    w->ops->tool_args(w, "1}", 2);
    w->ops->tool_open(w, "g");
    w->ops->tool_args(w, "{}", 2);
    w->finish = SERVER_FIN_STOP;
    w->n_prompt = 10;
    w->n_cached = 4;
    w->n_gen = 9;
    w->ops->finish(w);
}

typedef struct events {
    int n;
    char type[64][64];
    json_t *data[64];
} events;

/* Splits SSE text into events; every event's name must be its data's type. */
static int parse_sse(const char *s, events *ev) {
    memset(ev, 0, sizeof *ev);
    while (*s) {
        const char *end = strstr(s, "\n\n");
        if (!end || ev->n == 64) return -1;
        if (strncmp(s, "event: ", 7)) return -1;
        const char *nl = strchr(s, '\n');
        snprintf(ev->type[ev->n], sizeof ev->type[0], "%.*s", (int)(nl - s - 7), s + 7);
        if (strncmp(nl + 1, "data: ", 6)) return -1;
        json_error_t je;
        json_t *d = json_loadb(nl + 7, (size_t)(end - nl - 7), 0, &je);
        if (!d || strcmp(json_string_value(json_object_get(d, "type")), ev->type[ev->n])) {
            json_decref(d);
            return -1;
        }
        ev->data[ev->n++] = d;
        s = end + 2;
    }
    return 0;
}

static void events_free(events *ev) {
    for (int i = 0; i < ev->n; i++) json_decref(ev->data[i]);
}

static int types_are(const events *ev, const char *const *want, int n) {
    int ok = ev->n == n;
    for (int i = 0; ok && i < n; i++) ok = !strcmp(ev->type[i], want[i]);
    if (!ok) {
        fprintf(stderr, "event types:");
        for (int i = 0; i < ev->n; i++) fprintf(stderr, " %s", ev->type[i]);
        fprintf(stderr, "\n");
    }
    return ok;
}

static void msg_writer(void) {
    server_buf out = {0};
    server_xw w;
    server_xw_init(&w, &server_msg_ops, "msg", "abc", "m", &out);
    feed(&w);
    const char *want_result =
        "{\"id\":\"msg_abc\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":["
        "{\"type\":\"thinking\",\"thinking\":\"Look it up.\",\"signature\":\"\"},"
        "{\"type\":\"text\",\"text\":\"Sure.\"},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_abc_0\",\"name\":\"f\",\"input\":{\"a\":1}},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_abc_1\",\"name\":\"g\",\"input\":{}}],"
        "\"stop_reason\":\"tool_use\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":6,"
        "\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":4,\"output_tokens\":9}}";
    CHECK(same(w.result, want_result, "message"));
    events ev;
    CHECK(parse_sse(out.p, &ev) == 0);
    static const char *const want[] = {"message_start",       "ping",
                                       "content_block_start", "content_block_delta",
                                       "content_block_delta", "content_block_stop",
                                       "content_block_start", "content_block_delta",
                                       "content_block_stop",  "content_block_start",
                                       "content_block_delta", "content_block_delta",
                                       "content_block_stop",  "content_block_start",
                                       "content_block_delta", "content_block_stop",
                                       "message_delta",       "message_stop"};
    CHECK(types_are(&ev, want, (int)(sizeof want / sizeof want[0])));
    /* fold the deltas as a client does */
    json_t *content = json_array();
    server_buf js = {0};
    for (int i = 0; i < ev.n; i++) {
        json_t *d = ev.data[i];
        int idx = (int)json_integer_value(json_object_get(d, "index"));
        if (!strcmp(ev.type[i], "content_block_start")) {
            CHECK(idx == (int)json_array_size(content));
            json_array_append(content, json_object_get(d, "content_block"));
            js.len = 0;
        } else if (!strcmp(ev.type[i], "content_block_delta")) {
            json_t *blk = json_array_get(content, (size_t)idx), *dl = json_object_get(d, "delta");
            const char *t = json_string_value(json_object_get(dl, "type"));
            const char *key = !strcmp(t, "text_delta") ? "text" : !strcmp(t, "thinking_delta") ? "thinking" : NULL;
            if (key) {
                server_buf b = {0};
                server_buf_puts(&b, json_string_value(json_object_get(blk, key)));
                server_buf_puts(&b, json_string_value(json_object_get(dl, key)));
                json_object_set_new(blk, key, json_string(b.p));
                server_buf_free(&b);
            } else {
                CHECK(!strcmp(t, "input_json_delta"));
                server_buf_puts(&js, json_string_value(json_object_get(dl, "partial_json")));
            }
        } else if (!strcmp(ev.type[i], "content_block_stop")) {
            json_t *blk = json_array_get(content, (size_t)idx);
            if (js.len) json_object_set_new(blk, "input", json_loadb(js.p, js.len, 0, NULL));
            js.len = 0;
        }
    }
    server_buf_free(&js);
    CHECK(json_equal(content, json_object_get(w.result, "content")));
    json_decref(content);
    CHECK(same(json_object_get(ev.data[ev.n - 2], "delta"), "{\"stop_reason\":\"tool_use\",\"stop_sequence\":null}",
               "message_delta"));
    events_free(&ev);
    /* not streamed: the same object, nothing written */
    server_xw w2;
    server_xw_init(&w2, &server_msg_ops, "msg", "abc", "m", NULL);
    feed(&w2);
    CHECK(json_equal(w.result, w2.result));
    server_xw_free(&w2);
    server_xw_free(&w);
    /* stop reasons */
    static const struct {
        int fin;
        const char *stop, *reason;
    } ends[] = {{SERVER_FIN_LENGTH, NULL, "max_tokens"},
                {SERVER_FIN_STOP, "END", "stop_sequence"},
                {SERVER_FIN_STOP, NULL, "end_turn"},
                {SERVER_FIN_REPEAT, NULL, "repetition"},
                {SERVER_FIN_BUDGET, NULL, "thinking_budget"}};
    for (int i = 0; i < (int)(sizeof ends / sizeof ends[0]); i++) {
        server_xw_init(&w, &server_msg_ops, "msg", "x", "m", NULL);
        w.ops->text(&w, SERVER_D_CONTENT, "hi", 2);
        w.finish = ends[i].fin;
        w.stop_seq = ends[i].stop;
        w.ops->finish(&w);
        CHECK(!strcmp(json_string_value(json_object_get(w.result, "stop_reason")), ends[i].reason));
        json_t *ss = json_object_get(w.result, "stop_sequence");
        CHECK(ends[i].stop ? !strcmp(json_string_value(ss), ends[i].stop) : json_is_null(ss));
        server_xw_free(&w);
    }
    server_buf_free(&out);
}

static void resp_writer(void) {
    server_buf out = {0};
    server_xw w;
    server_xw_init(&w, &server_resp_ops, "resp", "abc", "m", &out);
    w.echo = J("{\"instructions\":\"Be brief.\",\"input\":\"x\"}");
    feed(&w);
    json_t *output = json_object_get(w.result, "output");
    CHECK(same(output,
               "[{\"type\":\"reasoning\",\"id\":\"rs_abc_0\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\","
               "\"text\":\"Look it up.\"}]},"
               "{\"type\":\"message\",\"id\":\"msg_abc_1\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":"
               "[{\"type\":\"output_text\",\"text\":\"Sure.\",\"annotations\":[]}]},"
               "{\"type\":\"function_call\",\"id\":\"fc_abc_2\",\"call_id\":\"call_abc_0\",\"name\":\"f\","
               "\"arguments\":\"{\\\"a\\\": 1}\",\"status\":\"completed\"},"
               "{\"type\":\"function_call\",\"id\":\"fc_abc_3\",\"call_id\":\"call_abc_1\",\"name\":\"g\","
               "\"arguments\":\"{}\",\"status\":\"completed\"}]",
               "output"));
    CHECK(!strcmp(json_string_value(json_object_get(w.result, "status")), "completed"));
    CHECK(!strcmp(json_string_value(json_object_get(w.result, "instructions")), "Be brief."));
    CHECK(same(json_object_get(w.result, "usage"),
               "{\"input_tokens\":10,\"input_tokens_details\":{\"cached_tokens\":4},\"output_tokens\":9,"
               "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":19}",
               "usage"));
    events ev;
    CHECK(parse_sse(out.p, &ev) == 0);
    static const char *const want[] = {"response.created",
                                       "response.in_progress",
                                       "response.output_item.added",
                                       "response.content_part.added",
                                       "response.reasoning_text.delta",
                                       "response.reasoning_text.delta",
                                       "response.reasoning_text.done",
                                       "response.content_part.done",
                                       "response.output_item.done",
                                       "response.output_item.added",
                                       "response.content_part.added",
                                       "response.output_text.delta",
                                       "response.output_text.done",
                                       "response.content_part.done",
                                       "response.output_item.done",
                                       "response.output_item.added",
                                       "response.function_call_arguments.delta",
                                       "response.function_call_arguments.delta",
                                       "response.function_call_arguments.done",
                                       "response.output_item.done",
                                       "response.output_item.added",
                                       "response.function_call_arguments.delta",
                                       "response.function_call_arguments.done",
                                       "response.output_item.done",
                                       "response.completed"};
    CHECK(types_are(&ev, want, (int)(sizeof want / sizeof want[0])));
    /* sequence numbers; output indexes; each item done as in the result;
     * deltas join into the done text */
    server_buf acc = {0};
    for (int i = 0; i < ev.n; i++) {
        json_t *d = ev.data[i];
        CHECK(json_integer_value(json_object_get(d, "sequence_number")) == i);
        const char *t = ev.type[i];
        if (strstr(t, ".delta")) server_buf_puts(&acc, json_string_value(json_object_get(d, "delta")));
        if (!strcmp(t, "response.output_text.done") || !strcmp(t, "response.reasoning_text.done")) {
            CHECK(acc.len == strlen(json_string_value(json_object_get(d, "text"))));
            CHECK(!memcmp(acc.p, json_string_value(json_object_get(d, "text")), acc.len));
        }
        if (!strcmp(t, "response.function_call_arguments.done")) {
            CHECK(!memcmp(acc.p, json_string_value(json_object_get(d, "arguments")), acc.len));
        }
        if (!strcmp(t, "response.output_item.done")) {
            size_t k = (size_t)json_integer_value(json_object_get(d, "output_index"));
            CHECK(json_equal(json_object_get(d, "item"), json_array_get(output, k)));
            acc.len = 0;
        }
    }
    server_buf_free(&acc);
    CHECK(json_equal(json_object_get(ev.data[ev.n - 1], "response"), w.result));
    CHECK(
        !strcmp(json_string_value(json_object_get(json_object_get(ev.data[0], "response"), "status")), "in_progress"));
    events_free(&ev);
    server_xw w2;
    server_xw_init(&w2, &server_resp_ops, "resp", "abc", "m", NULL);
    w2.echo = J("{\"instructions\":\"Be brief.\",\"input\":\"x\"}");
    feed(&w2);
    /* created_at may differ by a second between the two */
    json_object_del(w.result, "created_at");
    json_object_del(w2.result, "created_at");
    CHECK(json_equal(w.result, w2.result));
    server_xw_free(&w2);
    server_xw_free(&w);
    /* a length cut is incomplete */
    out.len = 0;
    server_xw_init(&w, &server_resp_ops, "resp", "x", "m", &out);
    w.ops->start(&w);
    w.ops->text(&w, SERVER_D_CONTENT, "hi", 2);
    w.finish = SERVER_FIN_LENGTH;
    w.ops->finish(&w);
    CHECK(!strcmp(json_string_value(json_object_get(w.result, "status")), "incomplete"));
    CHECK(same(json_object_get(w.result, "incomplete_details"), "{\"reason\":\"max_output_tokens\"}", "incomplete"));
    CHECK(strstr(out.p, "event: response.incomplete\n") != NULL);
    server_xw_free(&w);
    /* the repetition guard and the thinking budget: incomplete, each with its reason */
    for (int i = 0; i < 2; i++) {
        out.len = 0;
        server_xw_init(&w, &server_resp_ops, "resp", "x", "m", &out);
        w.ops->start(&w);
        w.ops->text(&w, SERVER_D_CONTENT, "hi", 2);
        w.finish = i ? SERVER_FIN_BUDGET : SERVER_FIN_REPEAT;
        w.ops->finish(&w);
        CHECK(!strcmp(json_string_value(json_object_get(w.result, "status")), "incomplete"));
        CHECK(same(json_object_get(w.result, "incomplete_details"),
                   i ? "{\"reason\":\"thinking_budget\"}" : "{\"reason\":\"repetition\"}", "incomplete"));
        CHECK(strstr(out.p, "event: response.incomplete\n") != NULL);
        server_xw_free(&w);
    }
    /* a failure mid-stream: an error event, then response.failed */
    out.len = 0;
    server_xw_init(&w, &server_resp_ops, "resp", "x", "m", &out);
    w.ops->start(&w);
    w.ops->text(&w, SERVER_D_CONTENT, "hi", 2);
    w.ops->fail(&w, "the model failed");
    CHECK(parse_sse(out.p, &ev) == 0);
    CHECK(!strcmp(ev.type[ev.n - 2], "error") && !strcmp(ev.type[ev.n - 1], "response.failed"));
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(ev.data[ev.n - 1], "response"), "status")),
                  "failed"));
    events_free(&ev);
    server_xw_free(&w);
    server_buf_free(&out);
}

int main(void) {
    msg_requests();
    resp_requests();
    msg_writer();
    resp_writer();
    return t_done();
}
