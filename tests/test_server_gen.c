/* The server's output pipeline (src/server/gen.c) on a token stream from
 * the stories260K tokenizer: <think> becomes reasoning, <tool_call>{json}
 * becomes a tool call, stop strings cut the text (even across tokens) and
 * cancel the request, and text that only looks like a tag survives. */
#include "server/srv.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

typedef struct sink {
    ks_buf content, reasoning;
    json_t *tools;
} sink;

static void on_text(ks_gen *g, int kind, const char *s, size_t n, void *user) {
    sink *k = user;
    ks_buf_put(kind == KS_D_REASONING ? &k->reasoning : &k->content, s, n);
}

static void on_tool(ks_gen *g, int index, json_t *call, void *user) {
    sink *k = user;
    json_array_append(k->tools, call);
}

/* Runs text (as tokens) through a finished request and the pipeline.  The
 * SentencePiece vocabulary adds a space before the text, so outputs begin
 * with one. */
static int run(ks_runner *r, const char *text, const char *stop, int think, sink *k) {
    memset(k, 0, sizeof *k);
    k->tools = json_array();
    ks_req *q = ks_req_new();
    int32_t n = 0;
    int32_t *ids = ks_tokenize(r->model, text, 0, &n);
    q->out = calloc((size_t)n + 1, sizeof(ks_tok));
    for (int32_t i = 1; i < n; i++) q->out[q->n_out++].id = ids[i]; /* skip BOS */
    free(ids);
    q->state = KS_Q_DONE;
    q->finish = KS_FIN_LENGTH;
    ks_gen g;
    ks_gen_init(&g, r, q, think);
    json_t *stops = stop ? json_pack("[s]", stop) : NULL;
    g.stops = stops;
    g.on_text = on_text;
    g.on_tool = on_tool;
    g.user = k;
    int over = ks_gen_pump(&g, 0);
    int fin = g.finish;
    CHECK(over == 1);
    ks_gen_free(&g);
    json_decref(stops); /* the pipeline borrows the stop list */
    ks_req_put(r, q);
    return fin;
}

static const char *str(ks_buf *b) { return b->p ? b->p : ""; }

static void done(sink *k) {
    ks_buf_free(&k->content);
    ks_buf_free(&k->reasoning);
    json_decref(k->tools);
}

int main(void) {
    ks_runner r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    CHECK(kiln_model_load("../models/stories260K.gguf", NULL, &r.model) == KILN_OK);
    if (!r.model) return t_done();
    sink k;

    int fin = run(&r, "Hi <think>let me see</think>The answer. <tool_call>{\"name\": \"get\", \"arguments\": {\"x\": 1}}"
                      "</tool_call> Bye", NULL, 0, &k);
    CHECK(fin == KS_FIN_LENGTH);
    CHECKF(!strcmp(str(&k.reasoning), "let me see"), "reasoning '%s'", str(&k.reasoning));
    CHECKF(!strcmp(str(&k.content), " Hi The answer.  Bye"), "content '%s'", str(&k.content));
    CHECK(json_array_size(k.tools) == 1);
    json_t *call = json_array_get(k.tools, 0);
    CHECK(!strcmp(json_string_value(json_object_get(call, "name")), "get"));
    CHECK(json_integer_value(json_object_get(json_object_get(call, "arguments"), "x")) == 1);
    done(&k);

    /* a prompt that opened <think> starts in reasoning */
    run(&r, "hmm, maybe</think>yes", NULL, 1, &k);
    CHECK(!strcmp(str(&k.reasoning), " hmm, maybe") && !strcmp(str(&k.content), "yes"));
    done(&k);

    /* a stop string spanning tokens ends the text before it */
    fin = run(&r, "Once upon a time there was a dog.", "time there", 0, &k);
    CHECK(fin == KS_FIN_STOP);
    CHECKF(!strcmp(str(&k.content), " Once upon a "), "content '%s'", str(&k.content));
    done(&k);

    /* a partial stop string at the end is released */
    fin = run(&r, "The cat sat on the ma", "mat.", 0, &k);
    CHECK(fin == KS_FIN_LENGTH && !strcmp(str(&k.content), " The cat sat on the ma"));
    done(&k);

    /* a broken tool call stays text; a lone '<' is kept */
    run(&r, "a <tool_call>not json</tool_call> b < c", NULL, 0, &k);
    CHECKF(!strcmp(str(&k.content), " a <tool_call>not json</tool_call> b < c"), "content '%s'", str(&k.content));
    CHECK(json_array_size(k.tools) == 0);
    done(&k);

    /* invalid UTF-8 never reaches JSON */
    json_t *j = ks_jstr("ok\xff\xfe!", 5);
    CHECK(j && !strcmp(json_string_value(j), "ok\xef\xbf\xbd\xef\xbf\xbd!"));
    json_decref(j);

    kiln_model_free(r.model);
    pthread_mutex_destroy(&r.mu);
    return t_done();
}
