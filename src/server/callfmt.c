/* The tool-call forms of the model families (callfmt.h): which one a model
 * writes, and the calls in one section of a reply.
 *
 * A section is parsed whole (gen.c holds its text back until the closer or
 * the reply's end), so a streamed reply gives the same calls as a whole
 * one.  Each parser accepts the form as the family's chat template writes
 * it, with blanks between the parts, and nothing else: a section that
 * breaks the form is content as written, never dropped. */
#define _GNU_SOURCE
#include "server/callfmt.h"

#include "server/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEMMA_DEPTH 64 /* nesting of a Gemma 4 value (dicts and lists) */

static const char k_ds_calls[] = "<｜tool▁calls▁begin｜>", k_ds_calls_end[] = "<｜tool▁calls▁end｜>",
                  k_ds_call[] = "<｜tool▁call▁begin｜>", k_ds_call_end[] = "<｜tool▁call▁end｜>",
                  k_ds_sep[] = "<｜tool▁sep｜>";
static const char k_gemma_str[] = "<|\"|>";

static const server_callfmt_tags k_tags[SERVER_CF_COUNT] = {
    [SERVER_CF_LLAMA3] = {{"<|python_tag|>", NULL}, NULL, 0, 1, {NULL, NULL}},
    [SERVER_CF_MISTRAL] = {{"[TOOL_CALLS]", NULL}, NULL, 1, 0, {"[THINK]", "[/THINK]"}},
    [SERVER_CF_GEMMA4] = {{"<|tool_call>", NULL}, "<tool_call|>", 0, 0, {"<|channel>thought", "<channel|>"}},
    [SERVER_CF_DEEPSEEK] = {{k_ds_calls, NULL}, k_ds_calls_end, 0, 0, {NULL, NULL}},
    [SERVER_CF_PHI4] = {{"<|tool_call|>", "functools["}, "<|/tool_call|>", 0, 0, {NULL, NULL}},
    [SERVER_CF_NEMOTRON] = {{"<TOOLCALL>", NULL}, "</TOOLCALL>", 0, 0, {NULL, NULL}},
};

const server_callfmt_tags *server_callfmt_marks(int fmt) {
    return fmt > SERVER_CF_HARMONY && fmt < SERVER_CF_COUNT ? &k_tags[fmt] : NULL;
}

const char *const *server_callfmt_markers(int fmt) {
    static const char *const none[] = {NULL};
    static const char *const marks[SERVER_CF_COUNT][8] = {
        [SERVER_CF_LLAMA3] = {"<|python_tag|>"},
        [SERVER_CF_MISTRAL] = {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]"},
        [SERVER_CF_GEMMA4] = {"<|tool_call>", "<tool_call|>", k_gemma_str, "<|channel>", "<channel|>"},
        [SERVER_CF_DEEPSEEK] = {k_ds_calls, k_ds_calls_end, k_ds_call, k_ds_call_end, k_ds_sep},
        [SERVER_CF_PHI4] = {"<|tool_call|>", "<|/tool_call|>"},
        [SERVER_CF_NEMOTRON] = {"<TOOLCALL>", "</TOOLCALL>"},
    };
    return fmt > SERVER_CF_HARMONY && fmt < SERVER_CF_COUNT ? marks[fmt] : none;
}

const char *server_callfmt_name(int fmt) {
    static const char *const names[SERVER_CF_COUNT] = {"tool_call", "harmony",  "llama3", "mistral",
                                                       "gemma4",    "deepseek", "phi4",   "nemotron"};
    return fmt >= 0 && fmt < SERVER_CF_COUNT ? names[fmt] : "?";
}

/* 1 when text is one token of m's vocabulary (read as special). */
static int one_token(const kiln_model *m, const char *text) {
    int32_t ids[4];
    return m && kiln_tokenize(m, text, strlen(text), 0, 1, ids, 4) == 1;
}

int server_callfmt_detect(const char *t, const kiln_model *m) {
    if (one_token(m, "<|channel|>") && one_token(m, "<|message|>") && one_token(m, "<|end|>")) return SERVER_CF_HARMONY;
    if (!t) t = "";
    /* the template's own markers first: a fine-tune may keep its base's
     * vocabulary and write calls as its template says */
    if (strstr(t, "<tool_call>")) return SERVER_CF_TAG;
    if (strstr(t, "[TOOL_CALLS]")) return SERVER_CF_MISTRAL;
    if (strstr(t, "<|tool_call>")) return SERVER_CF_GEMMA4;
    if (strstr(t, "tool▁calls▁begin")) return SERVER_CF_DEEPSEEK;
    if (strstr(t, "<TOOLCALL>")) return SERVER_CF_NEMOTRON;
    if (strstr(t, "<|tool_call|>") || strstr(t, "<|tool|>")) return SERVER_CF_PHI4;
    if (strstr(t, "<|python_tag|>") || (strstr(t, "<|start_header_id|>") && strcasestr(t, "tools")))
        return SERVER_CF_LLAMA3;
    /* templates that leave calls out (Mistral v7's): the vocabulary says */
    if (one_token(m, "[TOOL_CALLS]")) return SERVER_CF_MISTRAL;
    if (one_token(m, "<|tool_call>") && one_token(m, "<tool_call|>")) return SERVER_CF_GEMMA4;
    if (one_token(m, k_ds_calls)) return SERVER_CF_DEEPSEEK;
    if (one_token(m, "<|python_tag|>")) return SERVER_CF_LLAMA3;
    return SERVER_CF_TAG;
}

/* ---- pieces ---- */

static const char *skip_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static int starts(const char *p, const char *e, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)(e - p) >= n && !memcmp(p, lit, n);
}

static const char *find(const char *p, const char *e, const char *lit) {
    size_t n = strlen(lit);
    for (; (size_t)(e - p) >= n; p++)
        if (!memcmp(p, lit, n)) return p;
    return NULL;
}

/* One JSON value at p (an object, array or string: their ends need no
 * look-ahead); *after is where it ended.  NULL when there is none. */
static json_t *json_at(const char *p, const char *e, const char **after) {
    if (p >= e || (*p != '{' && *p != '[' && *p != '"')) return NULL;
    json_error_t je;
    json_t *v = json_loadb(p, (size_t)(e - p), JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK, &je);
    if (v) *after = p + je.position;
    return v;
}

/* {name, arguments}: a string of JSON arguments is read as what it holds. */
static json_t *make_call(const char *name, size_t n, json_t *args) {
    if (!args) args = json_object();
    if (json_is_string(args)) {
        json_error_t je;
        json_t *v = json_loadb(json_string_value(args), json_string_length(args), 0, &je);
        if (v) {
            json_decref(args);
            args = v;
        }
    }
    json_t *c = json_object();
    json_object_set_new(c, "name", server_jstr(name, n));
    json_object_set_new(c, "arguments", args);
    return c;
}

static int offered(const json_t *tools, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const char *nm = json_string_value(json_object_get(fn ? fn : t, "name"));
        if (nm && !strcmp(nm, name)) return 1;
    }
    return 0;
}

/* Appends the call that object o spells ({"name", "arguments" or
 * "parameters"}) to out; -1 when it is no call (or names a tool that was
 * not offered, with known). */
static int add_json_call(json_t *out, json_t *o, const json_t *tools, int known) {
    const json_t *name = json_object_get(o, "name");
    if (!json_is_object(o) || !json_is_string(name)) return -1;
    if (known && !offered(tools, json_string_value(name))) return -1;
    json_t *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    json_array_append_new(out, make_call(json_string_value(name), json_string_length(name), json_incref(args)));
    return 0;
}

/* One or more calls as JSON: an array of call objects, or call objects
 * one after another (blanks, ',' or ';' between), then blanks only. */
static json_t *json_calls(const char *p, const char *e, const json_t *tools, int known) {
    json_t *out = json_array();
    p = skip_ws(p, e);
    while (p < e) {
        const char *after;
        json_t *v = json_at(p, e, &after);
        int bad = !v;
        if (json_is_array(v)) {
            size_t i;
            json_t *o;
            bad = json_array_size(v) == 0;
            json_array_foreach(v, i, o) bad |= add_json_call(out, o, tools, known) != 0;
        } else if (v) {
            bad = add_json_call(out, v, tools, known) != 0;
        }
        json_decref(v);
        if (bad) {
            json_decref(out);
            return NULL;
        }
        p = skip_ws(after, e);
        if (p < e && (*p == ';' || *p == ',')) p = skip_ws(p + 1, e);
    }
    if (!json_array_size(out)) {
        json_decref(out);
        return NULL;
    }
    return out;
}

/* ---- Llama 3.x built-in calls: <|python_tag|>NAME.call(key="v", n=1) ---- */

/* A Python literal (string, number, True, False, None) as JSON. */
static json_t *py_literal(const char *p, const char *e, const char **after) {
    if (p < e && (*p == '"' || *p == '\'')) {
        const char q = *p++;
        server_buf s = {0};
        for (; p < e && *p != q; p++) {
            char c = *p;
            if (c == '\\' && p + 1 < e) {
                c = *++p;
                c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
            }
            server_buf_put(&s, &c, 1);
        }
        json_t *v = p < e && !s.failed ? server_jstr(s.p ? s.p : "", s.len) : NULL;
        server_buf_free(&s);
        *after = p + 1;
        return v;
    }
    static const char *const lits[][2] = {{"True", "true"}, {"False", "false"}, {"None", "null"}};
    for (int i = 0; i < 3; i++)
        if (starts(p, e, lits[i][0])) {
            *after = p + strlen(lits[i][0]);
            return json_loads(lits[i][1], JSON_DECODE_ANY, NULL);
        }
    const char *q = p;
    while (q < e && strchr("+-.0123456789eE", *q)) q++;
    json_error_t je;
    json_t *v = q > p ? json_loadb(p, (size_t)(q - p), JSON_DECODE_ANY, &je) : NULL;
    *after = q;
    return v;
}

static int ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static json_t *python_call(const char *p, const char *e) {
    const char *name = p;
    while (p < e && ident_char(*p)) p++;
    const char *name_end = p;
    if (name_end == name || !starts(p, e, ".call(")) return NULL;
    p += 6;
    json_t *args = json_object();
    for (;;) {
        p = skip_ws(p, e);
        if (p < e && *p == ')') break;
        const char *k = p;
        while (p < e && ident_char(*p)) p++;
        const char *k_end = p;
        p = skip_ws(p, e);
        const char *after;
        json_t *v = k_end > k && p < e && *p == '=' ? py_literal(skip_ws(p + 1, e), e, &after) : NULL;
        if (!v) {
            json_decref(args);
            return NULL;
        }
        json_object_setn_new(args, k, (size_t)(k_end - k), v);
        p = skip_ws(after, e);
        if (p < e && *p == ',') p++;
    }
    if (skip_ws(p + 1, e) != e) {
        json_decref(args);
        return NULL;
    }
    json_t *out = json_array();
    json_array_append_new(out, make_call(name, (size_t)(name_end - name), args));
    return out;
}

static json_t *parse_python_tag(const char *p, const char *e, const json_t *tools) {
    p = skip_ws(p, e);
    json_t *calls = json_calls(p, e, tools, 0);
    if (!calls) calls = python_call(p, e);
    if (!calls && p < e) { /* code for the code interpreter, as Llama 3.1 writes it */
        json_t *args = json_object();
        json_object_set_new(args, "code", server_jstr(p, (size_t)(e - p)));
        calls = json_array();
        json_array_append_new(calls, make_call("python", 6, args));
    }
    return calls;
}

/* ---- Mistral ---- */

static json_t *parse_mistral(const char *p, const char *e, const json_t *tools) {
    p = skip_ws(p, e);
    if (p < e && *p == '[') return json_calls(p, e, tools, 0);
    /* NAME[ARGS]{...}, or NAME[CALL_ID]ID[ARGS]{...} */
    const char *a = find(p, e, "[ARGS]"), *id = find(p, e, "[CALL_ID]");
    const char *name_end = id && a && id < a ? id : a;
    if (!a || name_end == p) return NULL;
    for (const char *c = p; c < name_end; c++)
        if (*c == ' ' || *c == '\n' || *c == '\t' || *c == '\r' || *c == '[' || *c == '{') return NULL;
    const char *after;
    json_t *args = json_at(skip_ws(a + 6, e), e, &after);
    if (!args || skip_ws(after, e) != e) {
        json_decref(args);
        return NULL;
    }
    json_t *out = json_array();
    json_array_append_new(out, make_call(p, (size_t)(name_end - p), args));
    return out;
}

/* ---- Gemma 4: call:NAME{key:value,...}, strings between <|"|> ---- */

static json_t *gemma_value(const char **pp, const char *e, int depth);

/* A {...} or [...] at *pp (whose first byte is read). */
static json_t *gemma_container(const char **pp, const char *e, int depth) {
    const char *p = *pp;
    const int dict = *p == '{';
    if (depth > GEMMA_DEPTH) return NULL;
    json_t *v = dict ? json_object() : json_array();
    p = skip_ws(p + 1, e);
    if (p < e && *p == (dict ? '}' : ']')) {
        *pp = p + 1;
        return v;
    }
    for (;;) {
        const char *k = p, *k_end = p;
        if (dict) {
            while (k_end < e && *k_end != ':' && *k_end != '}') k_end++;
            if (k_end == k || k_end == e || *k_end != ':') break;
            p = skip_ws(k_end + 1, e);
        }
        json_t *x = gemma_value(&p, e, depth + 1);
        if (!x) break;
        if (dict ? json_object_setn_new(v, k, (size_t)(k_end - k), x) : json_array_append_new(v, x)) break;
        p = skip_ws(p, e);
        if (p < e && *p == ',') {
            p = skip_ws(p + 1, e);
            continue;
        }
        if (p < e && *p == (dict ? '}' : ']')) {
            *pp = p + 1;
            return v;
        }
        break;
    }
    json_decref(v);
    return NULL;
}

static json_t *gemma_value(const char **pp, const char *e, int depth) {
    const char *p = *pp;
    if (starts(p, e, k_gemma_str)) {
        p += strlen(k_gemma_str);
        const char *q = find(p, e, k_gemma_str);
        if (!q) return NULL;
        *pp = q + strlen(k_gemma_str);
        return server_jstr(p, (size_t)(q - p));
    }
    if (p < e && (*p == '{' || *p == '[')) return gemma_container(pp, e, depth);
    static const char *const lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++)
        if (starts(p, e, lits[i])) {
            *pp = p + strlen(lits[i]);
            return json_loads(lits[i], JSON_DECODE_ANY, NULL);
        }
    const char *q = p;
    while (q < e && strchr("+-.0123456789eE", *q)) q++;
    json_error_t je;
    json_t *v = q > p ? json_loadb(p, (size_t)(q - p), JSON_DECODE_ANY, &je) : NULL;
    *pp = q;
    if (json_is_number(v)) return v;
    json_decref(v);
    return NULL;
}

static json_t *parse_gemma4(const char *p, const char *e) {
    p = skip_ws(p, e);
    if (!starts(p, e, "call:")) return NULL;
    const char *name = p + 5, *q = name;
    while (q < e && *q != '{') q++;
    if (q == name || q == e) return NULL;
    const char *r = q;
    json_t *args = gemma_container(&r, e, 0);
    if (!args || skip_ws(r, e) != e) {
        json_decref(args);
        return NULL;
    }
    json_t *out = json_array();
    json_array_append_new(out, make_call(name, (size_t)(q - name), args));
    return out;
}

/* ---- DeepSeek ---- */

static json_t *parse_deepseek(const char *p, const char *e) {
    json_t *out = json_array();
    for (p = skip_ws(p, e); p < e; p = skip_ws(p, e)) {
        if (!starts(p, e, k_ds_call)) break;
        p += strlen(k_ds_call);
        const char *sep = find(p, e, k_ds_sep);
        if (!sep) break;
        const char *name, *name_end, *after;
        const char *a = sep + strlen(k_ds_sep);
        if (sep == p || (sep - p == 8 && !memcmp(p, "function", 8))) {
            /* V3 and R1: the type, then NAME on the separator's line and the
             * arguments in a ```json fence */
            name = a;
            name_end = a;
            while (name_end < e && *name_end != '\n') name_end++;
            a = skip_ws(name_end, e);
            if (starts(a, e, "```json")) a += 7;
            a = skip_ws(a, e);
        } else { /* V3.1: NAME, then the arguments */
            name = p;
            name_end = sep;
        }
        while (name_end > name && (name_end[-1] == ' ' || name_end[-1] == '\r')) name_end--;
        json_t *args = name_end > name ? json_at(a, e, &after) : NULL;
        if (!args) break;
        p = skip_ws(after, e);
        if (starts(p, e, "```")) p = skip_ws(p + 3, e);
        json_array_append_new(out, make_call(name, (size_t)(name_end - name), args));
        if (starts(p, e, k_ds_call_end))
            p += strlen(k_ds_call_end);
        else if (p < e) /* only a reply cut short may lack the closer */
            break;
    }
    if (p < e || !json_array_size(out)) {
        json_decref(out);
        return NULL;
    }
    return out;
}

json_t *server_callfmt_parse(int fmt, int opener, const char *body, size_t n, const json_t *tools) {
    const char *p = body ? body : "", *e = p + n;
    switch (fmt) {
    case SERVER_CF_LLAMA3: return opener < 0 ? json_calls(p, e, tools, 1) : parse_python_tag(p, e, tools);
    case SERVER_CF_MISTRAL: return parse_mistral(p, e, tools);
    case SERVER_CF_GEMMA4: return parse_gemma4(p, e);
    case SERVER_CF_DEEPSEEK: return parse_deepseek(p, e);
    case SERVER_CF_PHI4:
        if (opener == 1) { /* functools[...: the opener holds the array's '[' */
            server_buf b = {0};
            server_buf_put(&b, "[", 1);
            server_buf_put(&b, p, n);
            json_t *calls = b.failed ? NULL : json_calls(b.p, b.p + b.len, tools, 0);
            server_buf_free(&b);
            return calls;
        }
        return json_calls(p, e, tools, 0);
    case SERVER_CF_NEMOTRON: return json_calls(p, e, tools, 0);
    default: return NULL;
    }
}

#define DS_CALLS "<｜tool▁calls▁begin｜>"
#define DS_CALL "<｜tool▁call▁begin｜>"
#define DS_SEP "<｜tool▁sep｜>"
#define DS_CALL_END "<｜tool▁call▁end｜>"

int server_callfmt_call_form(int fmt, const char *tmpl, sample_call_form *out) {
    static const sample_call_form llama3 = {"", "{\"name\": \"", "\", \"parameters\": ", "}", ""},
                                  mistral_array = {"[TOOL_CALLS]", "[{\"name\": \"", "\", \"arguments\": ", "}]", ""},
                                  mistral = {"[TOOL_CALLS]", "", "[ARGS]", "", ""},
                                  deepseek = {DS_CALLS DS_CALL "function" DS_SEP, "", "\n```json\n", "```" DS_CALL_END,
                                              k_ds_calls_end},
                                  deepseek31 = {DS_CALLS DS_CALL, "", DS_SEP, DS_CALL_END, k_ds_calls_end},
                                  phi4 = {"<|tool_call|>", "[{\"name\": \"", "\", \"arguments\": ", "}]",
                                          "<|/tool_call|>"},
                                  nemotron = {"<TOOLCALL>", "[{\"name\": \"", "\", \"arguments\": ", "}]",
                                              "</TOOLCALL>"};
    if (!tmpl) tmpl = "";
    switch (fmt) {
    case SERVER_CF_LLAMA3: *out = llama3; return 0;
    case SERVER_CF_MISTRAL: *out = strstr(tmpl, "[ARGS]") ? mistral : mistral_array; return 0;
    case SERVER_CF_DEEPSEEK:
        *out = strstr(tmpl, "```json") || !strstr(tmpl, "tool▁sep") ? deepseek : deepseek31;
        return 0;
    case SERVER_CF_PHI4: *out = phi4; return 0;
    case SERVER_CF_NEMOTRON: *out = nemotron; return 0;
    default: return -1;
    }
}
