/* The server's output pipeline (src/server/deltas.c) on a token stream from
 * the stories260K tokenizer: <think> becomes reasoning, <tool_call>{json}
 * (or Qwen3.5's <function=...><parameter=...> form) becomes a tool call,
 * stop strings cut the text (even across tokens) and cancel the request,
 * and text that only looks like a tag survives.
 *
 * Tool calls streamed in parts (OpenAI streaming): each case's text is fed
 * cut at every byte offset, and one byte at a time; the header must come
 * first, the pieces must join into the arguments' text and be out before
 * the closing tag arrives, and blocks that are not calls must come back as
 * content with nothing streamed. */
#include "server/buf.h"
#include "server/deltas.h"
#include "server/prompt.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define MAX_CALLS 4

typedef struct sink {
    server_buf content, reasoning;
    json_t *tools; /* whole calls (on_tool) */
    /* calls in parts (on_tool_part) */
    int n; /* calls opened */
    char name[MAX_CALLS][32];
    server_buf args[MAX_CALLS];
    int pieces[MAX_CALLS];
    int bad_order;                                 /* a header out of turn, a piece for a call not open */
    int bad_utf8;                                  /* a piece ending inside a character */
    size_t fed;                                    /* bytes of text fed so far */
    size_t head_at[MAX_CALLS], last_at[MAX_CALLS]; /* fed when the header / last piece went out */
} sink;

static void on_text(server_gen *g, int kind, const char *s, size_t n, void *user) {
    sink *k = user;
    server_buf_put(kind == SERVER_D_REASONING ? &k->reasoning : &k->content, s, n);
}

static void on_tool(server_gen *g, int index, json_t *call, void *user) {
    sink *k = user;
    json_array_append(k->tools, call);
}

/* 1 when s[0..n) is whole UTF-8 characters. */
static int whole_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t need = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
        if (!need || i + need > n) return 0;
        for (size_t j = 1; j < need; j++)
            if (((unsigned char)s[i + j] & 0xC0) != 0x80) return 0;
        i += need;
    }
    return 1;
}

static void on_tool_part(server_gen *g, int index, const char *name, const char *args, size_t n, void *user) {
    sink *k = user;
    if (name) {
        if (index != k->n || index >= MAX_CALLS || n) {
            k->bad_order = 1;
            return;
        }
        snprintf(k->name[index], sizeof k->name[index], "%s", name);
        k->head_at[index] = k->fed;
        k->n++;
        return;
    }
    if (index != k->n - 1 || index < 0) {
        k->bad_order = 1;
        return;
    }
    if (!whole_utf8(args, n)) k->bad_utf8 = 1;
    server_buf_put(&k->args[index], args, n);
    k->pieces[index]++;
    k->last_at[index] = k->fed;
}

/* Runs text (as tokens) through a finished request and the pipeline.  The
 * SentencePiece vocabulary adds a space before the text, so outputs begin
 * with one. */
/* Feeds the tokens of text (less BOS) as a generation ending with fin;
 * returns what the pipeline made of it. */
static int tokens(server_gen *g, kiln_model *m, const char *text, int fin) {
    int32_t n = 0;
    int32_t *ids = server_tokenize(m, text, 0, &n);
    int over = 0;
    for (int32_t i = 1; i < n && !over; i++) { /* skip BOS */
        gen_token t = {.id = ids[i]};
        over = server_gen_token(g, &t);
    }
    free(ids);
    if (!over) server_gen_end(g, fin);
    return g->finish;
}

/* The tools the request offers, for the cases that need schemas. */
static json_t *g_tools;
/* feed's pipeline reads the harmony format (a gpt-oss vocabulary's) */
static int g_harmony;
/* feed's pipeline reads calls in this form (callfmt.h) */
static int g_fmt;

static int run(kiln_model *m, const char *text, const char *stop, int think, sink *k) {
    memset(k, 0, sizeof *k);
    k->tools = json_array();
    server_gen g;
    server_gen_init(&g, m, think);
    server_gen_tools(&g, g_tools);
    json_t *stops = stop ? json_pack("[s]", stop) : NULL;
    g.stops = stops;
    g.on_text = on_text;
    g.on_tool = on_tool;
    g.user = k;
    int fin = tokens(&g, m, text, SERVER_FIN_LENGTH);
    server_gen_free(&g);
    json_decref(stops); /* the pipeline borrows the stop list */
    return fin;
}

static const char *str(server_buf *b) { return b->p ? b->p : ""; }

static void done(sink *k) {
    server_buf_free(&k->content);
    server_buf_free(&k->reasoning);
    json_decref(k->tools);
    for (int i = 0; i < MAX_CALLS; i++) server_buf_free(&k->args[i]);
}

/* Feeds text straight to the tag parser (no tokens): in two pieces cut at
 * `at`, or one byte at a time when at is (size_t)-1; parts picks the sink
 * that takes calls in parts. */
static void feed(kiln_model *m, const char *text, size_t at, int parts, sink *k) {
    memset(k, 0, sizeof *k);
    k->tools = json_array();
    server_gen g;
    server_gen_init(&g, m, 0);
    server_gen_tools(&g, g_tools);
    g.harmony = g_harmony;
    server_gen_format(&g, g_fmt);
    g.on_text = on_text;
    g.on_tool = on_tool;
    if (parts) g.on_tool_part = on_tool_part;
    g.user = k;
    size_t len = strlen(text);
    if (at == (size_t)-1) {
        for (size_t i = 0; i < len; i++) {
            k->fed = i + 1;
            server_gen_text(&g, text + i, 1, 0);
        }
    } else {
        k->fed = at;
        server_gen_text(&g, text, at, 0);
        k->fed = len;
        server_gen_text(&g, text + at, len - at, 0);
    }
    server_gen_text(&g, "", 0, 1);
    CHECK(g.n_tools == k->n + (int)json_array_size(k->tools));
    server_gen_free(&g);
}

typedef struct tcase {
    const char *text;    /* model output */
    const char *content; /* what stays content */
    int n;               /* calls */
    const char *name[2];
    const char *args[2]; /* the text the pieces join into */
    int early;           /* the arguments are out before </tool_call> arrives */
    int many[2];         /* fed bytewise, they come in many pieces (not when before the name) */
} tcase;

/* Streamed in parts at every cut; the whole-call sink agrees. */
static void check_parts(kiln_model *m, const tcase *c) {
    size_t len = strlen(c->text);
    size_t close[2] = {len, len};
    const char *p = c->text;
    for (int i = 0; i < c->n && (p = strstr(p, "</tool_call>")); i++, p++) close[i] = (size_t)(p - c->text);
    int fails = 0;
    for (size_t at = 0; at <= len + 1 && fails < 3; at++) {
        int bytewise = at == len + 1;
        sink k;
        feed(m, c->text, bytewise ? (size_t)-1 : at, 1, &k);
        int ok = !strcmp(str(&k.content), c->content) && k.n == c->n && !k.bad_order && !k.bad_utf8 &&
                 json_array_size(k.tools) == 0;
        for (int i = 0; ok && i < c->n; i++) {
            ok = !strcmp(k.name[i], c->name[i]) && !strcmp(str(&k.args[i]), c->args[i]);
            if (!bytewise) continue;
            /* byte by byte: out before the closing tag, and in pieces */
            ok = ok && k.head_at[i] <= close[i] && (!c->early || k.last_at[i] <= close[i]);
            if (c->many[i]) ok = ok && k.pieces[i] > 3;
        }
        CHECKF(ok, "cut %s%zu of '%s': content '%s', %d calls (%s '%s', %d pieces), order %d utf8 %d",
               bytewise ? "bytewise " : "", at, c->text, str(&k.content), k.n, k.name[0], str(&k.args[0]), k.pieces[0],
               k.bad_order, k.bad_utf8);
        fails += !ok;
        done(&k);
    }
    sink w;
    feed(m, c->text, len, 0, &w);
    CHECKF(!strcmp(str(&w.content), c->content) && (int)json_array_size(w.tools) == c->n, "whole: '%s'", c->text);
    for (int i = 0; i < c->n && i < (int)json_array_size(w.tools); i++) {
        json_t *call = json_array_get(w.tools, (size_t)i);
        json_t *want = json_loads(c->args[i], 0, NULL);
        CHECK(!strcmp(json_string_value(json_object_get(call, "name")), c->name[i]));
        CHECKF(json_equal(json_object_get(call, "arguments"), want), "whole arguments of '%s'", c->text);
        json_decref(want);
    }
    done(&w);
}

/* A block that is not a call: content at every cut, nothing streamed. */
static void check_not_call(kiln_model *m, const char *text) {
    size_t len = strlen(text);
    int fails = 0;
    for (size_t at = 0; at <= len + 1 && fails < 3; at++) {
        sink k;
        feed(m, text, at == len + 1 ? (size_t)-1 : at, 1, &k);
        int ok = !strcmp(str(&k.content), text) && k.n == 0 && !k.bad_order && json_array_size(k.tools) == 0;
        CHECKF(ok, "cut %zu of '%s': content '%s', %d calls", at, text, str(&k.content), k.n);
        fails += !ok;
        done(&k);
    }
}

static const tcase k_cases[] = {
    /* an object, name first, with every kind of value and escapes kept as written */
    {"Sure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, -2.5e+3, "
     "true, null, 0], \"note\": \"caf\\u00e9 \\\"x\\\" \xc3\xa9\"}}\n</tool_call>",
     "Sure. ",
     1,
     {"get_weather"},
     {"{\"city\": \"Paris\", \"days\": [1, -2.5e+3, true, null, 0], \"note\": \"caf\\u00e9 \\\"x\\\" \xc3\xa9\"}"},
     1,
     {1}},
    /* arguments before the name; a second call whose arguments are a string
     * of JSON (its decoded characters are streamed, surrogate pair included) */
    {"<tool_call>{\"arguments\": {\"a\": {\"b\": []}, \"n\": 0.5}, \"name\": \"first\"}</tool_call> and "
     "<tool_call>{\"name\":\"second\",\"arguments\":\"{\\\"q\\\": \\\"\\u00e9\\ud83d\\ude00\\\", \\\"k\\\": [1]}\"}"
     "</tool_call>",
     " and ",
     2,
     {"first", "second"},
     {"{\"a\": {\"b\": []}, \"n\": 0.5}", "{\"q\": \"\xc3\xa9\xf0\x9f\x98\x80\", \"k\": [1]}"},
     1,
     {0, 1}},
    /* no arguments: {} at the closing tag, as the whole call has */
    {"<tool_call>{\"name\": \"ping\"}</tool_call>", "", 1, {"ping"}, {"{}"}, 0, {0}},
};

static const char *const k_not_calls[] = {
    "a <tool_call>not json</tool_call> b",
    "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>",
    "<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\" \"y\": 2}</tool_call>", /* no comma after the name */
    "<tool_call>{\"nam\": \"f\", \"arguments\": {\"x\": 1}}</tool_call>",
    "<tool_call>[{\"name\": \"f\"}]</tool_call>",
    "<tool_call>{\"name\": \"f\\ud800\", \"arguments\": {}}</tool_call>", /* lone surrogate */
    "<tool_call>{\"name\": \"f\\u0000\", \"arguments\": {}}</tool_call>",
    "<tool_call>{\"arguments\": {\"x\": 01}, \"name\": \"f\"}</tool_call>",
    "<tool_call>{\"arguments\": {\"x\": \"\xc0\xaf\"}, \"name\": \"f\"}</tool_call>", /* overlong UTF-8 */
};

/* The harmony format (gpt-oss): the analysis channel is reasoning, final
 * and commentary are content, headers are never shown, a message to
 * functions.NAME is a call (its body the arguments, streamed as they come;
 * <|call|> ends the generation, so the text may just stop), at every cut
 * and byte by byte, with and without the parts sink. */
static void harmony(kiln_model *m) {
    static const struct {
        const char *text, *reasoning, *content, *name, *args;
    } cases[] = {
        {"<|channel|>analysis<|message|>Think it over.<|end|><|start|>assistant<|channel|>final<|message|>The "
         "answer.",
         "Think it over.", "The answer.", NULL, NULL},
        {"<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
         "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris \u00e9\"}",
         "Need the weather.", "", "get_weather", "{\"city\": \"Paris \u00e9\"}"},
        /* the recipient in front of the channel; a preamble on commentary */
        {"<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant to=functions.ping<|channel|>commentary "
         "json<|message|>{}<|call|>",
         "", "Checking.", "ping", "{}"},
        /* a message that starts without <|end|> before the next header */
        {"<|channel|>analysis<|message|>a<|channel|>final<|message|>b<|return|>", "a", "b", NULL, NULL},
    };
    g_harmony = 1;
    g_tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}]", 0, NULL);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const size_t len = strlen(cases[c].text);
        int fails = 0;
        for (int parts = 0; parts <= 1; parts++)
            for (size_t at = 0; at <= len + 1 && fails < 3; at++) {
                sink k;
                feed(m, cases[c].text, at == len + 1 ? (size_t)-1 : at, parts, &k);
                const int n = parts ? k.n : (int)json_array_size(k.tools);
                int ok = !strcmp(str(&k.reasoning), cases[c].reasoning) && !strcmp(str(&k.content), cases[c].content) &&
                         n == (cases[c].name ? 1 : 0) && !k.bad_order && !k.bad_utf8;
                if (ok && cases[c].name && parts)
                    ok = !strcmp(k.name[0], cases[c].name) && !strcmp(str(&k.args[0]), cases[c].args);
                if (ok && cases[c].name && !parts) {
                    json_t *call = json_array_get(k.tools, 0), *want = json_loads(cases[c].args, 0, NULL);
                    ok = !strcmp(json_string_value(json_object_get(call, "name")), cases[c].name) &&
                         json_equal(json_object_get(call, "arguments"), want);
                    json_decref(want);
                }
                CHECKF(ok, "harmony case %zu, cut %zu%s: reasoning '%s', content '%s', %d calls ('%s')", c, at,
                       parts ? " in parts" : "", str(&k.reasoning), str(&k.content), n, str(&k.args[0]));
                fails += !ok;
                done(&k);
            }
    }
    /* think: false and no tools (Ollama): no split, but headers still go */
    sink k;
    memset(&k, 0, sizeof k);
    k.tools = json_array();
    server_gen g;
    server_gen_init(&g, m, 0);
    g.harmony = 1;
    g.split_think = g.split_tools = 0;
    g.on_text = on_text;
    g.user = &k;
    server_gen_text(&g, cases[0].text, strlen(cases[0].text), 0);
    server_gen_text(&g, "", 0, 1);
    CHECKF(!k.reasoning.len && !strcmp(str(&k.content), "Think it over.The answer."), "no split: '%s'",
           str(&k.content));
    server_gen_free(&g);
    done(&k);
    json_decref(g_tools);
    g_tools = NULL;
    g_harmony = 0;
}

/* The other families' call forms (callfmt.c), at every cut and byte by
 * byte, with and without the parts sink (these forms send whole calls):
 * the calls, and the text that is not one kept as content. */
static void call_forms(kiln_model *m) {
    static const struct {
        int fmt;
        const char *text, *reasoning, *content, *calls; /* calls: [{name, arguments}] as JSON */
    } cases[] = {
        /* Llama 3.x: a call opens the reply; several with ';' between */
        {SERVER_CF_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", "",
         "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"},
        {SERVER_CF_LLAMA3,
         " \n{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {}}; {\"name\": \"get_time\", "
         "\"arguments\": \"{\\\"tz\\\": 1}\"}",
         "", "",
         "[{\"name\": \"get_weather\", \"arguments\": {}}, {\"name\": \"get_time\", \"arguments\": {\"tz\": 1}}]"},
        {SERVER_CF_LLAMA3, "{\"name\": \"unknown\", \"parameters\": {}}", "",
         "{\"name\": \"unknown\", \"parameters\": {}}", "[]"},
        {SERVER_CF_LLAMA3, "{\"answer\": 42}", "", "{\"answer\": 42}", "[]"},
        {SERVER_CF_LLAMA3, "Sure: {\"name\": \"get_weather\", \"parameters\": {}}", "",
         "Sure: {\"name\": \"get_weather\", \"parameters\": {}}", "[]"},
        {SERVER_CF_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Pa", "",
         "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Pa", "[]"},
        {SERVER_CF_LLAMA3, "<|python_tag|>brave_search.call(query=\"weather \\\"Paris\\\"\", n=3, safe=True)", "", "",
         "[{\"name\": \"brave_search\", \"arguments\": {\"query\": \"weather \\\"Paris\\\"\", \"n\": 3, \"safe\": "
         "true}}]"},
        {SERVER_CF_LLAMA3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", "", "",
         "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]"},
        {SERVER_CF_LLAMA3, "<|python_tag|>print(1 + 1)", "", "",
         "[{\"name\": \"python\", \"arguments\": {\"code\": \"print(1 + 1)\"}}]"},
        /* Mistral: the JSON array, and the newer NAME[ARGS] form */
        {SERVER_CF_MISTRAL,
         "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"a1b2c3d4e\"}]", "",
         "", "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"},
        {SERVER_CF_MISTRAL,
         "Let me check.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}", "",
         "Let me check.",
         "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": "
         "{}}]"},
        {SERVER_CF_MISTRAL, "[TOOL_CALLS]get_weather[CALL_ID]x1[ARGS]{\"city\": \"Rome\"}", "", "",
         "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]"},
        {SERVER_CF_MISTRAL, "[TOOL_CALLS] not a call", "", "[TOOL_CALLS] not a call", "[]"},
        {SERVER_CF_MISTRAL, "Type [TOOL_CALLS", "", "Type [TOOL_CALLS", "[]"},
        /* Gemma 4 */
        {SERVER_CF_GEMMA4,
         "<|tool_call>call:get_weather{city:<|\"|>Paris, \"FR\"<|\"|>,days:3,opts:{metric:true,tags:[<|\"|>a<|\"|>,"
         "null,-1.5]}}<tool_call|>",
         "", "",
         "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris, \\\"FR\\\"\", \"days\": 3, \"opts\": "
         "{\"metric\": true, \"tags\": [\"a\", null, -1.5]}}}]"},
        {SERVER_CF_GEMMA4, "Done.<|tool_call>call:x{}<tool_call|><|tool_call>call:y{a:1}<tool_call|>", "", "Done.",
         "[{\"name\": \"x\", \"arguments\": {}}, {\"name\": \"y\", \"arguments\": {\"a\": 1}}]"},
        {SERVER_CF_GEMMA4, "<|tool_call>call:get_weather{city:Paris}<tool_call|>!", "",
         "<|tool_call>call:get_weather{city:Paris}<tool_call|>!", "[]"},
        /* the forms' own reasoning blocks */
        {SERVER_CF_GEMMA4, "<|channel>thought\nLet me call.<channel|><|tool_call>call:get_time{}<tool_call|>",
         "\nLet me call.", "", "[{\"name\": \"get_time\", \"arguments\": {}}]"},
        {SERVER_CF_MISTRAL, "[THINK]Hmm.[/THINK]The answer.", "Hmm.", "The answer.", "[]"},
        /* DeepSeek: V3 / R1 with fenced arguments, V3.1 bare; a forced
         * call's text ends after the arguments */
        {SERVER_CF_DEEPSEEK,
         "<think>hm</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
         "{\"city\": "
         "\"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}"
         "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "hm", "",
         "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": "
         "{}}]"},
        {SERVER_CF_DEEPSEEK,
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜>"
         "<｜tool▁calls▁end｜>",
         "", "", "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"},
        {SERVER_CF_DEEPSEEK,
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}",
         "", "", "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"},
        {SERVER_CF_DEEPSEEK, "a<｜tool▁calls▁begin｜>oops<｜tool▁calls▁end｜>b", "",
         "a<｜tool▁calls▁begin｜>oops<｜tool▁calls▁end｜>b", "[]"},
        /* Phi-4-mini and Nemotron Nano 2: a JSON array between tags */
        {SERVER_CF_PHI4,
         "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]<|/tool_call|>", "", "",
         "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"},
        {SERVER_CF_PHI4, "functools[{\"name\": \"get_time\", \"arguments\": {}}]", "", "",
         "[{\"name\": \"get_time\", \"arguments\": {}}]"},
        {SERVER_CF_PHI4, "Use functools.partial here.", "", "Use functools.partial here.", "[]"},
        {SERVER_CF_NEMOTRON,
         "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", "
         "\"arguments\": {}}]</TOOLCALL>",
         "", "",
         "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": "
         "{}}]"},
        {SERVER_CF_NEMOTRON, "<TOOLCALL>nope</TOOLCALL> and", "", "<TOOLCALL>nope</TOOLCALL> and", "[]"},
        /* the <tool_call> form's markers mean nothing to another form */
        {SERVER_CF_MISTRAL, "<tool_call>{\"name\": \"x\"}</tool_call>", "", "<tool_call>{\"name\": \"x\"}</tool_call>",
         "[]"},
    };
    g_tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}, {\"type\": "
                         "\"function\", \"function\": {\"name\": \"get_time\"}}]",
                         0, NULL);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        g_fmt = cases[c].fmt;
        json_t *want = json_loads(cases[c].calls, 0, NULL);
        CHECKF(want, "case %zu: bad expectation", c);
        const size_t len = strlen(cases[c].text);
        int fails = 0;
        for (int parts = 0; parts <= 1; parts++)
            for (size_t at = 0; at <= len + 1 && fails < 3; at++) {
                sink k;
                feed(m, cases[c].text, at == len + 1 ? (size_t)-1 : at, parts, &k);
                const int ok = !strcmp(str(&k.reasoning), cases[c].reasoning) &&
                               !strcmp(str(&k.content), cases[c].content) && k.n == 0 && json_equal(k.tools, want);
                char *got = json_dumps(k.tools, JSON_COMPACT);
                CHECKF(ok, "%s case %zu, cut %zu%s: reasoning '%s', content '%s', calls %s", server_callfmt_name(g_fmt),
                       c, at, parts ? " in parts" : "", str(&k.reasoning), str(&k.content), got);
                free(got);
                fails += !ok;
                done(&k);
            }
        json_decref(want);
    }
    g_fmt = SERVER_CF_TAG;
    json_decref(g_tools);
    g_tools = NULL;
}

/* Each family's form from its chat template (tests/data/templates). */
static void call_form_detect(void) {
    static const struct {
        const char *file;
        int fmt;
    } cases[] = {
        {"llama3.2", SERVER_CF_LLAMA3}, {"mistral-v3", SERVER_CF_MISTRAL}, {"deepseek-r1-distill", SERVER_CF_DEEPSEEK},
        {"qwen3", SERVER_CF_TAG},       {"qwen3.5", SERVER_CF_TAG},        {"chatml", SERVER_CF_TAG},
        {"phi4", SERVER_CF_TAG},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, "data/templates/%s.jinja", cases[i].file);
        size_t n;
        char *t = t_read_file(path, &n);
        CHECKF(t, "read %s", path);
        const int fmt = t ? server_callfmt_detect(t, NULL) : -1;
        CHECKF(fmt == cases[i].fmt, "%s: form %s", cases[i].file, server_callfmt_name(fmt));
        free(t);
    }
    CHECK(server_callfmt_detect("{{ '<|tool_call>call:' + name }}<tool_call|>", NULL) == SERVER_CF_GEMMA4);
    CHECK(server_callfmt_detect("<TOOLCALL>{{ tool_calls | tojson }}</TOOLCALL>", NULL) == SERVER_CF_NEMOTRON);
    CHECK(server_callfmt_detect("{{ '<|tool_call|>' }}", NULL) == SERVER_CF_PHI4);
    CHECK(server_callfmt_detect(NULL, NULL) == SERVER_CF_TAG);
}

/* The XML form's values typed by the offered tool's schema (xmlcall.c),
 * whole and streamed: a schema string stays the text, streamed as it
 * comes; other types are read as JSON where they fit. */
static void xml_typed(kiln_model *m) {
    g_tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"book\", \"parameters\": {"
                         "\"type\": \"object\", \"properties\": {"
                         "\"zip\": {\"type\": \"string\"}, \"id\": {\"type\": \"string\"},"
                         "\"days\": {\"type\": \"integer\"}, \"nights\": {\"type\": \"integer\"},"
                         "\"ratio\": {\"type\": \"number\"}, \"flag\": {\"type\": \"boolean\"},"
                         "\"maybe\": {\"type\": [\"string\", \"null\"]}, \"none\": {\"type\": \"string\"},"
                         "\"opts\": {\"type\": \"object\"}, \"tags\": {\"type\": \"array\"},"
                         "\"raw\": {\"type\": \"string\"}, \"word\": {\"type\": \"integer\"},"
                         "\"pick\": {\"enum\": [\"1\", \"2\"]},"
                         "\"either\": {\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\"}]}}}}},"
                         "{\"name\": \"other\", \"input_schema\": {\"properties\": {\"n\": {\"type\": \"string\"}}}}]",
                         0, NULL);
    CHECK(g_tools != NULL);
    const char *text = "<tool_call>\n<function=book>\n"
                       "<parameter=zip>\n01234\n</parameter>\n<parameter=id>\n42\n</parameter>\n"
                       "<parameter=days>\n3\n</parameter>\n<parameter=nights>\n2.0\n</parameter>\n"
                       "<parameter=ratio>\n2\n</parameter>\n<parameter=flag>\nTrue\n</parameter>\n"
                       "<parameter=maybe>\nnull\n</parameter>\n<parameter=none>\nnull\n</parameter>\n"
                       "<parameter=opts>\n{\"a\": [1]}\n</parameter>\n<parameter=tags>\n[\"x\"]\n</parameter>\n"
                       "<parameter=raw>\n{\"b\": \"\\\" x\"}\n\ttwo \xc3\xa9\n</parameter>\n"
                       "<parameter=word>\nmany\n</parameter>\n<parameter=pick>\n1\n</parameter>\n"
                       "<parameter=either>\n7\n</parameter>\n<parameter=extra>\n7\n</parameter>\n"
                       "</function>\n</tool_call>";
    const char *args = "{\"zip\": \"01234\", \"id\": \"42\", \"days\": 3, \"nights\": 2, \"ratio\": 2, "
                       "\"flag\": true, \"maybe\": null, \"none\": \"null\", \"opts\": {\"a\": [1]}, "
                       "\"tags\": [\"x\"], "
                       "\"raw\": \"{\\\"b\\\": \\\"\\\\\\\" x\\\"}\\n\\ttwo \xc3\xa9\", "
                       "\"word\": \"many\", \"pick\": \"1\", \"either\": 7, \"extra\": 7}";
    const tcase c = {text, "", 1, {"book"}, {args}, 1, {1}};
    check_parts(m, &c);
    /* a string streams before its closing tag; the held-back newline and
     * a partial closing tag never leak into it (the last piece is "b") */
    sink k;
    const char *cut = "<tool_call>\n<function=other>\n<parameter=n>\nab\n</param";
    feed(m, cut, (size_t)-1, 1, &k);
    CHECKF(k.n == 1 && !strcmp(k.name[0], "other") && !strcmp(str(&k.args[0]), "{\"n\": \"ab") &&
               k.last_at[0] == strlen(cut) - 8,
           "cut string: %d, '%s' (last piece at %zu)", k.n, str(&k.args[0]), k.last_at[0]);
    done(&k);
    /* a function name that breaks the form before it is settled: text */
    check_not_call(m, "<tool_call>\n<function=bo\nok>\n</function>\n</tool_call>");
    check_not_call(m, "<tool_call>\n<func>\n</tool_call>");
    json_decref(g_tools);
    g_tools = NULL;
}

int main(void) {
    kiln_model *m = NULL;
    CHECK(kiln_model_load("../models/stories260K.gguf", NULL, &m) == KILN_OK);
    if (!m) return t_done();
    sink k;

    int fin = run(m,
                  "Hi <think>let me see</think>The answer. <tool_call>{\"name\": \"get\", \"arguments\": {\"x\": 1}}"
                  "</tool_call> Bye",
                  NULL, 0, &k);
    CHECK(fin == SERVER_FIN_LENGTH);
    CHECKF(!strcmp(str(&k.reasoning), "let me see"), "reasoning '%s'", str(&k.reasoning));
    CHECKF(!strcmp(str(&k.content), " Hi The answer.  Bye"), "content '%s'", str(&k.content));
    CHECK(json_array_size(k.tools) == 1);
    json_t *call = json_array_get(k.tools, 0);
    CHECK(!strcmp(json_string_value(json_object_get(call, "name")), "get"));
    CHECK(json_integer_value(json_object_get(json_object_get(call, "arguments"), "x")) == 1);
    done(&k);

    /* a prompt that opened <think> starts in reasoning */
    run(m, "hmm, maybe</think>yes", NULL, 1, &k);
    CHECK(!strcmp(str(&k.reasoning), " hmm, maybe") && !strcmp(str(&k.content), "yes"));
    done(&k);

    /* blank space after </think> is not content (the answer begins at its
     * first other byte; later blank space is the answer's), whole or fed
     * a byte at a time; before a call it leaves no content at all */
    for (size_t at = 0; at < 2; at++) {
        feed(m, "<think>a</think>\n\n \tb \n c", at ? (size_t)-1 : 12, 0, &k);
        CHECKF(!strcmp(str(&k.reasoning), "a") && !strcmp(str(&k.content), "b \n c"), "content '%s'", str(&k.content));
        done(&k);
        feed(m, "<think>a</think>\n\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", at ? (size_t)-1 : 17,
             0, &k);
        CHECKF(!k.content.len && json_array_size(k.tools) == 1, "content '%s'", str(&k.content));
        done(&k);
    }
    feed(m, "x\n\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n\ny", (size_t)-1, 0, &k);
    CHECKF(!strcmp(str(&k.content), "x\n\n\n\ny"), "content '%s'", str(&k.content));
    done(&k);

    /* a stop string spanning tokens ends the text before it */
    fin = run(m, "Once upon a time there was a dog.", "time there", 0, &k);
    CHECK(fin == SERVER_FIN_STOP);
    CHECKF(!strcmp(str(&k.content), " Once upon a "), "content '%s'", str(&k.content));
    done(&k);

    /* a partial stop string at the end is released */
    fin = run(m, "The cat sat on the ma", "mat.", 0, &k);
    CHECK(fin == SERVER_FIN_LENGTH && !strcmp(str(&k.content), " The cat sat on the ma"));
    done(&k);

    /* a broken tool call stays text; a lone '<' is kept */
    run(m, "a <tool_call>not json</tool_call> b < c", NULL, 0, &k);
    CHECKF(!strcmp(str(&k.content), " a <tool_call>not json</tool_call> b < c"), "content '%s'", str(&k.content));
    CHECK(json_array_size(k.tools) == 0);
    done(&k);

    /* Qwen3.5's format: the prompt opened <think>; the call in XML form,
     * a string, a number, an object and a two-line string for arguments
     * (no tools offered, so no schema: the text's own type); streamed in
     * parts too; a block that breaks the form stays text */
    const char *q35 = "The user wants weather.\n</think>\n\nChecking.\n\n<tool_call>\n<function=get_weather>\n"
                      "<parameter=city>\nLyon\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
                      "<parameter=opts>\n{\"metric\": true}\n</parameter>\n<parameter=note>\nline one\nline two\n"
                      "</parameter>\n</function>\n</tool_call>";
    run(m, q35, NULL, 1, &k);
    CHECKF(!strcmp(str(&k.reasoning), " The user wants weather.\n"), "reasoning '%s'", str(&k.reasoning));
    CHECKF(!strcmp(str(&k.content), "Checking.\n\n"), "content '%s'", str(&k.content));
    CHECK(json_array_size(k.tools) == 1);
    {
        json_t *want = json_loads("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\", \"days\": 3, "
                                  "\"opts\": {\"metric\": true}, \"note\": \"line one\\nline two\"}}",
                                  0, NULL);
        char *got = json_dumps(json_array_get(k.tools, 0), JSON_COMPACT);
        CHECKF(want && json_equal(want, json_array_get(k.tools, 0)), "qwen3.5 call: %s", got ? got : "-");
        free(got);
        json_decref(want);
    }
    done(&k);
    feed(m, strstr(q35, "<tool_call>"), (size_t)-1, 1, &k);
    CHECKF(k.n == 1 && json_array_size(k.tools) == 0 && !strcmp(str(&k.content), "") &&
               !strcmp(str(&k.args[0]), "{\"city\": \"Lyon\", \"days\": 3, \"opts\": {\"metric\": true}, "
                                        "\"note\": \"line one\\nline two\"}"),
           "qwen3.5 call in parts: %d, '%s'", k.n, str(&k.args[0]));
    done(&k);
    xml_typed(m);
    feed(m, "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>", 20, 0, &k);
    CHECK(json_array_size(k.tools) == 0 &&
          !strcmp(str(&k.content), "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>"));
    done(&k);

    /* tool calls in parts */
    for (size_t i = 0; i < sizeof k_cases / sizeof *k_cases; i++) check_parts(m, &k_cases[i]);
    for (size_t i = 0; i < sizeof k_not_calls / sizeof *k_not_calls; i++) check_not_call(m, k_not_calls[i]);

    /* what the scanner cannot follow (a repeated key, which jansson takes
     * the last of) still comes whole at the closing tag */
    feed(m, "<tool_call>{\"arguments\": 1, \"arguments\": {\"x\": 2}, \"name\": \"f\"}</tool_call>", 40, 1, &k);
    CHECK(k.n == 0 && json_array_size(k.tools) == 1 && !strcmp(str(&k.content), ""));
    CHECK(json_integer_value(json_object_get(json_object_get(json_array_get(k.tools, 0), "arguments"), "x")) == 2);
    done(&k);

    /* an opened call stands when the text ends inside it (max_tokens); the
     * whole-call sink keeps such a block as text */
    feed(m, "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 12", (size_t)-1, 1, &k);
    CHECKF(k.n == 1 && !strcmp(k.name[0], "f") && !strcmp(str(&k.args[0]), "{\"x\": 12") && !k.content.len,
           "cut call: %d, '%s', content '%s'", k.n, str(&k.args[0]), str(&k.content));
    done(&k);
    feed(m, "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 12", (size_t)-1, 0, &k);
    CHECKF(json_array_size(k.tools) == 0 &&
               !strcmp(str(&k.content), "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 12"),
           "cut call, whole: content '%s'", str(&k.content)); /* as written: no closing tag added */
    done(&k);
    /* cut right after the opening tag: the tag stays, in either sink */
    for (int parts = 0; parts < 2; parts++) {
        feed(m, "a <tool_call>", (size_t)-1, parts, &k);
        CHECKF(k.n == 0 && json_array_size(k.tools) == 0 && !strcmp(str(&k.content), "a <tool_call>"),
               "cut after the tag: content '%s'", str(&k.content));
        done(&k);
    }

    /* the same through tokens and the detokenizer */
    memset(&k, 0, sizeof k);
    {
        k.tools = json_array();
        server_gen g;
        server_gen_init(&g, m, 0);
        g.on_text = on_text;
        g.on_tool = on_tool;
        g.on_tool_part = on_tool_part;
        g.user = &k;
        tokens(&g, m, "Ok <tool_call>{\"name\": \"get\", \"arguments\": {\"x\": [1, 2]}}</tool_call>", SERVER_FIN_STOP);
        CHECK(g.finish == SERVER_FIN_STOP && g.n_tools == 1);
        server_gen_free(&g);
        CHECKF(k.n == 1 && !strcmp(k.name[0], "get") && !strcmp(str(&k.args[0]), "{\"x\": [1, 2]}") && k.pieces[0] > 1,
               "tokens: %d calls, '%s' in %d pieces", k.n, str(&k.args[0]), k.pieces[0]);
        CHECK(!strcmp(str(&k.content), " Ok ") && json_array_size(k.tools) == 0);
        done(&k);
    }

    harmony(m);
    call_forms(m);
    call_form_detect();

    /* invalid UTF-8 never reaches JSON */
    json_t *j = server_jstr("ok\xff\xfe!", 5);
    CHECK(j && !strcmp(json_string_value(j), "ok\xef\xbf\xbd\xef\xbf\xbd!"));
    json_decref(j);

    kiln_model_free(m);
    return t_done();
}
