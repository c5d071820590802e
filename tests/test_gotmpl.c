/*
 * Go text/template subset with Ollama's data model (src/chat/gotmpl.c).
 *   - language cases: each template, its data and the output worked out by
 *     hand from Go's text/template rules (trim markers, scoping, map order,
 *     the functions' results, how values print);
 *   - Ollama's chat rendering: a legacy template run per turn and cut at
 *     the last .Response, the {{ .Response }} Ollama appends, collated
 *     messages, and real-shaped templates (Qwen3's and Llama 3.1's as
 *     Ollama's registry carries them, Command R's tool listing) whose
 *     expected prompts are in tests/data/templates/go/ (checked by
 *     tests/gen_gotmpl.go against Go's own text/template);
 *   - errors, each one line naming what is wrong;
 *   - hostile templates: the step, output and memory budgets, cancellation,
 *     integer edges, and the corpus in data/hostile/gotmpl, each failing
 *     with the error its first line names.
 */
#include "chat/gotmpl.h"
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The checks below read a failure's message from a buffer: these take the
 * last error into it. */
static kgt *compile_e(const char *src, size_t len, char *err, size_t errlen) {
    kgt *t;
    if (chat_gotmpl_compile(src, len, &t)) snprintf(err, errlen, "%s", kiln_last_error());
    return t;
}
static char *render_opts_e(const kgt *t, const json_t *data, const chat_opts *o, char *err, size_t errlen) {
    char *out;
    if (chat_gotmpl_render_opts(t, data, o, &out)) snprintf(err, errlen, "%s", kiln_last_error());
    return out;
}
static char *render_e(const kgt *t, const json_t *data, char *err, size_t errlen) {
    return render_opts_e(t, data, NULL, err, errlen);
}
static char *render_chat_opts_e(const kgt *t, const json_t *m, const json_t *tools, int think, const chat_opts *o,
                                char *err, size_t errlen) {
    char *out;
    if (chat_gotmpl_render_chat_opts(t, m, tools, think, o, &out)) snprintf(err, errlen, "%s", kiln_last_error());
    return out;
}
static char *render_chat_e(const kgt *t, const json_t *m, const json_t *tools, int think, char *err, size_t errlen) {
    return render_chat_opts_e(t, m, tools, think, NULL, err, errlen);
}

static json_t *J(const char *s) {
    json_error_t je;
    json_t *j = json_loads(s, JSON_DECODE_ANY, &je);
    CHECKF(j != NULL, "bad JSON in the test (%s): %s", je.text, s);
    return j;
}

static void expect(const char *tmpl, const char *data, const char *want) {
    char err[256];
    kgt *t = compile_e(tmpl, strlen(tmpl), err, sizeof err);
    CHECKF(t != NULL, "compile '%s': %s", tmpl, err);
    if (!t) return;
    json_t *d = J(data);
    char *got = render_e(t, d, err, sizeof err);
    CHECKF(got && !strcmp(got, want), "'%s' with %s:\n  got  [%s]%s\n  want [%s]", tmpl, data, got ? got : "(null)",
           got ? "" : err, want);
    free(got);
    json_decref(d);
    chat_gotmpl_free(t);
}

/* Compiling (data NULL) or rendering fails with a message containing words. */
static void refused(const char *tmpl, const char *data, const char *words) {
    char err[256] = "";
    kgt *t = compile_e(tmpl, strlen(tmpl), err, sizeof err);
    char *got = NULL;
    if (t && data) {
        json_t *d = J(data);
        got = render_e(t, d, err, sizeof err);
        json_decref(d);
    }
    CHECKF(!got && (data ? t != NULL : t == NULL), "'%s': %s", tmpl, data ? "rendered" : "compiled");
    CHECKF(strstr(err, words) != NULL, "'%s': the message '%s' does not say '%s'", tmpl, err, words);
    CHECKF(!strncmp(err, "line ", 5) && !strchr(err, '\n'), "'%s': not one line with its line number: %s", tmpl, err);
    free(got);
    chat_gotmpl_free(t);
}

static void test_language(void) {
    expect("Hello, {{ .Name }}!", "{\"Name\":\"Ann\"}", "Hello, Ann!");
    /* trim markers take all whitespace up to the text, newlines too */
    expect("a  \n {{- .X -}} \n  b", "{\"X\":1}", "a1b");
    expect("a {{-3}} b", "{}", "a -3 b"); /* "{{-3" is the number, no trim */
    expect("{{/* a comment */}}x{{- /* another */ -}}  y", "{}", "xy");
    /* if / else if / else, and what is true */
    const char *ife = "{{ if .A }}A{{ else if .B }}B{{ else }}C{{ end }}";
    expect(ife, "{\"B\":true}", "B");
    expect(ife, "{\"A\":[0]}", "A");
    expect(ife, "{\"A\":[],\"B\":{},\"C\":1}", "C");
    expect(ife, "{\"A\":\"\",\"B\":0}", "C");
    expect(ife, "{\"A\":0.0,\"B\":\"x\"}", "B");
    /* range: index and element, else, objects in key order */
    const char *rng = "{{ range $i, $m := .L }}{{ $i }}={{ $m }};{{ else }}none{{ end }}";
    expect(rng, "{\"L\":[\"a\",\"b\"]}", "0=a;1=b;");
    expect(rng, "{\"L\":[]}", "none");
    expect(rng, "{}", "none");
    expect("{{ range $k, $v := .M }}{{ $k }}:{{ $v }} {{ end }}", "{\"M\":{\"b\":2,\"a\":1,\"ab\":3}}",
           "a:1 ab:3 b:2 ");
    expect("{{ range .M }}{{ . }}{{ end }}", "{\"M\":{\"b\":2,\"a\":1}}", "12");
    expect("{{ range .L }}{{ if eq . 2 }}{{ continue }}{{ end }}{{ if eq . 4 }}{{ break }}{{ end }}{{ . }}{{ end }}",
           "{\"L\":[1,2,3,4,5]}", "13");
    /* variables: = reaches the outer one; := inside a body ends with it */
    expect("{{ $n := 0 }}{{ range .L }}{{ $n = . }}{{ end }}{{ $n }}", "{\"L\":[3,5]}", "5");
    expect("{{ $x := 1 }}{{ if true }}{{ $x := 2 }}{{ $x }}{{ end }}{{ $x }}", "{}", "21");
    expect("{{ range .L }}{{ $.P }}{{ . }}{{ end }}", "{\"P\":\"-\",\"L\":[1,2]}", "-1-2");
    expect("{{ with $v := .F }}{{ $v.G }}{{ end }}", "{\"F\":{\"G\":\"g\"}}", "g");
    /* with */
    const char *with = "{{ with .F }}[{{ .G }}]{{ else }}no{{ end }}";
    expect(with, "{\"F\":{\"G\":\"g\"}}", "[g]");
    expect(with, "{\"F\":null}", "no");
    /* comparisons; eq against any of the rest */
    expect("{{ eq .R \"user\" \"tool\" }} {{ ne 1 2 }} {{ lt 1 2 }} {{ le 2 2 }} {{ gt 1 2 }} {{ ge \"b\" \"a\" }}",
           "{\"R\":\"tool\"}", "true true true true false true");
    /* and / or give the deciding value, and stop there */
    expect("{{ or .E \"dflt\" }}|{{ and 1 0 }}|{{ and 1 \"x\" }}|{{ not .E }}|{{ or 0 .Missing.Deeper }}",
           "{\"E\":\"\"}", "dflt|0|x|true|");
    expect("{{ if and .L (index .L 0) }}first{{ else }}none{{ end }}", "{\"L\":[]}", "none"); /* index not evaluated */
    /* len, index, slice */
    expect("{{ len .L }} {{ index .L 1 }} {{ slice .L 1 }} {{ len (slice .L 1 2) }} {{ slice .S 1 3 }} {{ index .M "
           "\"k\" }} "
           "{{ len .M }} {{ index .N 0 1 }}",
           "{\"L\":[1,2,3],\"S\":\"hello\",\"M\":{\"k\":\"v\"},\"N\":[[5,6]]}", "3 2 [2,3] 1 el v 1 6");
    /* printing: strings as they are, numbers as Go prints float64 and
     * int, objects and arrays as compact JSON with HTML escapes */
    expect("{{ .A }} {{ .B }} {{ .C }} {{ .D }} {{ .E }} {{ .F }} {{ .G }}",
           "{\"A\":1000000.0,\"B\":0.5,\"C\":123456.0,\"D\":0.00001,\"E\":-7,\"F\":true,\"G\":1.25e-3}",
           "1e+06 0.5 123456 1e-05 -7 true 0.00125");
    expect("{{ printf \"%s-%d-%v-%q-%t %%\" \"a\" 3 true \"q\" false }} {{ print 1 2 \"x\" 3 }} {{ json .O }} {{ .O }} "
           "{{ json \"s\" }}",
           "{\"O\":{\"a\":\"<b>&\",\"n\":[1,2.5]}}",
           "a-3-true-\"q\"-false % 1 2x3 {\"a\":\"\\u003cb\\u003e\\u0026\",\"n\":[1,2.5]} "
           "{\"a\":\"\\u003cb\\u003e\\u0026\",\"n\":[1,2.5]} \"s\"");
    expect("{{ println \"a\" 1 }}", "{}", "a 1\n");
    /* pipelines pass the value as the last argument */
    expect("{{ .S | printf \"%s!\" }} {{ \"abc\" | len }} {{ .L | len | printf \"%d items\" }}",
           "{\"S\":\"hi\",\"L\":[1]}", "hi! 3 1 items");
    expect("{{ (index .L 0).Name }} {{ (index .L 0).Name | len }}", "{\"L\":[{\"Name\":\"n0\"}]}", "n0 2");
    /* literals */
    expect("{{ \"a\\tb\\u00e9\\x41\" }}{{ `raw\\n` }} {{ 'a' }} {{ 0x10 }}|", "{}",
           "a\tb\xc3\xa9"
           "Araw\\n 97 16|");
    /* a field reads its snake_case key as well (Ollama's structs over
     * OpenAI-shaped JSON); a missing one is empty */
    expect("{{ .ToolCallID }}/{{ .Msg.ToolName }}/{{ .Missing }}/{{ .Missing.Deeper }}/{{ .IsThinkSet }}|",
           "{\"tool_call_id\":\"c1\",\"Msg\":{\"tool_name\":\"f\"},\"is_think_set\":false}", "c1/f///false|");
    expect(
        "{{ range $i, $_ := .L }}{{ $last := eq (len (slice $.L $i)) 1 }}{{ . }}{{ if not $last }},{{ end }}{{ end }}",
        "{\"L\":[\"a\",\"b\",\"c\"]}", "a,b,c");
}

static void test_errors(void) {
    refused("{{ .A ", NULL, "unclosed action");
    refused("{{ if .A }}x", NULL, "no {{end}}");
    refused("x{{ end }}", NULL, "unexpected {{end}}");
    refused("{{ define \"x\" }}{{ end }}", NULL, "not supported");
    refused("{{ template \"x\" }}", NULL, "not supported");
    refused("{{ break }}", NULL, "outside {{range}}");
    refused("{{ \"abc }}", NULL, "unterminated");
    refused("{{ (len .A }}", NULL, "unclosed left paren");
    refused("{{ .A ) }}", NULL, "unexpected right paren");
    refused("a\nb\n{{ % }}", NULL, "line 3");
    refused("{{ if .A }}{{ else }}{{ else }}{{ end }}", NULL, "second {{else}}");
    refused("{{ nofunc 1 }}", "{}", "function \"nofunc\" not defined");
    refused("{{ .S.X }}", "{\"S\":\"str\"}", "can't evaluate field X in type string");
    refused("{{ index .L 5 }}", "{\"L\":[1]}", "index out of range");
    refused("{{ slice .L 2 1 }}", "{\"L\":[1,2]}", "slice index out of range");
    refused("{{ lt 1 \"a\" }}", "{}", "incompatible types");
    refused("{{ $y }}", "{}", "undefined variable: $y");
    refused("{{ if true }}{{ $x := 1 }}{{ end }}{{ $x }}", "{}", "undefined variable: $x");
    refused("{{ .A 1 }}", "{}", "can't give argument to non-function");
    refused("{{ range 5 }}{{ end }}\n{{ range .S }}{{ end }}", "{\"S\":\"s\"}",
            "line 2: range can't iterate over string");
}

/* Numbers are read within the length given: a template that ends in a
 * number is lexed from a buffer of exactly its bytes (no terminator, so
 * reading on is a heap-buffer-overflow under ASan), or from the front of
 * a longer text whose digits go on past the length. */
static void test_number_bounds(void) {
    static const struct {
        const char *src, *msg;
    } ends[] = {{"{{ 12", "unclosed action"},     {"{{ 1.5e+3", "unclosed action"}, {"{{ -0x1F", "unclosed action"},
                {"{{ .5", "unclosed action"},     {"{{ 7e", "bad number syntax"}, /* the 'e' is no part of "7" */
                {"{{ 0x1p-", "bad number syntax"}};
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        const size_t n = strlen(ends[i].src);
        char *b = malloc(n);
        CHECK(b != NULL);
        memcpy(b, ends[i].src, n);
        char err[256] = "";
        kgt *t = compile_e(b, n, err, sizeof err);
        CHECKF(!t && strstr(err, ends[i].msg), "'%s' cut at its end: %s", ends[i].src, t ? "compiled" : err);
        chat_gotmpl_free(t);
        free(b);
    }
    const char *longer = "{{ 1234567 }}";
    char err[256] = "";
    kgt *t = compile_e(longer, 6, err, sizeof err); /* "{{ 123" */
    CHECKF(!t && strstr(err, "unclosed action"), "a number cut by the length: %s", t ? "compiled" : err);
    chat_gotmpl_free(t);
    expect("{{ 1.5e+3 }} {{ -0x1F }} {{ .5 }} {{ 1e-2 }} {{ +4 }}", "{}", "1500 -31 0.5 0.01 4");
    refused("{{ 12ab }}", NULL, "bad number syntax");
    char big[300] = "{{ 1";
    memset(big + 4, '0', 200);
    strcpy(big + 204, " }}");
    refused(big, NULL, "a number of more than 127 characters");
}

static char *chat(const char *tmpl, const char *messages, const char *tools, int think) {
    char err[256];
    kgt *t = compile_e(tmpl, strlen(tmpl), err, sizeof err);
    CHECKF(t != NULL, "compile: %s", err);
    if (!t) return NULL;
    json_t *m = J(messages), *tl = tools ? J(tools) : NULL;
    char *out = render_chat_e(t, m, tl, think, err, sizeof err);
    CHECKF(out != NULL, "render: %s", err);
    json_decref(m);
    json_decref(tl);
    chat_gotmpl_free(t);
    return out;
}

static void expect_chat(const char *what, const char *tmpl, const char *messages, const char *tools, int think,
                        const char *want) {
    char *got = chat(tmpl, messages, tools, think);
    CHECKF(got && !strcmp(got, want), "%s:\n  got  [%s]\n  want [%s]", what, got ? got : "(null)", want);
    free(got);
}

static const char *k_conv = "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"u1\"},"
                            "{\"role\":\"assistant\",\"content\":\"a1\"},{\"role\":\"user\",\"content\":\"u2\"}]";

static void test_ollama_chat(void) {
    /* a legacy template: one run per turn, the last one up to .Response
     * (what follows it, here <|im_end|>, is cut) */
    expect_chat(
        "legacy ChatML",
        "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}{{ if .Prompt }}<|im_start|>user\n"
        "{{ .Prompt }}<|im_end|>\n{{ end }}<|im_start|>assistant\n{{ .Response }}<|im_end|>\n",
        k_conv, NULL, -1,
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nu1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
        "<|im_start|>user\nu2<|im_end|>\n<|im_start|>assistant\n");
    /* a template naming neither .Messages nor .Response gets one at its end */
    expect_chat("legacy [INST] without .Response",
                "[INST] {{ if .System }}{{ .System }} {{ end }}{{ .Prompt }} [/INST]", k_conv, NULL, -1,
                "[INST] S u1 [/INST]a1[INST] u2 [/INST]");
    /* the cut is where .Response stands in the text, even in a branch not taken */
    expect_chat("cut inside a branch", "{{ .Prompt }}:{{ if .Response }}{{ .Response }}{{ end }}</s>",
                "[{\"role\":\"user\",\"content\":\"q\"}]", NULL, -1, "q:");
    /* .Messages: systems joined for .System, same-role neighbours merged
     * (tool results kept apart), tools and think passed */
    expect_chat("collated messages",
                "{{ range .Messages }}<{{ .Role }}>{{ .Content }}{{ end }}|{{ .System }}|{{ len .Tools }}|{{ .Think }}"
                "{{ .IsThinkSet }}",
                "[{\"role\":\"system\",\"content\":\"s1\"},{\"role\":\"system\",\"content\":\"s2\"},"
                "{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"},"
                "{\"role\":\"tool\",\"content\":\"t1\"},{\"role\":\"tool\",\"content\":\"t2\"}]",
                "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", 0,
                "<system>s1\n\ns2<user>a\n\nb<tool>t1<tool>t2|s1\n\ns2|1|falsetrue");
    /* Ollama's message fields over OpenAI's: thinking from
     * reasoning_content, tool_name from name, calls' arguments as JSON */
    expect_chat(
        "message fields",
        "{{ range .Messages }}{{ .Thinking }}|{{ range .ToolCalls }}{{ .Function.Name }}{{ .Function.Arguments }}"
        "{{ end }}|{{ .ToolName }}|{{ .ToolCallID }};{{ end }}",
        "[{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"hm\",\"tool_calls\":[{\"id\":\"c1\","
        "\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":{\"city\":\"Paris\",\"n\":2}}}]},"
        "{\"role\":\"tool\",\"content\":\"18C\",\"name\":\"get\",\"tool_call_id\":\"c1\"}]",
        NULL, -1, "hm|get{\"city\":\"Paris\",\"n\":2}||;||get|c1;");
}

/* The real-shaped templates against the prompts Go's text/template gives
 * (tests/data/templates/go/NAME.gotmpl, NAME.cases.json: each case's
 * messages, tools, think and the expected prompt). */
static void test_real_templates(void) {
    const char *names[] = {"qwen3", "llama3.1", "command-r", "chatml-legacy"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "data/templates/go/%s.gotmpl", names[i]);
        size_t len = 0;
        char *src = t_read_file(path, &len);
        CHECKF(src != NULL, "cannot read %s", path);
        snprintf(path, sizeof path, "data/templates/go/%s.cases.json", names[i]);
        char *cases_txt = t_read_file(path, NULL);
        CHECKF(cases_txt != NULL, "cannot read %s", path);
        if (!src || !cases_txt) continue;
        char err[256];
        kgt *t = compile_e(src, len, err, sizeof err);
        CHECKF(t != NULL, "%s: %s", names[i], err);
        json_t *cases = J(cases_txt);
        size_t k;
        json_t *c;
        int n = 0;
        json_array_foreach(cases, k, c) {
            json_t *think = json_object_get(c, "think");
            /* a hundredth of each default budget: real templates render far inside them */
            chat_opts tight = {CHAT_DEFAULT_STEPS / 100, CHAT_DEFAULT_OUTPUT / 100, CHAT_DEFAULT_MEMORY / 100, NULL,
                               NULL};
            char *got =
                t ? render_chat_opts_e(t, json_object_get(c, "messages"), json_object_get(c, "tools"),
                                       json_is_boolean(think) ? json_is_true(think) : -1, &tight, err, sizeof err)
                  : NULL;
            const char *want = json_string_value(json_object_get(c, "prompt"));
            CHECKF(got && want && !strcmp(got, want), "%s case '%s':\n  got  [%s]%s\n  want [%s]", names[i],
                   json_string_value(json_object_get(c, "name")), got ? got : "(null)", got ? "" : err, want);
            free(got);
            n++;
        }
        CHECKF(n >= 2, "%s: %d cases", names[i], n);
        json_decref(cases);
        chat_gotmpl_free(t);
        free(src);
        free(cases_txt);
    }
}

/* Renders tmpl with data under o; the output or NULL with err. */
static char *render_opts(const char *tmpl, const char *data, const chat_opts *o, char *err, size_t errlen) {
    kgt *t = compile_e(tmpl, strlen(tmpl), err, errlen);
    CHECKF(t != NULL, "compile '%s': %s", tmpl, err);
    if (!t) return NULL;
    json_t *d = J(data);
    char *out = render_opts_e(t, d, o, err, errlen);
    json_decref(d);
    chat_gotmpl_free(t);
    return out;
}

static int n_polls;
static int cancel_after(void *arg) { return ++n_polls >= *(int *)arg; }

static void test_budgets(void) {
    char err[256];
    /* an integer constant past int64 is a float, as Go reads it, not INT64_MAX */
    expect("{{ 99999999999999999999 }}", "{}", "1e+20");
    expect("{{ 9223372036854775807 }}", "{}", "9223372036854775807");
    chat_opts o = {.max_steps = 10000};
    char *out = render_opts("{{ range 1000000 }}{{ range 1000000 }}{{ end }}{{ end }}", "{}", &o, err, sizeof err);
    CHECKF(!out && strstr(err, "render exceeded its step budget (10000 steps)"), "steps: %s", err);
    free(out);
    o.max_steps = 1000000;
    out = render_opts("{{ range 300 }}{{ range 100 }}{{ end }}{{ end }}ok", "{}", &o, err, sizeof err);
    CHECKF(out && !strcmp(out, "ok"), "steps: %s", out ? out : err);
    free(out);
    o = (chat_opts){.max_output = 1000};
    out = render_opts("{{ range 50 }}xxxxxxxxxxxxxxxxxxxx{{ end }}", "{}", &o, err, sizeof err);
    CHECKF(out && strlen(out) == 1000, "output at the limit: %s", out ? "" : err);
    free(out);
    out = render_opts("{{ range 51 }}xxxxxxxxxxxxxxxxxxxx{{ end }}", "{}", &o, err, sizeof err);
    CHECKF(!out && strstr(err, "render exceeded its output budget (1000 bytes)"), "output: %s", err);
    free(out);
    out = render_opts(
        "{{ $s := \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\" }}{{ range 6 }}{{ $s = print $s $s }}{{ end }}", "{}",
        &o, err, sizeof err);
    CHECKF(!out && strstr(err, "print: render exceeded its output budget (1000 bytes)"), "print: %s", err);
    free(out);
    o = (chat_opts){.max_memory = 4096};
    out = render_opts("{{ range 1000 }}{{ $x := print \"0123456789\" }}{{ end }}", "{}", &o, err, sizeof err);
    CHECKF(!out && strstr(err, "render exceeded its memory budget (4096 bytes)"), "memory: %s", err);
    free(out);
    int after = 3;
    n_polls = 0;
    o = (chat_opts){.cancelled = cancel_after, .cancel_arg = &after};
    out = render_opts("{{ range 1000000 }}{{ range 1000000 }}{{ end }}{{ end }}", "{}", &o, err, sizeof err);
    CHECKF(!out && strstr(err, "render cancelled") && n_polls == 3, "cancel: %s after %d polls", err, n_polls);
    free(out);
    /* the chat form shares one budget across its per-turn runs */
    kgt *t = compile_e("{{ range 4000 }}{{ end }}{{ .Prompt }}", 38, err, sizeof err);
    json_t *m = J("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"},"
                  "{\"role\":\"user\",\"content\":\"c\"},{\"role\":\"assistant\",\"content\":\"d\"},"
                  "{\"role\":\"user\",\"content\":\"e\"}]");
    o = (chat_opts){.max_steps = 10000};
    out = t ? render_chat_opts_e(t, m, NULL, -1, &o, err, sizeof err) : NULL;
    CHECKF(!out && strstr(err, "step budget"), "chat turns: %s", out ? out : err);
    free(out);
    o.max_steps = 20000;
    out = t ? render_chat_opts_e(t, m, NULL, -1, &o, err, sizeof err) : NULL;
    CHECKF(out && !strcmp(out, "abcde"), "chat turns: %s", out ? out : err);
    free(out);
    json_decref(m);
    chat_gotmpl_free(t);
}

static void test_source(void) {
    /* the compiled template holds its own copy of the source */
    char *src = strdup("Hi {{ .Name }}!");
    char err[256];
    kgt *t = compile_e(src, strlen(src), err, sizeof err);
    memset(src, 'x', strlen(src));
    free(src);
    json_t *d = J("{\"Name\":\"Ann\"}");
    char *out = t ? render_e(t, d, err, sizeof err) : NULL;
    CHECKF(out && !strcmp(out, "Hi Ann!"), "copy: %s", out ? out : err);
    free(out);
    json_decref(d);
    chat_gotmpl_free(t);
    /* a number at the very end of the text, no terminator after it */
    static const char *const ends[] = {"{{ 12345", "{{ 1.5e3", "{{ 0x1F", "{{ -7"};
    for (size_t i = 0; i < sizeof ends / sizeof *ends; i++) {
        size_t n = strlen(ends[i]);
        char *exact = malloc(n);
        memcpy(exact, ends[i], n);
        t = compile_e(exact, n, err, sizeof err);
        CHECKF(!t && strstr(err, "unclosed action"), "%s: %s", ends[i], t ? "compiled" : err);
        chat_gotmpl_free(t);
        free(exact);
    }
    refused("{{ index .L -9223372036854775808 }}", "{\"L\":[1]}", "index out of range");
    refused("{{ slice .S 1 9223372036854775807 }}", "{\"S\":\"abc\"}", "slice index out of range");
    refused("{{ range 9223372036854775807 }}{{ end }}", "{}", "range over 9223372036854775807 integers");
}

/* Every template of data/hostile/gotmpl fails cleanly under the default
 * budgets with the error its first line names. */
static void test_hostile_corpus(void) {
    DIR *d = opendir("data/hostile/gotmpl");
    CHECK(d != NULL);
    if (!d) return;
    struct dirent *e;
    int n = 0;
    json_t *m = J("[{\"role\":\"user\",\"content\":\"hi\"}]");
    const char *tag = "{{- /* expect: ";
    while ((e = readdir(d)) != NULL) {
        size_t nl = strlen(e->d_name);
        if (nl < 6 || strcmp(e->d_name + nl - 5, ".tmpl")) continue;
        char path[512];
        snprintf(path, sizeof path, "data/hostile/gotmpl/%s", e->d_name);
        size_t len;
        char *src = t_read_file(path, &len);
        CHECKF(src && !strncmp(src, tag, strlen(tag)), "%s: no expect line", path);
        if (!src || strncmp(src, tag, strlen(tag))) {
            free(src);
            continue;
        }
        char want[128];
        const char *we = strstr(src, " */");
        snprintf(want, sizeof want, "%.*s", we ? (int)(we - src - strlen(tag)) : 0, src + strlen(tag));
        char err[512] = "";
        kgt *t = compile_e(src, len, err, sizeof err);
        char *out = t ? render_chat_e(t, m, NULL, -1, err, sizeof err) : NULL;
        CHECKF(!out && strstr(err, want), "%s: want an error with '%s', got %s", e->d_name, want, out ? "output" : err);
        free(out);
        chat_gotmpl_free(t);
        free(src);
        n++;
    }
    closedir(d);
    json_decref(m);
    CHECKF(n >= 10, "%d hostile templates", n);
}

int main(void) {
    test_number_bounds();
    test_language();
    test_errors();
    test_ollama_chat();
    test_real_templates();
    test_budgets();
    test_source();
    test_hostile_corpus();
    return t_done();
}
