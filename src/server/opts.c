/* A generation request's options: OpenAI's sampling fields, Ollama's
 * options and format, durations. */
#include "server/opts.h"

#include "server/log.h"
#include "server/reply.h"

#include "base/base.h"
#include "sample/jschema.h"
#include "sample/sample.h"

#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad(struct MHD_Connection *c, int ollama, int *rc, const char *param, const char *msg) {
    *rc = server_error(c, ollama, 400, "invalid_request_error", msg, param);
    return -1;
}

static int get_num(json_t *src, const char *k, double lo, double hi, double *out, struct MHD_Connection *c, int ollama,
                   int *rc) {
    json_t *v = json_object_get(src, k);
    if (!v || json_is_null(v)) return 0;
    char msg[160];
    if (!json_is_number(v)) {
        snprintf(msg, sizeof msg, "'%s' must be a number", k);
        return bad(c, ollama, rc, k, msg);
    }
    double d = json_number_value(v);
    if (d < lo || d > hi) {
        snprintf(msg, sizeof msg, "'%s' is %g; it must be between %g and %g", k, d, lo, hi);
        return bad(c, ollama, rc, k, msg);
    }
    *out = d;
    return 1;
}

static int parse_sampling(struct MHD_Connection *c, json_t *src, int ollama, server_gen_opts *o, int *rc);

int server_parse_opts(struct MHD_Connection *c, json_t *src, int ollama, server_gen_opts *o, int *rc) {
    memset(o, 0, sizeof *o);
    o->max_tokens = -1;
    o->think_budget = SERVER_BUDGET_SERVER;
    o->sp = kiln_sampler_default_params();
    /* what the request leaves out: Ollama's defaults on the Ollama API,
     * llama-server's on the OpenAI one (clients expect their server's) */
    o->sp.temperature = 0.8f;
    o->sp.top_k = 40;
    o->sp.top_p = ollama ? 0.9f : 0.95f;
    o->sp.min_p = ollama ? 0.0f : 0.05f;
    o->sp.repeat_penalty = ollama ? 1.1f : 1.0f;
    o->sp.repeat_last_n = 64;
    /* per request from the OS, so unseeded calls differ; 32 bits, so the
     * logged seed replays through every API and kiln run --seed */
    o->sp.seed = (uint32_t)base_random_u64();
    o->ollama = ollama;
    int r = parse_sampling(c, src, ollama, o, rc);
    if (r == 0) server_reqlog_seed(server_reqlog_current(), o->sp.seed);
    return r;
}

static int parse_sampling(struct MHD_Connection *c, json_t *src, int ollama, server_gen_opts *o, int *rc) {
    if (!src) return 0;
    double d;
    int r;
    if ((r = get_num(src, "temperature", 0, 100, &d, c, ollama, rc)) < 0) return -1;
    if (r) o->sp.temperature = (float)d;
    if ((r = get_num(src, "top_p", 0, 1, &d, c, ollama, rc)) < 0) return -1;
    if (r) o->sp.top_p = (float)d;
    if ((r = get_num(src, "min_p", 0, 1, &d, c, ollama, rc)) < 0) return -1;
    if (r) o->sp.min_p = (float)d;
    if ((r = get_num(src, "top_k", 0, 1e6, &d, c, ollama, rc)) < 0) return -1;
    if (r) o->sp.top_k = (int32_t)d;
    if ((r = get_num(src, "presence_penalty", -2, 2, &d, c, ollama, rc)) < 0) return -1;
    if (r) o->sp.presence_penalty = (float)d;
    if ((r = get_num(src, "frequency_penalty", -2, 2, &d, c, ollama, rc)) < 0) return -1;
    if (r) o->sp.frequency_penalty = (float)d;
    if ((r = get_num(src, "repeat_penalty", 0, 10, &d, c, ollama, rc)) < 0) return -1;
    if (r) o->sp.repeat_penalty = (float)d;
    if ((r = get_num(src, "repeat_last_n", -1, 1e9, &d, c, ollama, rc)) < 0) return -1;
    if (r) o->sp.repeat_last_n = (int32_t)d;
    if ((r = get_num(src, "seed", -9.3e18, 1.8e19, &d, c, ollama, rc)) < 0) return -1;
    if (r) o->sp.seed = (uint64_t)(int64_t)json_integer_value(json_object_get(src, "seed"));
    const char *mt[] = {"max_completion_tokens", "max_tokens", "num_predict"};
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(src, mt[i]);
        if (!v || json_is_null(v)) continue;
        if (!json_is_integer(v)) return bad(c, ollama, rc, mt[i], "the token limit must be an integer");
        json_int_t n = json_integer_value(v);
        if (ollama && n < 0) continue; /* Ollama: -1 = unlimited */
        if (n < 1) return bad(c, ollama, rc, mt[i], "the token limit must be at least 1");
        /* read as 64 bits: a limit past any context (2^31 and more too)
         * asks for as many tokens as fit, the rest of the context */
        o->max_tokens = n > SERVER_MAX_TOKENS_CAP ? -1 : (int32_t)n;
        break;
    }
    json_t *stop = json_object_get(src, "stop");
    if (json_is_string(stop)) {
        o->stop = stop;
    } else if (json_is_array(stop)) {
        size_t i;
        json_t *x;
        json_array_foreach(stop, i, x) if (!json_is_string(x)) return bad(c, ollama, rc, "stop",
                                                                          "'stop' must hold strings");
        o->stop = stop;
    } else if (stop && !json_is_null(stop)) {
        return bad(c, ollama, rc, "stop", "'stop' must be a string or an array of strings");
    }
    json_t *lp = json_object_get(src, "logprobs");
    if (json_is_true(lp))
        o->logprobs = 1;
    else if (json_is_integer(lp) && json_integer_value(lp) >= 0) { /* legacy completions: count of alternatives */
        o->logprobs = 1;
        o->n_top = (int32_t)json_integer_value(lp);
    }
    if ((r = get_num(src, "top_logprobs", 0, SAMPLE_TOP_MAX, &d, c, ollama, rc)) < 0) return -1;
    if (r) o->n_top = (int32_t)d;
    if (o->n_top > SAMPLE_TOP_MAX) return bad(c, ollama, rc, "logprobs", "at most 20 alternatives per token");
    json_t *rf = json_object_get(src, "response_format");
    const char *rft = json_string_value(json_object_get(rf, "type"));
    if (rft && (!strcmp(rft, "json_object") || !strcmp(rft, "json_schema"))) o->json_mode = 1;
    if (rft && !strcmp(rft, "json_schema")) { /* {"json_schema": {"name": ..., "schema": {...}}} */
        char msg[300];
        o->schema = json_object_get(json_object_get(rf, "json_schema"), "schema");
        if (server_check_schema(o->schema, msg, sizeof msg)) return bad(c, ollama, rc, "response_format", msg);
    }
    o->ignore_eos = json_is_true(json_object_get(src, "ignore_eos"));
    /* the thinking budget: llama-server's reasoning_budget, or an effort */
    json_t *eff = json_object_get(src, "reasoning_effort");
    if (eff && !json_is_null(eff)) {
        o->think_budget = server_effort_budget(json_string_value(eff));
        if (o->think_budget < -2)
            return bad(c, ollama, rc, "reasoning_effort",
                       "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh");
    }
    json_t *rb = json_object_get(src, "reasoning_budget");
    if (rb && !json_is_null(rb)) {
        if (!json_is_integer(rb) || json_integer_value(rb) < -1 || json_integer_value(rb) > 1 << 30)
            return bad(c, ollama, rc, "reasoning_budget", "'reasoning_budget' must be -1 (no limit) or 0..2^30 tokens");
        o->think_budget = (int32_t)json_integer_value(rb);
    }
    json_t *n = json_object_get(src, "n");
    if (n && !json_is_null(n) && (!json_is_integer(n) || json_integer_value(n) != 1))
        return bad(c, ollama, rc, "n", "only n = 1 is supported");
    return 0;
}

int server_num_ctx(const json_t *options, int32_t *out) {
    json_t *v = json_object_get(options, "num_ctx");
    *out = 0;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1 << 24) return -1;
    *out = (int32_t)json_integer_value(v);
    return 0;
}

int32_t server_effort_budget(const char *effort) {
    static const struct {
        const char *name;
        int32_t budget;
    } k[] = {{"none", 0}, {"minimal", 256}, {"low", 1024}, {"medium", 4096}, {"high", -1}, {"xhigh", -1}};
    if (!effort) return SERVER_BUDGET_SERVER;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(effort, k[i].name)) return k[i].budget;
    return -3;
}

double server_parse_duration(json_t *v) {
    if (json_is_number(v)) return json_number_value(v);
    const char *s = json_string_value(v);
    if (!s || !*s) return NAN;
    double total = 0;
    int any = 0;
    while (*s) {
        char *end;
        double x = strtod(s, &end);
        if (end == s) return NAN;
        s = end;
        double unit = 1;
        if (!strncmp(s, "ms", 2)) {
            unit = 1e-3;
            s += 2;
        } else if (*s == 'h') {
            unit = 3600;
            s++;
        } else if (*s == 'm') {
            unit = 60;
            s++;
        } else if (*s == 's') {
            s++;
        } else if (*s)
            return NAN;
        total += x * unit;
        any = 1;
    }
    return any ? total : NAN;
}

int server_check_schema(const json_t *schema, char *msg, size_t n) {
    char err[256];
    sample_schema *s = schema ? sample_schema_compile(schema, err, sizeof err) : NULL;
    if (schema && !s) {
        snprintf(msg, n, "the JSON schema cannot be enforced: %s", err);
        return -1;
    }
    sample_schema_free(s);
    return 0;
}

int server_oll_format(const json_t *fmt, server_gen_opts *o, struct MHD_Connection *c, int *rc) {
    if (!fmt || json_is_null(fmt) || (json_is_string(fmt) && !json_string_length(fmt))) return 0;
    if (json_is_string(fmt) && !strcmp(json_string_value(fmt), "json")) {
        o->json_mode = 1;
        return 0;
    }
    char msg[300];
    if (!json_is_object(fmt))
        snprintf(msg, sizeof msg, "'format' must be \"json\" or a JSON schema");
    else if (!server_check_schema(fmt, msg, sizeof msg)) {
        o->json_mode = 1;
        o->schema = fmt;
        return 0;
    }
    *rc = server_oll_error(c, 400, msg);
    return -1;
}

/* OpenAI's tool_choice: "auto" (or none given) lets the model choose;
 * "none" neither shows the tools to the model nor reads its output as
 * calls; "required" and a named function constrain the output to one call
 * in the template's <tool_call> syntax (sample/call.c), its arguments held
 * to the tool's parameters. */
int server_tool_choice(const json_t *v, const json_t *tools, int *off, json_t **force, char *msg, size_t cap) {
    const char *s = json_string_value(v);
    *force = NULL;
    if (!v || json_is_null(v) || (s && !strcmp(s, "auto"))) return 0;
    if (s && !strcmp(s, "none")) {
        *off = 1;
        return 0;
    }
    const char *want = NULL;
    if (json_is_object(v)) {
        const char *type = json_string_value(json_object_get(v, "type"));
        want = json_string_value(json_object_get(json_object_get(v, "function"), "name"));
        if (!type || strcmp(type, "function") || !want) {
            snprintf(msg, cap,
                     "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
            return -1;
        }
    } else if (!s || strcmp(s, "required")) {
        snprintf(msg, cap, "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", ...}");
        return -1;
    }
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *name = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!name || (type && strcmp(type, "function"))) continue;
        if (!want || !strcmp(want, name)) json_array_append(out, t);
    }
    if (!json_array_size(out)) {
        json_decref(out);
        if (want)
            snprintf(msg, cap, "'tool_choice' names the function '%s', which is not among 'tools'", want);
        else
            snprintf(msg, cap, "'tool_choice' is \"required\" but 'tools' offers no function");
        return -1;
    }
    *force = out;
    return 0;
}
