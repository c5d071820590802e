/*
 * The kiln command line, run as a user would (KILN_BIN, set by ctest):
 * stdout carries only the continuation, errors are one line and a non-zero
 * exit, bench -o json has the fields llama-bench users script against.
 */
#include "testutil.h"

#include "gguf/gguf.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *bin;

/* Scratch files live in a directory of this run's own, so runs of the
 * suite side by side do not read each other's output: subst rewrites the
 * "/tmp/kiln-cli-" prefix of paths and commands into it (the result stays
 * valid for the next seven calls). */
static char g_dir[] = "/tmp/kiln-cli-XXXXXX";

static const char *subst(const char *s) {
    static char bufs[8][4096];
    static int next;
    char *out = bufs[next++ % 8];
    size_t o = 0;
    const char *pre = "/tmp/kiln-cli-";
    const size_t pl = strlen(pre);
    while (*s && o + 64 < sizeof bufs[0]) {
        if (!strncmp(s, pre, pl)) {
            o += (size_t)snprintf(out + o, sizeof bufs[0] - o, "%s/", g_dir);
            s += pl;
        } else {
            out[o++] = *s++;
        }
    }
    out[o] = 0;
    return out;
}

/* Runs a shell command; captures stdout (and stderr separately). */
static int run(const char *args, char **out, char **err) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s", bin, args);
    return t_run_capture(subst(cmd), g_dir, out, err);
}

/* The encoder commands on the fixtures, against their float64 references:
 * kiln embed --query/--document (EmbeddingGemma's formats, --dim), kiln
 * rerank (scores, --top-n, --documents, -f, --no-truncate) and kiln decide
 * (probabilities, --measure, a bad question). */
static json_t *out_json(const char *o) {
    json_error_t je;
    return o ? json_loads(o, 0, &je) : NULL;
}

static void test_encoders(void) {
    json_error_t je;
    char *o, *e, cmd[1024];
    /* embed: the gemma fixture's first query and a document without title */
    json_t *g = json_load_file("data/encoders/gemma-embed.json", 0, &je);
    CHECK(g != NULL);
    size_t i;
    json_t *in;
    int seen_q = 0, seen_d = 0;
    json_array_foreach(json_object_get(g, "inputs"), i, in) {
        const char *kind = json_string_value(json_object_get(in, "kind"));
        const int q = kind && !strcmp(kind, "query");
        json_t *title = json_object_get(in, "title");
        if ((q ? seen_q : seen_d) || (!q && title && !json_is_null(title))) continue;
        const char *text = json_string_value(json_object_get(in, "text"));
        if (!text || !*text || strchr(text, '\'')) continue;
        snprintf(cmd, sizeof cmd, "embed -m data/encoders/gemma-embed.gguf -t 1 --%s '%s'", q ? "query" : "document",
                 text);
        int rc = run(cmd, &o, &e);
        json_t *j = out_json(o);
        json_t *v = json_object_get(json_array_get(json_object_get(j, "data"), 0), "embedding");
        json_t *ref = json_object_get(in, "vector");
        double dot = 0, nv = 0, nr = 0;
        for (size_t k = 0; k < json_array_size(ref) && k < json_array_size(v); k++) {
            const double a = json_number_value(json_array_get(v, k)), b = json_number_value(json_array_get(ref, k));
            dot += a * b, nv += a * a, nr += b * b;
        }
        CHECKF(rc == 0 && json_array_size(v) == json_array_size(ref) && dot / sqrt(nv * nr) > 0.99999,
               "kiln embed --%s '%s': rc %d, cosine %.7f", q ? "query" : "document", text, rc, dot / sqrt(nv * nr));
        CHECK(
            !strcmp(json_string_value(json_object_get(j, "kind")) ? json_string_value(json_object_get(j, "kind")) : "",
                    q ? "query" : "document"));
        json_decref(j);
        free(o);
        free(e);
        if (q)
            seen_q = 1;
        else
            seen_d = 1;
    }
    CHECK(seen_q && seen_d);
    json_decref(g);
    int rc = run("embed -m data/encoders/gemma-embed.gguf -t 1 --dim 32 'a kiln'", &o, &e);
    json_t *j = out_json(o);
    CHECK(rc == 0 && json_integer_value(json_object_get(j, "dim")) == 32 &&
          json_array_size(json_object_get(json_array_get(json_object_get(j, "data"), 0), "embedding")) == 32);
    json_decref(j);
    free(o);
    free(e);

    /* rerank: every scored pair of the BERT cross-encoder's fixture */
    json_t *b = json_load_file("data/encoders/bert-rerank.json", 0, &je);
    CHECK(b != NULL);
    FILE *f = fopen(subst("/tmp/kiln-cli-docs.txt"), "w");
    double want[64];
    int n = 0;
    json_t *pr;
    json_array_foreach(json_object_get(b, "pairs"), i, pr) {
        const char *d = json_string_value(json_object_get(pr, "document"));
        if (n == 64 || !d || !*d || strchr(d, '\n') || json_is_true(json_object_get(pr, "truncated"))) continue;
        if (f) fprintf(f, "%s\n", d);
        want[n++] = json_number_value(json_object_get(pr, "score"));
    }
    if (f) fclose(f);
    CHECK(n >= 3);
    snprintf(cmd, sizeof cmd, "rerank -m data/encoders/bert-rerank.gguf -t 1 --query '%s' -f /tmp/kiln-cli-docs.txt",
             json_string_value(json_object_get(b, "query")));
    rc = run(cmd, &o, &e);
    j = out_json(o);
    json_t *res = json_object_get(j, "results");
    CHECKF(rc == 0 && (int)json_array_size(res) == n, "kiln rerank: rc %d, %s", rc, e ? e : "");
    double prev = INFINITY;
    json_array_foreach(res, i, pr) {
        const json_int_t k = json_integer_value(json_object_get(pr, "index"));
        const double sc = json_number_value(json_object_get(pr, "relevance_score"));
        CHECKF(k >= 0 && k < n && fabs(sc - want[k]) < 1e-5, "document %lld: %.7f, want %.7f", (long long)k, sc,
               k >= 0 && k < n ? want[k] : 0.0);
        CHECK(sc <= prev);
        prev = sc;
    }
    json_decref(j);
    free(o);
    free(e);
    snprintf(
        cmd, sizeof cmd,
        "rerank -m data/encoders/bert-rerank.gguf -t 1 --query '%s' --top-n 2 --documents -f /tmp/kiln-cli-docs.txt",
        json_string_value(json_object_get(b, "query")));
    rc = run(cmd, &o, &e);
    j = out_json(o);
    res = json_object_get(j, "results");
    CHECK(rc == 0 && json_array_size(res) == 2 &&
          json_is_string(json_object_get(json_object_get(json_array_get(res, 0), "document"), "text")));
    json_decref(j);
    free(o);
    free(e);
    json_decref(b);
    remove(subst("/tmp/kiln-cli-docs.txt"));
    /* a document over the model's 128 tokens: cut and listed, or with
     * --no-truncate one error line naming it */
    char longdoc[600] = "";
    for (int w = 0; w < 100; w++) strcat(longdoc, "kiln "); /* 200 WordPiece tokens */
    snprintf(cmd, sizeof cmd, "rerank -m data/encoders/bert-rerank.gguf -t 1 --query q 'short' '%s'", longdoc);
    rc = run(cmd, &o, &e);
    j = out_json(o);
    CHECK(rc == 0 && json_array_size(json_object_get(j, "truncated")) == 1 &&
          json_integer_value(json_array_get(json_object_get(j, "truncated"), 0)) == 1);
    json_decref(j);
    free(o);
    free(e);
    snprintf(cmd, sizeof cmd, "rerank -m data/encoders/bert-rerank.gguf -t 1 --no-truncate --query q '%s'", longdoc);
    rc = run(cmd, &o, &e);
    CHECKF(rc == 1 && o && !*o && e && strchr(e, '\n') == e + strlen(e) - 1, "rc %d stderr %s", rc, e ? e : "");
    free(o);
    free(e);
    rc = run("rerank -m data/encoders/gemma-embed.gguf --query q d", &o, &e);
    CHECKF(rc == 1 && e && strstr(e, "not a reranker"), "rc %d stderr %s", rc, e ? e : "");
    free(o);
    free(e);

    /* decide: the pack fixture's first case, every question */
    json_t *d = json_load_file("data/encoders/modernbert-decide.json", 0, &je);
    json_t *c0 = json_array_get(json_object_get(d, "cases"), 0);
    size_t o_len =
        (size_t)snprintf(cmd, sizeof cmd, "decide -m data/encoders/modernbert-decide.gguf -t 1 --state-text '%s'",
                         json_string_value(json_object_get(c0, "state")));
    json_t *qq;
    json_array_foreach(json_object_get(d, "questions"), i, qq) {
        char *qs = json_dumps(qq, JSON_COMPACT);
        o_len += (size_t)snprintf(cmd + o_len, o_len < sizeof cmd ? sizeof cmd - o_len : 0, " --question '%s'", qs);
        free(qs);
    }
    CHECK(o_len < sizeof cmd);
    rc = run(cmd, &o, &e);
    j = out_json(o);
    json_t *ds = json_object_get(j, "decisions");
    CHECKF(rc == 0 && json_array_size(ds) == json_array_size(json_object_get(c0, "results")), "kiln decide: rc %d %s",
           rc, e ? e : "");
    CHECK(json_integer_value(json_object_get(j, "state_tokens")) ==
          json_integer_value(json_object_get(c0, "state_tokens")));
    json_t *want_r;
    json_array_foreach(json_object_get(c0, "results"), i, want_r) {
        json_t *got = json_array_get(ds, i);
        json_t *wp = json_object_get(want_r, "probabilities"), *gp = json_object_get(got, "probabilities");
        CHECK(json_array_size(wp) == json_array_size(gp));
        for (size_t k = 0; k < json_array_size(wp); k++)
            CHECKF(fabs(json_number_value(json_array_get(gp, k)) - json_number_value(json_array_get(wp, k))) < 1e-5,
                   "question %zu, probability %zu", i, k);
        CHECK(fabs(json_number_value(json_object_get(got, "temperature")) -
                   json_number_value(json_object_get(want_r, "temperature"))) < 1e-6);
    }
    json_decref(j);
    free(o);
    free(e);
    json_decref(d);
    rc = run("decide -m data/encoders/modernbert-decide.gguf --state-text 'a b c' "
             "--question '{\"id\": \"q\", \"type\": \"route\", \"text\": \"x\"}' --measure",
             &o, &e);
    j = out_json(o);
    json_t *mq = json_array_get(json_object_get(j, "questions"), 0);
    CHECK(rc == 0 && json_integer_value(json_object_get(j, "state_tokens")) > 0 &&
          json_integer_value(json_object_get(mq, "budget")) > 0 && json_is_false(json_object_get(mq, "truncates")));
    json_decref(j);
    free(o);
    free(e);
    rc = run("decide -m data/encoders/modernbert-decide.gguf --state-text x --question '{\"type\": \"nosuch\"}'", &o,
             &e);
    CHECK(rc == 1 && o && !*o && e && strstr(e, "unknown question type 'nosuch'"));
    free(o);
    free(e);
}

/* kiln chat renders the whole conversation with the template each turn and
 * reuses the cached prefix: turn 2's reply must equal what a fresh run on
 * the full rendered conversation produces. */
static void test_chat(void) {
    char model[4096];
    snprintf(model, sizeof model, "%s", subst("/tmp/kiln-cli-chat.gguf"));
    CHECK(t_write_chat_model("../models/stories260K.gguf", model) == 0);
    char *o, *e;
    int rc = run("chat -m /tmp/kiln-cli-chat.gguf -n 12 --temp 0 < /dev/null", &o, &e);
    CHECK(rc == 0 && e && strstr(e, "chat template"));
    free(o);
    free(e);
    /* a template that fails to render ends the chat saying why (here: a budget) */
    char bad[4096];
    snprintf(bad, sizeof bad, "%s", subst("/tmp/kiln-cli-chat-bad.gguf"));
    FILE *hi = fopen(subst("/tmp/kiln-cli-in.txt"), "w");
    if (hi) {
        fputs("Hello there\n", hi);
        fclose(hi);
    }
    CHECK(t_write_chat_model_with("../models/stories260K.gguf", bad,
                                  "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}") ==
          0);
    rc = run("chat -m /tmp/kiln-cli-chat-bad.gguf -n 12 --temp 0 < /tmp/kiln-cli-in.txt", &o, &e);
    CHECKF(rc == 1 && e && strstr(e, "kiln chat: the chat template failed:") && strstr(e, "budget"),
           "bad template: rc %d, stderr %s", rc, e ? e : "");
    free(o);
    free(e);
    /* turn 1 alone, then two turns; stdout is each reply plus a newline */
    char *r1, *both;
    FILE *in = fopen(subst("/tmp/kiln-cli-in.txt"), "w");
    if (in) {
        fputs("Hello there\n", in);
        fclose(in);
    }
    rc = run("chat -m /tmp/kiln-cli-chat.gguf -n 12 --temp 0 < /tmp/kiln-cli-in.txt", &r1, &e);
    free(e);
    in = fopen(subst("/tmp/kiln-cli-in.txt"), "w");
    if (in) {
        fputs("Hello there\nTell me a story\n", in);
        fclose(in);
    }
    int rc2 = run("chat -m /tmp/kiln-cli-chat.gguf -n 12 --temp 0 < /tmp/kiln-cli-in.txt", &both, &e);
    free(e);
    size_t l1 = r1 ? strlen(r1) : 0;
    CHECK(rc == 0 && rc2 == 0 && l1 > 1 && both && strncmp(both, r1, l1) == 0 && strlen(both) > l1);
    /* kiln chat -p TEXT answers that one message with the template and exits
     * (stdin is not read), as `ollama run MODEL "prompt"`; the text is a
     * message even when it begins with '/' */
    {
        char *once, *cmd;
        rc = run("chat -m /tmp/kiln-cli-chat.gguf -n 12 --temp 0 -p 'Hello there' < /tmp/kiln-cli-in.txt", &once, &e);
        CHECKF(rc == 0 && once && r1 && !strcmp(once, r1) && e && !strstr(e, "/help"), "chat -p: '%s' vs '%s'",
               once ? once : "", r1 ? r1 : "");
        free(once);
        free(e);
        FILE *p = fopen(subst("/tmp/kiln-cli-prompt.txt"), "w");
        if (p) {
            fputs("<|im_start|>user\n/bye<|im_end|>\n<|im_start|>assistant\n", p);
            fclose(p);
        }
        char *e1;
        rc = run("chat -m /tmp/kiln-cli-chat.gguf -n 12 --temp 0 -p /bye < /dev/null", &cmd, &e);
        rc2 = run("run -m /tmp/kiln-cli-chat.gguf -n 12 --temp 0 -f /tmp/kiln-cli-prompt.txt", &once, &e1);
        const size_t lc = cmd ? strlen(cmd) : 0;
        if (lc) cmd[lc - 1] = 0;
        CHECKF(rc == 0 && rc2 == 0 && lc > 1 && once && !strcmp(cmd, once), "chat -p /bye: '%s' vs run '%s'",
               cmd ? cmd : "", once ? once : "");
        free(cmd);
        free(once);
        free(e);
        free(e1);
        remove(subst("/tmp/kiln-cli-prompt.txt"));
    }
    /* REPL commands, as in Ollama's: /clear starts over (the same reply
     * again), /help, empty lines and an unknown command send nothing, /bye
     * ends before the next message */
    if (r1) {
        const char *inputs[][2] = {
            {"Hello there\n/clear\nHello there\n", "two"},
            {"\n/help\n/nosuch\n\nHello there\n", "one"},
            {"Hello there\n/bye\nTell me a story\n", "one"},
        };
        for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
            in = fopen(subst("/tmp/kiln-cli-in.txt"), "w");
            if (in) {
                fputs(inputs[i][0], in);
                fclose(in);
            }
            char *out;
            rc = run("chat -m /tmp/kiln-cli-chat.gguf -n 12 --temp 0 < /tmp/kiln-cli-in.txt", &out, &e);
            char want[4096];
            snprintf(want, sizeof want, "%s%s", r1, inputs[i][1][1] == 'w' ? r1 : "");
            CHECKF(rc == 0 && out && !strcmp(out, want), "chat input %zu: '%s'", i, out ? out : "");
            if (i == 1) CHECK(e && strstr(e, "unknown command '/nosuch'") && strstr(e, "/clear"));
            free(out);
            free(e);
        }
    }
    /* a message of several lines between two lines of \"\"\", and //TEXT
     * (sent as /TEXT), equal a fresh run on the rendered prompt */
    const char *msgs[][2] = {{"\"\"\"\nHello\nthere\n\"\"\"\n", "Hello\nthere"}, {"//clear\n", "/clear"}};
    for (size_t i = 0; i < sizeof msgs / sizeof msgs[0]; i++) {
        in = fopen(subst("/tmp/kiln-cli-in.txt"), "w");
        if (in) {
            fputs(msgs[i][0], in);
            fclose(in);
        }
        FILE *p = fopen(subst("/tmp/kiln-cli-prompt.txt"), "w");
        if (p) {
            fprintf(p, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", msgs[i][1]);
            fclose(p);
        }
        char *c1, *f1, *e1;
        rc = run("chat -m /tmp/kiln-cli-chat.gguf -n 12 --temp 0 < /tmp/kiln-cli-in.txt", &c1, &e);
        rc2 = run("run -m /tmp/kiln-cli-chat.gguf -n 12 --temp 0 -f /tmp/kiln-cli-prompt.txt", &f1, &e1);
        const size_t lc = c1 ? strlen(c1) : 0;
        if (lc) c1[lc - 1] = 0; /* chat's newline after the reply */
        CHECKF(rc == 0 && rc2 == 0 && lc > 1 && f1 && !strcmp(c1, f1), "chat message %zu: '%s' vs run '%s'", i,
               c1 ? c1 : "", f1 ? f1 : "");
        free(c1);
        free(f1);
        free(e);
        free(e1);
        remove(subst("/tmp/kiln-cli-prompt.txt"));
    }
    /* /set system TEXT and /set parameter NAME VALUE (Ollama's REPL): the
     * reply equals kiln run on the prompt and settings they make */
    const char *sets[][3] = {
        {"/set system Be brief.\nHello there\n",
         "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n",
         "-n 12"},
        {"/set parameter num_predict 3\nHello there\n",
         "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n", "-n 3"},
        {"/set parameter temperature 0.8\n/set parameter seed 5\nHello there\n",
         "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n", "-n 12 --temp 0.8 --seed 5"},
        {"/set nothink\nHello there\n",
         "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", "-n 12"},
        {"/set nothink\n/set think\nHello there\n", "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n",
         "-n 12"},
    };
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        in = fopen(subst("/tmp/kiln-cli-in.txt"), "w");
        if (in) {
            fputs(sets[i][0], in);
            fclose(in);
        }
        FILE *p = fopen(subst("/tmp/kiln-cli-prompt.txt"), "w");
        if (p) {
            fputs(sets[i][1], p);
            fclose(p);
        }
        char cmd[256], *c1, *f1, *e1;
        rc = run("chat -m /tmp/kiln-cli-chat.gguf -n 12 --temp 0 < /tmp/kiln-cli-in.txt", &c1, &e);
        snprintf(cmd, sizeof cmd, "run -m /tmp/kiln-cli-chat.gguf --temp 0 %s -f /tmp/kiln-cli-prompt.txt", sets[i][2]);
        rc2 = run(cmd, &f1, &e1);
        const size_t lc = c1 ? strlen(c1) : 0;
        if (lc) c1[lc - 1] = 0;
        CHECKF(rc == 0 && rc2 == 0 && lc > 1 && f1 && !strcmp(c1, f1), "/set case %zu: '%s' vs run '%s'", i,
               c1 ? c1 : "", f1 ? f1 : "");
        free(c1);
        free(f1);
        free(e);
        free(e1);
        remove(subst("/tmp/kiln-cli-prompt.txt"));
    }
    /* /show: the model, the parameters as set, the template */
    in = fopen(subst("/tmp/kiln-cli-in.txt"), "w");
    if (in) {
        fputs("/set parameter temperature 0.3\n/show parameters\n/show template\n/show\n/show system\n", in);
        fclose(in);
    }
    char *shown;
    rc = run("chat -m /tmp/kiln-cli-chat.gguf -sys 'Be kind.' < /tmp/kiln-cli-in.txt", &shown, &e);
    CHECKF(rc == 0 && shown && strstr(shown, "temperature        0.3\n") && strstr(shown, "'<|im_start|>assistant") &&
               strstr(shown, "architecture         llama") && strstr(shown, "Be kind.\n"),
           "/show: '%s'", shown ? shown : "");
    free(shown);
    free(e);
    in = fopen(subst("/tmp/kiln-cli-in.txt"), "w");
    if (in) {
        fputs("/set parameter nosuch 1\n/set\n", in);
        fclose(in);
    }
    char *c2;
    rc = run("chat -m /tmp/kiln-cli-chat.gguf < /tmp/kiln-cli-in.txt", &c2, &e);
    CHECKF(rc == 0 && c2 && !*c2 && e && strstr(e, "/set parameter NAME VALUE with NAME one of"), "bad /set: %s",
           e ? e : "");
    free(c2);
    free(e);
    if (rc == 0 && rc2 == 0 && l1 > 1 && both && strlen(both) > l1) {
        r1[l1 - 1] = 0; /* the newline kiln chat prints after a reply */
        char *reply2 = both + l1;
        reply2[strlen(reply2) - 1] = 0;
        /* the rendered two-turn conversation, given to kiln run */
        FILE *p = fopen(subst("/tmp/kiln-cli-prompt.txt"), "w");
        if (p) {
            fprintf(p,
                    "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n%s<|im_end|>\n"
                    "<|im_start|>user\nTell me a story<|im_end|>\n<|im_start|>assistant\n",
                    r1);
            fclose(p);
        }
        char *o2, *e2;
        rc = run("run -m /tmp/kiln-cli-chat.gguf -n 12 --temp 0 -f /tmp/kiln-cli-prompt.txt", &o2, &e2);
        free(e2);
        CHECKF(rc == 0 && o2 && !strcmp(o2, reply2), "chat turn 2 '%s' vs fresh run '%s'", reply2, o2 ? o2 : "");
        free(o2);
        remove(subst("/tmp/kiln-cli-prompt.txt"));
    }
    free(r1);
    free(both);
    /* A conversation that outgrows the context drops its oldest turns, the
     * system prompt kept, and says so; a message too long on its own is
     * not sent, and the chat goes on.  Ten messages of about 20 tokens in
     * a 160-token context; then one of about 400 tokens, then a short one. */
    for (int with_template = 1; with_template >= 0; with_template--) {
        in = fopen(subst("/tmp/kiln-cli-in.txt"), "w");
        if (in) {
            for (int i = 0; i < 10; i++)
                fprintf(in, "Tell me about the dog and the cat who played in the park %d\n", i);
            for (int i = 0; i < 40; i++) fputs("the big red ball rolled away ", in);
            fputs("\nHello there\n", in);
            fclose(in);
        }
        char args[512];
        snprintf(args, sizeof args, "chat -m %s -c 160 -n 12 --temp 0 -t 1 %s < /tmp/kiln-cli-in.txt",
                 with_template ? "/tmp/kiln-cli-chat.gguf" : "../models/stories260K.gguf",
                 with_template ? "-sys 'You are a storyteller.'" : "");
        char *out;
        rc = run(args, &out, &e);
        int lines = 0;
        for (const char *q = out; q && *q; q++) lines += *q == '\n';
        CHECKF(rc == 0 && e && strstr(e, "dropped the oldest") && strstr(e, "it was not sent") && lines >= 11,
               "%s: rc %d, %d lines, stderr '%s'", with_template ? "template" : "plain", rc, lines, e ? e : "");
        if (with_template) CHECK(e && strstr(e, "(the system prompt stays)"));
        free(out);
        free(e);
    }
    remove(subst("/tmp/kiln-cli-in.txt"));
    remove(model);
}

/* kiln chat shows reasoning between Ollama's "Thinking..." lines (dimmed on
 * a terminal), or hides it with --hidethinking, and a tool call as the
 * call; kiln run prints the text as written.  The fixture writes
 * <think>...</think> and a <tool_call> whatever the prompt. */
static void test_chat_view(void) {
    const char *fx = "data/fixtures/toolcall.gguf";
    char cmd[300], *o, *e;
    snprintf(cmd, sizeof cmd, "chat -m %s -n 80 --temp 0 -p 'Weather in Paris?' < /dev/null", fx);
    int rc = run(cmd, &o, &e);
    CHECKF(rc == 0 && o && strstr(o, "Thinking...\nI should look up the weather.\n...done thinking.\n\n") &&
               strstr(o, "-> get_weather({\"city\":\"Paris\",\"unit\":\"celsius\"})\n") && !strstr(o, "<think>") &&
               !strstr(o, "tool_call"),
           "chat view: '%s'", o ? o : "");
    free(o);
    free(e);
    snprintf(cmd, sizeof cmd, "chat -m %s -n 80 --temp 0 --hidethinking -p 'Weather in Paris?' < /dev/null", fx);
    rc = run(cmd, &o, &e);
    CHECKF(rc == 0 && o && !strstr(o, "look up") && !strstr(o, "Thinking") && strstr(o, "-> get_weather("),
           "--hidethinking: '%s'", o ? o : "");
    free(o);
    free(e);
    /* /load: a model that does not load leaves the chat as it was; then
     * the fixture answers with its template, shown as above */
    FILE *in = fopen(subst("/tmp/kiln-cli-load.txt"), "w");
    if (in) {
        fprintf(in, "Once upon\n/load nosuch.gguf\n/load %s\nWeather in Paris?\n/show\n", fx);
        fclose(in);
    }
    rc = run("chat -m ../models/stories260K.gguf -n 80 --temp 0 < /tmp/kiln-cli-load.txt", &o, &e);
    CHECKF(rc == 0 && o && e && strstr(e, "/load nosuch.gguf failed") &&
               strstr(e, "loaded data/fixtures/toolcall.gguf") && strstr(o, "-> get_weather({") &&
               strstr(o, "name                 data/fixtures/toolcall.gguf"),
           "/load: '%s' / '%s'", o ? o : "", e ? e : "");
    free(o);
    free(e);
    remove(subst("/tmp/kiln-cli-load.txt"));
    /* /save NAME: a store model with the chat's system prompt and settings,
     * which kiln chat -m NAME starts from (a store of its own here) */
    char store[] = "/tmp/kiln-cli-save-XXXXXX", cmd2[1200];
    if (mkdtemp(store)) {
        in = fopen(subst("/tmp/kiln-cli-load.txt"), "w");
        if (in) {
            fputs("/set system Answer in French.\n/set parameter temperature 0.25\n/save tc-fr\n", in);
            fclose(in);
        }
        snprintf(cmd2, sizeof cmd2, "chat -m %s < /tmp/kiln-cli-load.txt", fx);
        char env_cmd[1400];
        snprintf(env_cmd, sizeof env_cmd, "env KILN_STORE=%s '%s' %s", store, bin, cmd2);
        rc = t_run_capture(subst(env_cmd), g_dir, &o, &e);
        CHECKF(rc == 0 && e && strstr(e, "saved tc-fr ("), "/save: '%s'", e ? e : "");
        free(o);
        free(e);
        in = fopen(subst("/tmp/kiln-cli-load.txt"), "w");
        if (in) {
            fputs("/show system\n/show parameters\n", in);
            fclose(in);
        }
        snprintf(env_cmd, sizeof env_cmd, "env KILN_STORE=%s '%s' chat -m tc-fr < /tmp/kiln-cli-load.txt", store, bin);
        rc = t_run_capture(subst(env_cmd), g_dir, &o, &e);
        CHECKF(rc == 0 && o && strstr(o, "Answer in French.\n") && strstr(o, "temperature        0.25\n"),
               "chat -m tc-fr: '%s' / '%s'", o ? o : "", e ? e : "");
        free(o);
        free(e);
        snprintf(env_cmd, sizeof env_cmd, "rm -rf '%s'", store);
        if (system(env_cmd) != 0) fprintf(stderr, "could not remove %s\n", store);
        remove(subst("/tmp/kiln-cli-load.txt"));
    }
    snprintf(cmd, sizeof cmd, "run -m %s -n 80 --temp 0 -p 'Weather' < /dev/null", fx);
    rc = run(cmd, &o, &e);
    CHECKF(rc == 0 && o && strstr(o, "</tool_call>"), "run: '%s'", o ? o : "");
    free(o);
    free(e);
}

/* kiln chat on a hybrid model (qwen35: recurrent layers, whose state
 * resumes only at a snapshot): each turn cuts the reply back to the end of
 * the prompt and reuses what the next rendering shares, and turn 2's reply
 * equals a fresh kiln run on the rendered two-turn conversation. */
static void test_chat_hybrid(void) {
    char model[4096];
    snprintf(model, sizeof model, "%s", subst("/tmp/kiln-cli-chat35.gguf"));
    CHECK(t_write_chat_model("data/hybrid/qwen35-spm-f32.gguf", model) == 0);
    char *r1, *both, *e;
    FILE *in = fopen(subst("/tmp/kiln-cli-in.txt"), "w");
    if (in) {
        fputs("Hello there\n", in);
        fclose(in);
    }
    int rc = run("chat -m /tmp/kiln-cli-chat35.gguf -n 10 --temp 0 < /tmp/kiln-cli-in.txt", &r1, &e);
    free(e);
    in = fopen(subst("/tmp/kiln-cli-in.txt"), "w");
    if (in) {
        fputs("Hello there\nTell me a story\n", in);
        fclose(in);
    }
    int rc2 = run("chat -m /tmp/kiln-cli-chat35.gguf -n 10 --temp 0 < /tmp/kiln-cli-in.txt", &both, &e);
    free(e);
    const size_t l1 = r1 ? strlen(r1) : 0;
    CHECKF(rc == 0 && rc2 == 0 && l1 > 1 && both && !strncmp(both, r1, l1) && strlen(both) > l1,
           "qwen35 chat: turn 1 '%s', both turns '%s'", r1 ? r1 : "", both ? both : "");
    if (rc == 0 && rc2 == 0 && l1 > 1 && both && strlen(both) > l1) {
        r1[l1 - 1] = 0;
        char *reply2 = both + l1;
        reply2[strlen(reply2) - 1] = 0;
        FILE *p = fopen(subst("/tmp/kiln-cli-prompt.txt"), "w");
        if (p) {
            fprintf(p,
                    "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n%s<|im_end|>\n"
                    "<|im_start|>user\nTell me a story<|im_end|>\n<|im_start|>assistant\n",
                    r1);
            fclose(p);
        }
        char *o2, *e2;
        rc = run("run -m /tmp/kiln-cli-chat35.gguf -n 10 --temp 0 -f /tmp/kiln-cli-prompt.txt", &o2, &e2);
        free(e2);
        CHECKF(rc == 0 && o2 && !strcmp(o2, reply2), "qwen35 chat turn 2 '%s' vs fresh run '%s'", reply2, o2 ? o2 : "");
        free(o2);
        remove(subst("/tmp/kiln-cli-prompt.txt"));
    }
    free(r1);
    free(both);
    remove(subst("/tmp/kiln-cli-in.txt"));
    remove(model);
}

/* stories260K's greedy text for "Tom had a red" (40 tokens), a stop string
 * in it and the text before that string.  aarch64 parts from x86-64 after
 * the second "his toys", at every ISA level the scalar one included: a near
 * tie that the scalar code's float rounding there (gcc contracts its
 * multiply-adds into fmadd) tips the other way. */
#if defined(__aarch64__)
#define K_GREEDY                                                                                                       \
    " ball. He liked to play with his toys. He liked to play with his toys. He liked to play with his toys. One day, " \
    "he"
#define K_STOP "his toys. One"
#define K_STOPPED " ball. He liked to play with his toys. He liked to play with his toys. He liked to play with "
#else
#define K_GREEDY \
    " ball. He liked to play with his toys. He liked to play with his toys and run around the room. He saw a big"
#define K_STOP "his toys and"
#define K_STOPPED " ball. He liked to play with his toys. He liked to play with "
#endif

int main(void) {
    bin = getenv("KILN_BIN");
    if (!bin) {
        fprintf(stderr, "KILN_BIN is not set\n");
        return 1;
    }
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "cannot make a scratch directory\n");
        return 1;
    }
    char *o, *e;
    int rc = run("run -m ../models/stories260K.gguf -p 'Tom had a red' -n 40 --temp 0", &o, &e);
    CHECK(rc == 0);
    CHECKF(o && !strcmp(o, K_GREEDY), "stdout: '%s'", o ? o : "");
    CHECK(e && strstr(e, "generated 40 tokens"));
    free(o);
    free(e);

    /* --stop: the text ends before the first stop string written (across
     * tokens), which is not printed; a string no text begins with changes
     * nothing */
    rc = run("run -m ../models/stories260K.gguf -p 'Tom had a red' -n 40 --temp 0 --stop '" K_STOP "' --stop zzz", &o,
             &e);
    CHECKF(rc == 0 && o && !strcmp(o, K_STOPPED), "stdout: '%s'", o ? o : "");
    free(o);
    free(e);
    rc = run("run -m ../models/stories260K.gguf -p 'Tom had a red' -n 40 --temp 0 --stop ' b'", &o, &e);
    CHECK(rc == 0 && o && !*o);
    free(o);
    free(e);
    rc = run("run -m ../models/stories260K.gguf -p 'x' --stop ''", &o, &e);
    CHECK(rc == 2 && e && strstr(e, "--stop needs a non-empty text"));
    free(o);
    free(e);

    /* a seed fixes a sampled continuation */
    char *o2, *e2;
    rc = run("run -m ../models/stories260K.gguf -p 'Once' -n 30 --temp 0.9 --seed 7", &o, &e);
    int rc2;
    rc2 = run("run -m ../models/stories260K.gguf -p 'Once' -n 30 --temp 0.9 --seed 7", &o2, &e2);
    CHECK(rc == 0 && rc2 == 0 && o && o2 && strlen(o) > 0 && !strcmp(o, o2));
    free(o);
    free(e);
    free(o2);
    free(e2);

    /* prompt + n over the context: an error with the numbers, no output */
    rc = run("run -m ../models/stories260K.gguf -p 'Tom had a red' -n 100 -c 64", &o, &e);
    CHECK(rc != 0 && o && !*o && e && strstr(e, "(7 tokens) plus 100") && strstr(e, "64"));
    free(o);
    free(e);

    /* --cache-type: a Q8_0 cache needs heads of a multiple of 32 (the
     * stories model's are 8): a clear error, no output; an unknown type is
     * a usage error; F32 runs */
    rc = run("run -m ../models/stories260K.gguf -p 'Tom had a red' -n 8 --cache-type q8_0", &o, &e);
    CHECKF(rc != 0 && o && !*o && e && strstr(e, "multiple of 32") && strstr(e, "is 8"), "stderr: %s", e ? e : "");
    free(o);
    free(e);
    rc = run("run -m ../models/stories260K.gguf -p 'Tom had a red' -n 8 --cache-type q4", &o, &e);
    CHECKF(rc == 2 && e && strstr(e, "'q4' is not f16, f32 or q8_0"), "rc %d stderr: %s", rc, e ? e : "");
    free(o);
    free(e);
    rc = run("run -m ../models/stories260K.gguf -p 'Tom had a red' -n 8 --temp 0 --cache-type f32", &o, &e);
    CHECK(rc == 0 && o && strlen(o) > 0);
    free(o);
    free(e);

    /* --spec: the same text as plain greedy decoding, the counts on stderr;
     * a draft of another vocabulary, a missing draft, a model without MTP
     * blocks and a bad value are clear errors with no output */
    const char *specs[] = {"--spec ngram", "--spec ngram --spec-n 3 --spec-fixed",
                           "--spec draft -md data/spec/spec-llama.gguf", "-md ../models/stories260K.gguf --spec-n 4"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, "run -m ../models/stories260K.gguf -p 'Tom had a red' -n 40 --temp 0 %s", specs[i]);
        rc = run(args, &o, &e);
        CHECKF(rc == 0 && o && !strcmp(o, K_GREEDY), "%s: rc %d, stdout '%s'", specs[i], rc, o ? o : "");
        CHECKF(e && strstr(e, "speculative decoding (") && strstr(e, "tokens proposed"), "%s: stderr %s", specs[i],
               e ? e : "");
        free(o);
        free(e);
    }
    const char *spec_errs[][2] = {
        {"--spec draft -md data/fixtures/llama.gguf", "has another vocabulary than the target: token 259"},
        {"--spec draft", "needs --draft-model"},
        {"--spec mtp", "no MTP (nextn) blocks"},
    };
    for (size_t i = 0; i < sizeof spec_errs / sizeof spec_errs[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, "run -m ../models/stories260K.gguf -p 'Tom' -n 4 %s", spec_errs[i][0]);
        rc = run(args, &o, &e);
        CHECKF(rc == 1 && o && !*o && e && strstr(e, spec_errs[i][1]), "%s: rc %d, stderr %s", spec_errs[i][0], rc,
               e ? e : "");
        free(o);
        free(e);
    }
    rc = run("run -m ../models/stories260K.gguf -p 'Tom' --spec lookup", &o, &e);
    CHECKF(rc == 2 && e && strstr(e, "'lookup' is not ngram, draft, mtp or none"), "rc %d stderr: %s", rc, e ? e : "");
    free(o);
    free(e);
    rc = run("run -m ../models/stories260K.gguf -p 'Tom' --spec ngram --spec-n 17", &o, &e);
    CHECKF(rc == 2 && e && strstr(e, "out of range"), "rc %d stderr: %s", rc, e ? e : "");
    free(o);
    free(e);
    /* numeric flags are checked: a bad value is a usage error naming it */
    const char *bad_flags[][2] = {
        {"-t 0", "out of range"},           {"-t x", "not a whole number"},        {"--top-p 1.5", "out of range"},
        {"-n -2", "out of range"},          {"--min-p -0.1", "out of range"},      {"--temp -1", "out of range"},
        {"-s -5", "out of range"},          {"--seed 4294967296", "out of range"}, {"-c -1", "out of range"},
        {"-b 0", "out of range"},           {"--top-k 3.5", "not a whole number"}, {"-n 99999999999", "out of range"},
        {"-ctk q8_0 -ctv f16", "one type"},
    };
    for (size_t i = 0; i < sizeof bad_flags / sizeof bad_flags[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "run -m ../models/stories260K.gguf -p Once %s", bad_flags[i][0]);
        rc = run(args, &o, &e);
        CHECKF(rc == 2 && o && !*o && e && strstr(e, bad_flags[i][1]), "%s: rc %d, stderr '%s'", bad_flags[i][0], rc,
               e ? e : "");
        free(o);
        free(e);
    }
    rc = run("run -m ../models/stories260K.gguf -p 'Tom had a red' -n 8 --temp 0 -ctk f32 -ctv f32", &o, &e);
    CHECKF(rc == 0 && o && !strcmp(o, " ball. He liked to play"), "-ctk/-ctv f32: rc %d '%s'", rc, o ? o : "");
    free(o);
    free(e);

    /* -n defaults to unlimited: with --ignore-eos, until the context is full */
    rc = run("run -m ../models/stories260K.gguf -p Once -c 300 -t 1 --ignore-eos", &o, &e);
    CHECKF(rc == 0 && e && strstr(e, "generated 299 tokens") && strstr(e, "context of 300 tokens is full"),
           "unlimited -n: rc %d, stderr '%s'", rc, e ? e : "");
    free(o);
    free(e);

    /* the seed is random unless given; -v prints it, and -s replays it */
    {
        char *a, *ea, *b2, *eb;
        rc = run("run -m ../models/stories260K.gguf -p Once -n 30 --temp 1 -v", &a, &ea);
        rc2 = run("run -m ../models/stories260K.gguf -p Once -n 30 --temp 1", &b2, &eb);
        CHECKF(rc == 0 && rc2 == 0 && a && b2 && strcmp(a, b2), "two unseeded runs: '%s' and '%s'", a ? a : "",
               b2 ? b2 : "");
        unsigned long long seed = 0;
        const char *sp = ea ? strstr(ea, "kiln run: seed ") : NULL;
        CHECKF(sp && sscanf(sp, "kiln run: seed %llu", &seed) == 1, "-v prints the seed: '%s'", ea ? ea : "");
        char args[256];
        snprintf(args, sizeof args, "run -m ../models/stories260K.gguf -p Once -n 30 --temp 1 -s %llu", seed);
        rc = run(args, &o, &e);
        CHECKF(rc == 0 && o && a && !strcmp(o, a), "-s %llu replays: '%s' vs '%s'", seed, o ? o : "", a ? a : "");
        free(o);
        free(e);
        free(a);
        free(ea);
        free(b2);
        free(eb);
    }

    /* -e processes escapes in the prompt; --ignore-eos and --json-schema as llama.cpp names them */
    rc = run("run -m ../models/stories260K.gguf -p 'Tom had a\\x20red' -e -n 8 --temp 0", &o, &e);
    CHECKF(rc == 0 && o && !strcmp(o, " ball. He liked to play"), "-e: rc %d '%s' %s", rc, o ? o : "", e ? e : "");
    free(o);
    free(e);
    rc = run("run -m ../models/stories260K.gguf -p Once -t 1 -n 40 --json-schema "
             "'{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 10}'",
             &o, &e);
    {
        char *end = NULL;
        long v = o ? strtol(o, &end, 10) : -1;
        while (end && (*end == ' ' || *end == '\n')) end++;
        CHECKF(rc == 0 && end && !*end && v >= 5 && v <= 10, "--json-schema: rc %d '%s' %s", rc, o ? o : "",
               e ? e : "");
    }
    free(o);
    free(e);
    rc = run("run -m ../models/stories260K.gguf -p Once --json-schema '{\"type\": \"integer\", \"not\": {}}'", &o, &e);
    CHECKF(rc == 2 && e && strstr(e, "not"), "an unenforced schema: rc %d '%s'", rc, e ? e : "");
    free(o);
    free(e);
    rc = run("chat -m ../models/stories260K.gguf -sys 'Be brief' -n 4 < /dev/null", &o, &e);
    CHECKF(rc == 0, "chat -sys: rc %d '%s'", rc, e ? e : "");
    free(o);
    free(e);

    rc = run("tokenize -m ../models/stories260K.gguf -p 'Tom had a red' --json", &o, &e);
    CHECK(rc == 0 && o && !strcmp(o, "[1, 274, 287, 381, 261, 352, 266]\n"));
    free(o);
    free(e);

    /* --help: every command prints its usage on stdout and exits 0, as the
     * first argument, among options, or as `kiln help CMD`; the value of an
     * option is never taken for it (-p --help is a prompt) */
    const char *helps[][2] = {
        {"run --help", "usage: kiln run -m MODEL"},
        {"run -m x -t 2 -h", "--cache-type T"},
        {"chat -m x --help", "usage: kiln chat"},
        {"help bench", "usage: kiln bench -m MODEL"},
        {"tokenize -m x --help", "usage: kiln tokenize"},
        {"quantize --help", "q4_k_m"},
        {"embed --help", "usage: kiln embed"},
        {"pull --help", "usage: kiln pull URL"},
        {"import --help", "usage: kiln import PATH"},
        {"show --help", "usage: kiln show MODEL"},
        {"rm --help", "usage: kiln rm NAME|ID"},
        {"verify -h", "usage: kiln verify"},
        {"cp --help", "usage: kiln cp"},
        {"ls --help", "usage: kiln ls"},
        {"gc --help", "usage: kiln gc"},
        {"serve --help", "--port P"},
        {"help serve", "--parallel N"},
        {"rerank --help", "usage: kiln rerank"},
        {"decide --help", "usage: kiln decide"},
    };
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++) {
        rc = run(helps[i][0], &o, &e);
        CHECKF(rc == 0 && o && strstr(o, helps[i][1]), "kiln %s: rc %d, '%s'", helps[i][0], rc, o ? o : "");
        free(o);
        free(e);
    }
    rc = run("help nosuch", &o, &e);
    CHECK(rc == 2 && e && strstr(e, "unknown command 'nosuch'"));
    free(o);
    free(e);
    rc = run("run -m ../models/stories260K.gguf -p --help -n 4 --temp 0", &o, &e);
    CHECKF(rc == 0 && o && *o && !strstr(o, "usage"), "stdout: '%s'", o ? o : "");
    free(o);
    free(e);

    /* a prompt piped in on stdin, as `echo TEXT | kiln run` gives it: the
     * same continuation as -p TEXT (echo's newline dropped); -f - keeps
     * every byte; nothing piped in is "no prompt" */
    FILE *pf = fopen(subst("/tmp/kiln-cli-stdin.txt"), "w");
    if (pf) {
        fputs("Tom had a red\n", pf);
        fclose(pf);
    }
    rc = run("run -m ../models/stories260K.gguf -n 8 --temp 0 < /tmp/kiln-cli-stdin.txt", &o, &e);
    CHECKF(rc == 0 && o && !strcmp(o, " ball. He liked to play"), "stdin prompt: '%s'", o ? o : "");
    free(o);
    free(e);
    rc = run("tokenize -m ../models/stories260K.gguf -f - --json < /tmp/kiln-cli-stdin.txt", &o, &e);
    CHECKF(rc == 0 && o && !strcmp(o, "[1, 274, 287, 381, 261, 352, 266, 13]\n"), "-f -: '%s'", o ? o : "");
    free(o);
    free(e);
    rc = run("run -m ../models/stories260K.gguf -n 8 < /dev/null", &o, &e);
    CHECK(rc == 2 && o && !*o && e && strstr(e, "no prompt"));
    free(o);
    free(e);
    remove(subst("/tmp/kiln-cli-stdin.txt"));

    /* Ctrl-C (one SIGINT; a second one ends the process at once): run stops
     * generating, prints its timings and exits 130; at chat's prompt it
     * asks again instead of ending (stdin closes later, which ends it).
     * The signal goes once the first tokens (or chat's prompt) are out
     * (waiting 20 s at most); generating until the stories model's
     * 2048-token context is full takes about a second. */
    {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "rm -f /tmp/kiln-cli-out.txt; '%s' run -m ../models/stories260K.gguf -p Once -n -1 -t 1 "
                 ">/tmp/kiln-cli-out.txt "
                 "2>/tmp/kiln-cli-err.txt & p=$!; i=0; while [ ! -s /tmp/kiln-cli-out.txt ] && [ $i -lt 400 ]; do "
                 "sleep 0.05; i=$((i+1)); done; kill -INT $p; wait $p",
                 bin);
        int st = system(subst(cmd));
        o = t_read_file(subst("/tmp/kiln-cli-out.txt"), NULL);
        e = t_read_file(subst("/tmp/kiln-cli-err.txt"), NULL);
        int n_gen = -1;
        const char *g = e ? strstr(e, "generated ") : NULL;
        if (g) sscanf(g, "generated %d", &n_gen);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 130 && o && *o && e && strstr(e, "interrupted") && n_gen > 0 &&
                   n_gen < 2047,
               "interrupted run: status %d, %d tokens, stderr '%s'", st, n_gen, e ? e : "");
        free(o);
        free(e);
        snprintf(
            cmd, sizeof cmd,
            "rm -f /tmp/kiln-cli-err.txt; sleep 2 | '%s' chat -m ../models/stories260K.gguf >/tmp/kiln-cli-out.txt "
            "2>/tmp/kiln-cli-err.txt "
            "& p=$!; i=0; while ! grep -q '> ' /tmp/kiln-cli-err.txt 2>/dev/null && [ $i -lt 400 ]; do sleep 0.05; "
            "i=$((i+1)); done; kill -INT $p; wait $p",
            bin);
        st = system(subst(cmd));
        e = t_read_file(subst("/tmp/kiln-cli-err.txt"), NULL);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0 && e && strstr(e, "(/bye or Ctrl-D ends the chat)"),
               "chat prompt Ctrl-C: status %d, stderr '%s'", st, e ? e : "");
        free(e);
    }

    rc = run("show ../models/stories260K.gguf", &o, &e);
    CHECK(rc == 0 && o && strstr(o, "llama.block_count") && strstr(o, "blk.4.ffn_down.weight") &&
          strstr(o, "runnable:  yes") && strstr(o, "292800"));
    free(o);
    free(e);

    /* a mixture of experts: show names its experts; run gives llama.cpp's
     * greedy text for data/arch/cases.json's short prompt, byte for byte */
    rc = run("show data/arch/qwen3moe-f32.gguf", &o, &e);
    CHECKF(rc == 0 && o && strstr(o, "runnable:  yes: qwen3moe, 4 layers") &&
               strstr(o, "experts:   6, 3 used per token, width 32\n") && strstr(o, "params:    297152 "),
           "show qwen3moe: '%s'", o ? o : "");
    free(o);
    free(e);
    rc = run("run -m data/arch/qwen3moe-f32.gguf -p 'A quiet river runs through' -n 16 --temp 0", &o, &e);
    CHECKF(rc == 0 && o && !strcmp(o, " nam her0 sa saw B o-c fout f~imeedP"), "run qwen3moe: '%s'", o ? o : "");
    free(o);
    free(e);
    /* phi3: fused QKV and gate|up, partial LongRoPE with its attn_factor */
    rc = run("run -m data/arch/phi3-f32.gguf -p 'Grandma told us a story about' -n 16 --temp 0", &o, &e);
    CHECKF(rc == 0 && o &&
               !strcmp(o, "\xe2\x80\x98"
                          "fsqorZri(}stwn weilsq"),
           "run phi3: '%s'", o ? o : "");
    free(o);
    free(e);
    /* mistral3: YaRN (its query temperature changes only test_models' long
     * case); the text holds U+201D and U+200A */
    rc = run("run -m data/arch/mistral3-f16.gguf -p 'Grandma told us a story about' -n 16 --temp 0", &o, &e);
    CHECKF(rc == 0 && o && !strcmp(o, "F ent/JimeO B\xe2\x80\x9dU?= g\xe2\x80\x8aU+"), "run mistral3: '%s'",
           o ? o : "");
    free(o);
    free(e);
    /* gemma3: sliding-window and global layers, GeGLU; gemma4: per-layer
     * head sizes, shared caches, per-layer inputs, a final softcap (the
     * texts hold U+20AC and U+2026) */
    rc = run("show data/arch/gemma4-f32.gguf --no-tensors", &o, &e);
    CHECKF(rc == 0 && o && strstr(o, "runnable:  yes: gemma4, 7 layers"), "show gemma4: '%s'", o ? o : "");
    free(o);
    free(e);
    rc = run("run -m data/arch/gemma3-f32.gguf -p 'Mia opened the garden gate' -n 16 --temp 0", &o, &e);
    CHECKF(rc == 0 && o && !strcmp(o, "ised Onceer\xe2\x82\xac heq6w stke dayNily L~"), "run gemma3: '%s'", o ? o : "");
    free(o);
    free(e);
    /* the F32 cache's attention loop (its own window test) gives the same text */
    rc = run("run -m data/arch/gemma3-f32.gguf -p 'Mia opened the garden gate' -n 16 --temp 0 --kv-f32", &o, &e);
    CHECKF(rc == 0 && o && !strcmp(o, "ised Onceer\xe2\x82\xac heq6w stke dayNily L~"), "run gemma3 --kv-f32: '%s'",
           o ? o : "");
    free(o);
    free(e);
    rc = run("run -m data/arch/gemma4-f32.gguf -p 'A quiet river runs through' -n 16 --temp 0", &o, &e);
    CHECKF(rc == 0 && o && !strcmp(o, " llpp[? bigt\xe2\x80\xa6pp hadUL[pp[t"), "run gemma4: '%s'", o ? o : "");
    free(o);
    free(e);
    /* deepseek2: the KV cache is one latent row (24 + 8 F16 values) per
     * token and layer; the text holds U+00F1 */
    rc = run("show data/arch/deepseek2-f16.gguf", &o, &e);
    CHECKF(rc == 0 && o && strstr(o, "runnable:  yes: deepseek2, 4 layers") &&
               strstr(o, "KV cache (F16) 256 bytes per token in 4 of 4 layers"),
           "show deepseek2: '%s'", o ? o : "");
    free(o);
    free(e);
    rc = run("run -m data/arch/deepseek2-f16.gguf -p 'Grandma told us a story about' -n 16 --temp 0", &o, &e);
    CHECKF(rc == 0 && o && !strcmp(o, "I\xc3\xb1p One her<\xc3\xb1 heTil th[ said|zon"), "run deepseek2: '%s'",
           o ? o : "");
    free(o);
    free(e);
    /* gpt-oss: attention sinks, a sliding window of 16 on layers 0 and 2
     * (the text depends on it from its second token), biased MoE */
    rc = run("show data/arch/gpt-oss-f32.gguf", &o, &e);
    CHECKF(rc == 0 && o && strstr(o, "runnable:  yes: gpt-oss, 3 layers") &&
               strstr(o, "experts:   4, 2 used per token, width 32\n"),
           "show gpt-oss: '%s'", o ? o : "");
    free(o);
    free(e);
    rc = run("run -m data/arch/gpt-oss-f32.gguf -p 'The teacher asked the class' -n 16 --temp 0", &o, &e);
    CHECKF(rc == 0 && o && !strcmp(o, "adime! said\"a~riX a veryitingGIved"), "run gpt-oss: '%s'", o ? o : "");
    free(o);
    free(e);
    /* nemotron_h: Mamba-2, attention and relu^2 MLP blocks; the text holds
     * U+00A0 and U+2019 */
    rc = run("run -m data/arch/nemotron-h-f32.gguf -p 'A quiet river runs through' -n 16 --temp 0", &o, &e);
    CHECKF(rc == 0 && o && !strcmp(o, "ith up\xc2\xa0I day wV t rWen saidc\xe2\x80\x99idV"), "run nemotron_h: '%s'",
           o ? o : "");
    free(o);
    free(e);
    /* nemotron_h_moe: sigmoid-routed relu^2 experts with a shared expert */
    rc = run("show data/arch/nemotron-h-moe-f16.gguf", &o, &e);
    CHECKF(rc == 0 && o && strstr(o, "runnable:  yes: nemotron_h_moe, 5 layers") &&
               strstr(o, "experts:   6, 2 used per token, width 24, shared expert width 48\n"),
           "show nemotron_h_moe: '%s'", o ? o : "");
    free(o);
    free(e);
    rc = run("run -m data/arch/nemotron-h-moe-f16.gguf -p 'Yesterday the baker made' -n 16 --temp 0", &o, &e);
    CHECKF(rc == 0 && o &&
               !strcmp(o, "EWC2<` I I v fendadC\xc3\xb1"
                          "ent"),
           "run nemotron_h_moe: '%s'", o ? o : "");
    free(o);
    free(e);

    rc = run("bench -m ../models/stories260K.gguf -p 16 -n 8 -r 2 -t 1 -o json", &o, &e);
    CHECK(rc == 0);
    json_error_t je;
    json_t *j = o ? json_loads(o, 0, &je) : NULL;
    CHECKF(j && json_is_array(j) && json_array_size(j) == 2, "bench json: %s", o ? o : "");
    if (j && json_array_size(j) == 2) {
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(j, 0), "test")), "pp16"));
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(j, 1), "test")), "tg8"));
        CHECK(json_real_value(json_object_get(json_array_get(j, 1), "avg_ts")) > 0);
        CHECK(json_string_value(json_object_get(json_array_get(j, 0), "cpu_path")) != NULL);
        const char *tk = json_string_value(json_object_get(json_array_get(j, 0), "type_k"));
        CHECKF(tk && !strcmp(tk, "f16"), "type_k %s", tk ? tk : "(none)");
    }
    json_decref(j);
    free(o);
    free(e);

    rc = run("bench -m ../models/stories260K.gguf -p 16 -n 8 -r 1", &o, &e);
    CHECK(rc == 0 && o && strstr(o, "| pp16 |") && strstr(o, "| tg8 |") && strstr(o, "±"));
    free(o);
    free(e);

    /* -s: tg over several sequences at once, one row per stream count */
    rc = run("bench -m ../models/stories260K.gguf -p 0 -n 8 -s 1,3 -r 1 -t 1 -o json", &o, &e);
    CHECK(rc == 0);
    j = o ? json_loads(o, 0, &je) : NULL;
    CHECKF(j && json_is_array(j) && json_array_size(j) == 2, "bench -s json: %s", o ? o : "");
    if (j && json_array_size(j) == 2) {
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(j, 0), "test")), "tg8"));
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(j, 1), "test")), "tg8 x3"));
        CHECK(json_integer_value(json_object_get(json_array_get(j, 1), "n_streams")) == 3);
        CHECK(json_real_value(json_object_get(json_array_get(j, 1), "avg_ts")) > 0);
    }
    json_decref(j);
    free(o);
    free(e);

    /* --roofline: each tg row gets the read bandwidth measured around it,
     * the roofline that allows (streams x bandwidth / the bytes one step
     * reads) and the share of it reached; other rows get nulls.  The stories
     * model's output is a tensor of its own, so a step reads all but the
     * 128 KiB token_embd.  The share is printed to 6 decimals (5e-7 is
     * more than 1e-5 of it where the emulated aarch64 build is slow). */
    rc = run("bench -m ../models/stories260K.gguf -p 16 -n 8 -s 1,2 -r 1 -t 1 --roofline -o json", &o, &e);
    CHECK(rc == 0);
    j = o ? json_loads(o, 0, &je) : NULL;
    CHECKF(j && json_is_array(j) && json_array_size(j) == 3, "bench --roofline json: %s", o ? o : "");
    if (j && json_array_size(j) == 3) {
        json_t *pp = json_array_get(j, 0);
        CHECK(json_is_null(json_object_get(pp, "read_gbs")) && json_is_null(json_object_get(pp, "roofline_share")));
        for (int i = 1; i < 3; i++) {
            json_t *r = json_array_get(j, (size_t)i);
            const double step = (double)json_integer_value(json_object_get(r, "model_step_bytes"));
            const double bw = json_real_value(json_object_get(r, "read_gbs"));
            const double top = json_real_value(json_object_get(r, "roofline_ts"));
            const double ts = json_real_value(json_object_get(r, "avg_ts"));
            const double share = json_real_value(json_object_get(r, "roofline_share"));
            CHECK(step == (double)(json_integer_value(json_object_get(r, "model_size")) - 131072));
            CHECKF(bw > 0 && fabs(top - i * bw * 1e9 / step) <= 1e-5 * top &&
                       fabs(share - ts / top) <= 1e-5 * share + 5e-7,
                   "row %d: %g GB/s, %g t/s of %g (%g)", i, bw, ts, top, share);
        }
    }
    json_decref(j);
    free(o);
    free(e);
    rc = run("bench -m ../models/stories260K.gguf -p 0 -n 8 -r 1 -t 1 --roofline", &o, &e);
    CHECK(rc == 0 && o && strstr(o, "| read GB/s | roofline t/s | share |") && strstr(o, " % |") && e &&
          strstr(e, "read bandwidth"));
    free(o);
    free(e);

    /* -pg: prompt then generation as one test; -d: after a filled context,
     * as llama-bench names them */
    rc = run("bench -m ../models/stories260K.gguf -p 0 -n 0 -pg 16,8 -d 0,40 -r 1 -t 1 -o json", &o, &e);
    CHECK(rc == 0);
    j = o ? json_loads(o, 0, &je) : NULL;
    CHECKF(j && json_is_array(j) && json_array_size(j) == 2, "bench -pg -d json: %s", o ? o : "");
    if (j && json_array_size(j) == 2) {
        json_t *r0 = json_array_get(j, 0), *r1 = json_array_get(j, 1);
        CHECK(!strcmp(json_string_value(json_object_get(r0, "test")), "pp16+tg8"));
        CHECK(!strcmp(json_string_value(json_object_get(r1, "test")), "pp16+tg8 @ d40"));
        CHECK(json_integer_value(json_object_get(r0, "n_prompt")) == 16 &&
              json_integer_value(json_object_get(r0, "n_gen")) == 8);
        CHECK(json_integer_value(json_object_get(r1, "n_depth")) == 40);
        CHECK(json_real_value(json_object_get(r1, "avg_ts")) > 0);
    }
    json_decref(j);
    free(o);
    free(e);
    /* depth + prompt + generation past the model's context (2048) is refused */
    rc = run("bench -m ../models/stories260K.gguf -p 0 -n 8 -d 2045 -r 1 -t 1", &o, &e);
    CHECK(rc == 1 && e && strstr(e, "2053") && strstr(e, "2048"));
    free(o);
    free(e);
    rc = run("bench -m ../models/stories260K.gguf -pg 16", &o, &e);
    CHECK(rc == 2 && e && strstr(e, "-pg"));
    free(o);
    free(e);

    rc = run("quantize ../models/stories260K.gguf /tmp/kiln-cli-q8.gguf q8_0", &o, &e);
    CHECK(rc == 0);
    free(o);
    free(e);
    rc = run("run -m /tmp/kiln-cli-q8.gguf -p 'Tom had a red' -n 8 --temp 0", &o, &e);
    CHECK(rc == 0 && o && strlen(o) > 0);
    free(o);
    free(e);
    remove(subst("/tmp/kiln-cli-q8.gguf"));

    test_chat();
    test_chat_view();
    test_chat_hybrid();
    test_encoders();

    rc = run("frobnicate", &o, &e);
    CHECK(rc == 2 && e && strstr(e, "unknown command"));
    free(o);
    free(e);
    rc = run("run -m /nonexistent.gguf -p x", &o, &e);
    CHECK(rc == 1 && e && strstr(e, "/nonexistent.gguf") && strchr(e, '\n') == e + strlen(e) - 1);
    free(o);
    free(e);
    remove(subst("/tmp/kiln-cli-out.txt"));
    remove(subst("/tmp/kiln-cli-err.txt"));
    rmdir(g_dir);
    return t_done();
}
