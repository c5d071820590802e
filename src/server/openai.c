/* OpenAI endpoints, plus the result plumbing every generation endpoint
 * shares (ks_run): the same token stream leaves as OpenAI chat or
 * completion objects (SSE "data:" chunks ending with [DONE]) or as Ollama
 * generate/chat objects (NDJSON). */
#include "server/srv.h"

#include "base/base.h"

#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- request options ---- */

static int bad(struct MHD_Connection *c, int ollama, int *rc, const char *param, const char *msg) {
    *rc = ks_error(c, ollama, 400, "invalid_request_error", msg, param);
    return -1;
}

static int get_num(json_t *src, const char *k, double lo, double hi, double *out, struct MHD_Connection *c,
                   int ollama, int *rc) {
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

static int parse_sampling(struct MHD_Connection *c, json_t *src, int ollama, ks_gen_opts *o, int *rc);

int ks_parse_opts(struct MHD_Connection *c, json_t *src, int ollama, ks_gen_opts *o, int *rc) {
    memset(o, 0, sizeof *o);
    o->max_tokens = -1;
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
    o->sp.seed = (uint32_t)kb_random_u64();
    o->ollama = ollama;
    int r = parse_sampling(c, src, ollama, o, rc);
    if (r == 0) ks_reqlog_seed(ks_reqlog_current(), o->sp.seed);
    return r;
}

static int parse_sampling(struct MHD_Connection *c, json_t *src, int ollama, ks_gen_opts *o, int *rc) {
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
        if (n < 1 || n > 1 << 30) return bad(c, ollama, rc, mt[i], "the token limit must be at least 1");
        o->max_tokens = (int32_t)n;
        break;
    }
    json_t *stop = json_object_get(src, "stop");
    if (json_is_string(stop)) {
        o->stop = stop;
    } else if (json_is_array(stop)) {
        size_t i;
        json_t *x;
        json_array_foreach(stop, i, x) if (!json_is_string(x)) return bad(c, ollama, rc, "stop", "'stop' must hold strings");
        o->stop = stop;
    } else if (stop && !json_is_null(stop)) {
        return bad(c, ollama, rc, "stop", "'stop' must be a string or an array of strings");
    }
    json_t *lp = json_object_get(src, "logprobs");
    if (json_is_true(lp)) o->logprobs = 1;
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
        if (ks_check_schema(o->schema, msg, sizeof msg)) return bad(c, ollama, rc, "response_format", msg);
    }
    o->ignore_eos = json_is_true(json_object_get(src, "ignore_eos"));
    json_t *n = json_object_get(src, "n");
    if (n && !json_is_null(n) && (!json_is_integer(n) || json_integer_value(n) != 1))
        return bad(c, ollama, rc, "n", "only n = 1 is supported");
    return 0;
}

double ks_parse_duration(json_t *v) {
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
        if (!strncmp(s, "ms", 2)) { unit = 1e-3; s += 2; }
        else if (*s == 'h') { unit = 3600; s++; }
        else if (*s == 'm') { unit = 60; s++; }
        else if (*s == 's') { s++; }
        else if (*s) return NAN;
        total += x * unit;
        any = 1;
    }
    return any ? total : NAN;
}

int ks_check_schema(const json_t *schema, char *msg, size_t n) {
    char err[256];
    ks_schema *s = schema ? ks_schema_compile(schema, err, sizeof err) : NULL;
    if (schema && !s) {
        snprintf(msg, n, "the JSON schema cannot be enforced: %s", err);
        return -1;
    }
    ks_schema_free(s);
    return 0;
}

ks_req *ks_req_new(void) { return calloc(1, sizeof(ks_req)); }

void ks_req_free(ks_req *q) {
    if (!q) return;
    engine_llm_end(q->er);
    free(q->prompt);
    ks_schema_free(q->schema);
    for (int i = 0; i < q->n_call; i++) {
        free(q->call_names[i]);
        ks_schema_free(q->call_schemas[i]);
    }
    free(q->call_names);
    free(q->call_schemas);
    free(q);
}

static int conn_gone(void *c) { return ks_conn_gone(c); }

/* The forced call's names and schemas into q, its recognizer set up. */
static int force_setup(ks_req *q, ks_model *r, const ks_gen_opts *o, char *msg, size_t cap) {
    const char *tmpl = ks_template_text(r);
    if (!tmpl || !strstr(tmpl, "<tool_call>")) {
        snprintf(msg, cap, "'tool_choice' forces a call, which needs a chat template that writes calls as "
                           "<tool_call>...</tool_call>; the template of \"%.100s\" does not", r->name);
        return -1;
    }
    if (o->json_mode) {
        snprintf(msg, cap, "a forced 'tool_choice' and a JSON response_format cannot both shape one reply");
        return -1;
    }
    size_t n = json_array_size(o->force_tools);
    q->call_names = calloc(n ? n : 1, sizeof *q->call_names);
    q->call_schemas = calloc(n ? n : 1, sizeof *q->call_schemas);
    if (!q->call_names || !q->call_schemas) {
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    json_t *any_object = json_pack("{s:s}", "type", "object");
    for (size_t i = 0; i < n; i++) {
        json_t *fn = json_object_get(json_array_get(o->force_tools, i), "function");
        json_t *params = json_object_get(fn, "parameters");
        char err[240];
        q->call_names[i] = strdup(json_string_value(json_object_get(fn, "name")));
        q->call_schemas[i] = ks_schema_compile(json_is_object(params) ? params : any_object, err, sizeof err);
        q->n_call = (int)i + 1;
        if (!q->call_names[i] || !q->call_schemas[i]) {
            snprintf(msg, cap, "the parameters of tool '%.60s' cannot be enforced for a forced call: %.150s",
                     q->call_names[i] ? q->call_names[i] : "?", q->call_schemas[i] ? "out of memory" : err);
            json_decref(any_object);
            return -1;
        }
    }
    json_decref(any_object);
    if (sample_call_init(&q->call, (const char *const *)q->call_names, (const ks_schema *const *)q->call_schemas,
                         q->n_call, o->force_think) != 0) {
        snprintf(msg, cap, "a forced call takes 1..%d tools with distinct names free of quotes, backslashes and "
                           "control characters", SAMPLE_CALL_MAX);
        return -1;
    }
    sample_call_constraint(&q->cons, &q->call);
    return 0;
}


ks_req *ks_start(ks_model *r, struct MHD_Connection *c, int32_t *ids, int32_t n, const ks_gen_opts *o, int *rc) {
    char msg[300];
    if (n <= 0) {
        free(ids);
        *rc = ks_error(c, o->ollama, 400, "invalid_request_error", "the prompt is empty", "prompt");
        return NULL;
    }
    int32_t max = o->max_tokens < 0 ? r->n_ctx - n : o->max_tokens;
    if (n + max > r->n_ctx || max < 1) {
        free(ids);
        if (o->max_tokens < 0)
            snprintf(msg, sizeof msg, "the prompt has %d tokens; the context holds %d, leaving no room to generate", n,
                     r->n_ctx);
        else
            snprintf(msg, sizeof msg,
                     "the prompt (%d tokens) plus max_tokens (%d) is %d tokens, more than the context of %d tokens", n,
                     max, n + max, r->n_ctx);
        *rc = ks_error(c, o->ollama, 400, "invalid_request_error", msg, "max_tokens");
        return NULL;
    }
    ks_req *q = ks_req_new();
    if (!q) {
        free(ids);
        *rc = ks_error(c, o->ollama, 500, "server_error", "out of memory", NULL);
        return NULL;
    }
    q->prompt = ids;
    q->n_prompt = n;
    q->max_tokens = max;
    q->sp = o->sp;
    q->n_top = o->n_top;
    q->want_logprobs = o->logprobs;
    q->json_mode = o->json_mode;
    q->ignore_eos = o->ignore_eos;
    if (o->json_mode && o->schema && !(q->schema = ks_schema_compile(o->schema, msg, sizeof msg))) {
        ks_req_free(q);
        *rc = ks_error(c, o->ollama, 400, "invalid_request_error", msg, "response_format");
        return NULL;
    }
    kiln_engine_observation ob;
    kiln_engine_observe(r->eng, &ob);
    if (ob.n_waiting >= r->srv->cfg.max_queue) {
        ks_req_free(q);
        *rc = ks_error(c, o->ollama, 429, "rate_limit_error", "the request queue is full; retry shortly", NULL);
        return NULL;
    }
    gen_params p = gen_params_default();
    p.prompt = q->prompt;
    p.n_prompt = q->n_prompt;
    p.n_predict = q->max_tokens;
    p.sampler = q->sp;
    p.n_top = q->want_logprobs ? q->n_top : -1;
    p.ignore_eos = q->ignore_eos;
    p.reuse = 1;
    if (q->json_mode) {
        ks_sv_init(&q->sv, q->schema);
        sample_json_constraint(&q->cons, &q->sv);
        p.constraint = &q->cons;
    }
    if (o->force_tools) {
        if (force_setup(q, r, o, msg, sizeof msg)) {
            ks_req_free(q);
            *rc = ks_error(c, o->ollama, 400, "invalid_request_error", msg, "tool_choice");
            return NULL;
        }
        p.constraint = &q->cons;
    }
    q->t_submit = ks_now();
    q->spec = r->srv->cfg.spec.type != KILN_SPEC_NONE;
    /* the gate: urgent requests first; a client that leaves while it waits
     * gives its turn up */
    kiln_status st = engine_llm_begin(r->eng, &p, o->urgent, NULL, conn_gone, c, &q->er);
    if (st != KILN_OK) {
        snprintf(msg, sizeof msg, "%s", kiln_last_error());
        ks_req_free(q);
        *rc = st == KILN_ERR_CANCELLED ? MHD_NO
              : st == KILN_ERR_STATE   ? ks_error(c, o->ollama, 503, "unavailable_error", msg, NULL)
                                       : ks_error(c, o->ollama, 500, "server_error", msg, NULL);
        return NULL;
    }
    q->gr = engine_llm_events(q->er);
    return q;
}

/* ---- results ---- */

typedef struct run {
    ks_srv *s;
    ks_model *r;
    ks_req *q;
    ks_gen g;
    ks_run_args a;
    char id[48];
    char model[256];
    long created;
    ks_buf content, reasoning;
    ks_buf *sink;             /* the stream's output while filling */
    int sent_role;
    int sent_final;
    json_t *oai_tools;        /* OpenAI-shaped tool calls */
    double t0;
    ks_reqlog *log;           /* the request's log line */
} run;

static const char *finish_str(const run *u) {
    if (u->g.finish == KS_FIN_LENGTH) return "length";
    if (u->g.n_tools && u->a.format == KS_F_OAI_CHAT) return "tool_calls";
    return "stop";
}

/* A call's id: unique per response (the response id's serial, then the
 * call's index), so tool results of different turns can't be mixed up. */
static void call_id(const run *u, int index, char *buf, size_t cap) {
    const char *serial = strchr(u->id, '-');
    snprintf(buf, cap, "call_%s_%d", serial ? serial + 1 : u->id, index);
}

/* A whole call, OpenAI-shaped.  The arguments are the text as the model
 * wrote it when the scanner has it (as a stream joins it), else the parsed
 * value serialized. */
static json_t *oai_tool(const run *u, int index, json_t *call, int with_index) {
    json_t *fn = json_object();
    json_object_set(fn, "name", json_object_get(call, "name"));
    size_t n;
    const char *text = ks_gen_args_text(&u->g, &n);
    if (text) {
        json_object_set_new(fn, "arguments", ks_jstr(text, n));
    } else {
        char *args = json_dumps(json_object_get(call, "arguments"), JSON_COMPACT | JSON_ENCODE_ANY);
        json_object_set_new(fn, "arguments", json_string(args ? args : "{}"));
        free(args);
    }
    json_t *t = json_object();
    if (with_index) json_object_set_new(t, "index", json_integer(index));
    char id[80];
    call_id(u, index, id, sizeof id);
    json_object_set_new(t, "id", json_string(id));
    json_object_set_new(t, "type", json_string("function"));
    json_object_set_new(t, "function", fn);
    return t;
}

static json_t *usage(const run *u) {
    json_t *j = json_object();
    json_object_set_new(j, "prompt_tokens", json_integer(u->q->n_prompt));
    json_object_set_new(j, "completion_tokens", json_integer(u->g.n_gen));
    json_object_set_new(j, "total_tokens", json_integer(u->q->n_prompt + u->g.n_gen));
    json_t *d = json_object();
    json_object_set_new(d, "cached_tokens", json_integer(u->q->n_cached));
    json_object_set_new(j, "prompt_tokens_details", d);
    return j;
}

/* llama.cpp's per-request "timings" (milliseconds), with the draft counts
 * (draft_n proposed, draft_n_accepted) when the model speculates. */
static json_t *timings(const run *u) {
    const ks_req *q = u->q;
    const double now = ks_now();
    const double t_first = q->t_first > 0 ? q->t_first : now;
    const double t_start = q->t_start > 0 ? q->t_start : u->t0;
    const double p_ms = (t_first - t_start) * 1e3, g_ms = (now - t_first) * 1e3;
    const int32_t p_n = q->n_prompt - q->n_cached, g_n = u->g.n_gen;
    json_t *j = json_object();
    json_object_set_new(j, "cache_n", json_integer(q->n_cached));
    json_object_set_new(j, "prompt_n", json_integer(p_n));
    json_object_set_new(j, "prompt_ms", json_real(p_ms));
    json_object_set_new(j, "prompt_per_token_ms", json_real(p_n > 0 ? p_ms / p_n : 0));
    json_object_set_new(j, "prompt_per_second", json_real(p_ms > 0 ? 1e3 * p_n / p_ms : 0));
    json_object_set_new(j, "predicted_n", json_integer(g_n));
    json_object_set_new(j, "predicted_ms", json_real(g_ms));
    json_object_set_new(j, "predicted_per_token_ms", json_real(g_n > 0 ? g_ms / g_n : 0));
    json_object_set_new(j, "predicted_per_second", json_real(g_ms > 0 ? 1e3 * g_n / g_ms : 0));
    if (q->spec) {
        json_object_set_new(j, "draft_n", json_integer(q->n_drafted));
        json_object_set_new(j, "draft_n_accepted", json_integer(q->n_accepted));
    }
    return j;
}

static json_t *oai_base(const run *u, const char *object) {
    json_t *j = json_object();
    json_object_set_new(j, "id", json_string(u->id));
    json_object_set_new(j, "object", json_string(object));
    json_object_set_new(j, "created", json_integer(u->created));
    json_object_set_new(j, "model", json_string(u->model));
    json_object_set_new(j, "system_fingerprint", json_string("kiln-" KILN_VERSION));
    return j;
}

static char *iso_time(char *buf, size_t cap) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, cap - n, ".%09ldZ", ts.tv_nsec);
    return buf;
}

static json_t *oll_base(const run *u) {
    char t[64];
    json_t *j = json_object();
    json_object_set_new(j, "model", json_string(u->model));
    json_object_set_new(j, "created_at", json_string(iso_time(t, sizeof t)));
    return j;
}

/* Legacy completions logprobs from the chat-shaped entries. */
static json_t *legacy_logprobs(json_t *entries) {
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t i, off = 0;
    json_t *e;
    json_array_foreach(entries, i, e) {
        const char *tok = json_string_value(json_object_get(e, "token"));
        json_array_append(tokens, json_object_get(e, "token"));
        json_array_append(lps, json_object_get(e, "logprob"));
        json_t *m = json_object();
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(e, "top_logprobs"), k, t)
            json_object_set(m, json_string_value(json_object_get(t, "token")), json_object_get(t, "logprob"));
        json_array_append_new(tops, m);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += tok ? strlen(tok) : 0;
    }
    json_t *j = json_object();
    json_object_set_new(j, "tokens", tokens);
    json_object_set_new(j, "token_logprobs", lps);
    json_object_set_new(j, "top_logprobs", tops);
    json_object_set_new(j, "text_offset", offs);
    return j;
}

static json_t *take_logprobs(run *u) {
    if (!u->g.want_logprobs) return json_null();
    json_t *entries = u->g.logprobs;
    u->g.logprobs = json_array();
    if (u->a.format == KS_F_OAI_COMPL) {
        json_t *l = legacy_logprobs(entries);
        json_decref(entries);
        return l;
    }
    json_t *j = json_object();
    json_object_set_new(j, "content", entries);
    return j;
}

static void sse(run *u, json_t *j) {
    ks_buf_puts(u->sink, "data: ");
    ks_buf_json(u->sink, j);
    ks_buf_puts(u->sink, "\n\n");
    json_decref(j);
}

static void ndjson(run *u, json_t *j) {
    ks_buf_json(u->sink, j);
    ks_buf_puts(u->sink, "\n");
    json_decref(j);
}

/* One streamed delta in the request's format. */
static void stream_delta(run *u, int kind, const char *s, size_t n, json_t *tool) {
    if (u->a.format == KS_F_OAI_CHAT || u->a.format == KS_F_OAI_COMPL) {
        int chat = u->a.format == KS_F_OAI_CHAT;
        json_t *j = oai_base(u, chat ? "chat.completion.chunk" : "text_completion");
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(0));
        if (chat) {
            json_t *d = json_object();
            if (!u->sent_role) {
                json_object_set_new(d, "role", json_string("assistant"));
                u->sent_role = 1;
            }
            if (tool) {
                json_t *arr = json_array();
                json_array_append_new(arr, tool);
                json_object_set_new(d, "tool_calls", arr);
            } else {
                json_object_set_new(d, kind == KS_D_REASONING ? "reasoning_content" : "content",
                                    ks_jstr(s, n));
            }
            json_object_set_new(ch, "delta", d);
        } else {
            json_object_set_new(ch, "text", ks_jstr(s, n));
        }
        json_object_set_new(ch, "logprobs", take_logprobs(u));
        json_object_set_new(ch, "finish_reason", json_null());
        json_t *arr = json_array();
        json_array_append_new(arr, ch);
        json_object_set_new(j, "choices", arr);
        sse(u, j);
        return;
    }
    json_t *j = oll_base(u);
    if (u->a.format == KS_F_OLL_GEN) {
        json_object_set_new(j, "response", ks_jstr(kind == KS_D_CONTENT ? s : "", kind == KS_D_CONTENT ? n : 0));
        if (kind == KS_D_REASONING) json_object_set_new(j, "thinking", ks_jstr(s, n));
    } else {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("assistant"));
        json_object_set_new(m, "content", ks_jstr(kind == KS_D_CONTENT && !tool ? s : "",
                                                               kind == KS_D_CONTENT && !tool ? n : 0));
        if (kind == KS_D_REASONING) json_object_set_new(m, "thinking", ks_jstr(s, n));
        if (tool) {
            json_t *arr = json_array();
            json_array_append_new(arr, tool);
            json_object_set_new(m, "tool_calls", arr);
        }
        json_object_set_new(j, "message", m);
    }
    json_object_set_new(j, "done", json_false());
    ndjson(u, j);
}

static json_t *oll_tool(json_t *call) {
    json_t *fn = json_object();
    json_object_set(fn, "name", json_object_get(call, "name"));
    json_object_set(fn, "arguments", json_object_get(call, "arguments"));
    json_t *t = json_object();
    json_object_set_new(t, "function", fn);
    return t;
}

static void on_text(ks_gen *g, int kind, const char *s, size_t n, void *user) {
    run *u = user;
    if (u->a.stream) stream_delta(u, kind, s, n, NULL);
    else ks_buf_put(kind == KS_D_REASONING ? &u->reasoning : &u->content, s, n);
}

static void on_tool(ks_gen *g, int index, json_t *call, void *user) {
    run *u = user;
    int oai = u->a.format == KS_F_OAI_CHAT;
    if (u->a.stream) stream_delta(u, KS_D_CONTENT, "", 0, oai ? oai_tool(u, index, call, 1) : oll_tool(call));
    else json_array_append_new(u->oai_tools, oai ? oai_tool(u, index, call, 0) : oll_tool(call));
}

/* OpenAI streams a call as it is written: {index, id, type, function:
 * {name, arguments: ""}} first, then {index, function: {arguments: piece}}
 * chunks whose pieces join into the arguments' JSON text. */
static void on_tool_part(ks_gen *g, int index, const char *name, const char *args, size_t n, void *user) {
    run *u = user;
    json_t *fn = json_object();
    json_t *t = json_object();
    json_object_set_new(t, "index", json_integer(index));
    if (name) {
        char id[80];
        call_id(u, index, id, sizeof id);
        json_object_set_new(t, "id", json_string(id));
        json_object_set_new(t, "type", json_string("function"));
        json_object_set_new(fn, "name", ks_jstr(name, strlen(name)));
    }
    json_object_set_new(fn, "arguments", ks_jstr(args ? args : "", n));
    json_object_set_new(t, "function", fn);
    stream_delta(u, KS_D_CONTENT, "", 0, t);
}

static void oll_final_fields(run *u, json_t *j) {
    double now = ks_now();
    ks_req *q = u->q;
    double t_first = q->t_first > 0 ? q->t_first : now;
    double t_start = q->t_start > 0 ? q->t_start : u->t0;
    json_object_set_new(j, "done", json_true());
    json_object_set_new(j, "done_reason", json_string(u->g.finish == KS_FIN_LENGTH ? "length" : "stop"));
    json_object_set_new(j, "total_duration", json_integer((json_int_t)((now - u->t0 + u->a.load_wait) * 1e9)));
    json_object_set_new(j, "load_duration", json_integer((json_int_t)(u->a.load_wait * 1e9)));
    json_object_set_new(j, "prompt_eval_count", json_integer(q->n_prompt));
    json_object_set_new(j, "prompt_eval_duration", json_integer((json_int_t)((t_first - t_start) * 1e9)));
    json_object_set_new(j, "eval_count", json_integer(u->g.n_gen));
    json_object_set_new(j, "eval_duration", json_integer((json_int_t)((now - t_first) * 1e9)));
}

/* The closing chunk(s) of a stream. */
static void stream_final(run *u) {
    if (u->g.finish == KS_FIN_ERROR) {
        json_t *e = json_object();
        json_object_set_new(e, "message", json_string(u->g.err[0] ? u->g.err : "generation failed"));
        json_object_set_new(e, "type", json_string("server_error"));
        json_t *j = json_object();
        if (u->a.format >= KS_F_OLL_GEN) {
            json_object_set_new(j, "error", json_string(u->g.err[0] ? u->g.err : "generation failed"));
            json_decref(e);
            ndjson(u, j);
        } else {
            json_object_set_new(j, "error", e);
            sse(u, j);
            ks_buf_puts(u->sink, "data: [DONE]\n\n");
        }
        return;
    }
    if (u->a.format == KS_F_OAI_CHAT || u->a.format == KS_F_OAI_COMPL) {
        int chat = u->a.format == KS_F_OAI_CHAT;
        json_t *j = oai_base(u, chat ? "chat.completion.chunk" : "text_completion");
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(0));
        if (chat) json_object_set_new(ch, "delta", json_object());
        else json_object_set_new(ch, "text", json_string(""));
        json_object_set_new(ch, "logprobs", take_logprobs(u));
        json_object_set_new(ch, "finish_reason", json_string(finish_str(u)));
        json_t *arr = json_array();
        json_array_append_new(arr, ch);
        json_object_set_new(j, "choices", arr);
        json_object_set_new(j, "timings", timings(u));
        sse(u, j);
        if (u->a.include_usage) {
            j = oai_base(u, chat ? "chat.completion.chunk" : "text_completion");
            json_object_set_new(j, "choices", json_array());
            json_object_set_new(j, "usage", usage(u));
            sse(u, j);
        }
        ks_buf_puts(u->sink, "data: [DONE]\n\n");
        return;
    }
    json_t *j = oll_base(u);
    if (u->a.format == KS_F_OLL_GEN) {
        json_object_set_new(j, "response", json_string(""));
    } else {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("assistant"));
        json_object_set_new(m, "content", json_string(""));
        json_object_set_new(j, "message", m);
    }
    oll_final_fields(u, j);
    ndjson(u, j);
}

static json_t *whole_result(run *u) {
    const char *content = u->content.p ? u->content.p : "";
    if (u->a.format == KS_F_OAI_CHAT || u->a.format == KS_F_OAI_COMPL) {
        int chat = u->a.format == KS_F_OAI_CHAT;
        json_t *j = oai_base(u, chat ? "chat.completion" : "text_completion");
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(0));
        if (chat) {
            json_t *m = json_object();
            json_object_set_new(m, "role", json_string("assistant"));
            json_object_set_new(m, "content", ks_jstr(content, u->content.len));
            if (u->reasoning.len)
                json_object_set_new(m, "reasoning_content", ks_jstr(u->reasoning.p, u->reasoning.len));
            if (json_array_size(u->oai_tools)) json_object_set(m, "tool_calls", u->oai_tools);
            json_object_set_new(ch, "message", m);
        } else {
            json_object_set_new(ch, "text", ks_jstr(content, u->content.len));
        }
        json_object_set_new(ch, "logprobs", take_logprobs(u));
        json_object_set_new(ch, "finish_reason", json_string(finish_str(u)));
        json_t *arr = json_array();
        json_array_append_new(arr, ch);
        json_object_set_new(j, "choices", arr);
        json_object_set_new(j, "usage", usage(u));
        json_object_set_new(j, "timings", timings(u));
        return j;
    }
    json_t *j = oll_base(u);
    if (u->a.format == KS_F_OLL_GEN) {
        json_object_set_new(j, "response", ks_jstr(content, u->content.len));
        if (u->reasoning.len) json_object_set_new(j, "thinking", ks_jstr(u->reasoning.p, u->reasoning.len));
    } else {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("assistant"));
        json_object_set_new(m, "content", ks_jstr(content, u->content.len));
        if (u->reasoning.len) json_object_set_new(m, "thinking", ks_jstr(u->reasoning.p, u->reasoning.len));
        if (json_array_size(u->oai_tools)) json_object_set(m, "tool_calls", u->oai_tools);
        json_object_set_new(j, "message", m);
    }
    oll_final_fields(u, j);
    return j;
}

static void run_free(run *u) {
    ks_metrics_tokens(u->q->n_prompt, u->q->n_cached, u->g.n_gen);
    /* the line goes out before the admission ends: it precedes any unload
     * or stop this request's end lets happen */
    ks_reqlog_tokens(u->log, u->q->n_prompt, u->g.n_gen);
    ks_reqlog_emit(u->log);
    ks_reqlog_put(u->log);
    json_decref(u->g.stops); /* the run holds a reference (see run_new) */
    ks_gen_free(&u->g);
    ks_req_free(u->q); /* cancels it when it is still running */
    ks_model_done(u->r, u->a.keep_alive);
    ks_buf_free(&u->content);
    ks_buf_free(&u->reasoning);
    json_decref(u->oai_tools);
    free(u);
}

static int run_fill(ks_stream *st) {
    run *u = st->user;
    u->sink = &st->out;
    /* wait for output in short slices so a gone client is noticed */
    for (int i = 0; i < 50 && st->out.len == 0; i++) {
        if (ks_gen_pump(&u->g, u->q, 100)) {
            stream_final(u);
            return 1;
        }
        if (st->out.len == 0 && ks_conn_gone(st->conn)) return 1;
    }
    if (st->out.len == 0 && u->a.format == KS_F_OAI_CHAT) ks_buf_puts(&st->out, ": keep-alive\n\n");
    return 0;
}

static void run_cleanup(ks_stream *st) { run_free(st->user); }

int ks_run(ks_srv *s, ks_model *r, struct MHD_Connection *c, ks_req *q, const ks_run_args *a, const ks_gen_opts *o) {
    run *u = calloc(1, sizeof *u);
    if (!u) {
        ks_req_free(q);
        ks_model_done(r, a->keep_alive);
        return ks_error(c, o->ollama, 500, "server_error", "out of memory", NULL);
    }
    u->s = s;
    u->r = r;
    u->q = q;
    u->a = *a;
    u->log = ks_reqlog_hold(ks_reqlog_current());
    u->t0 = ks_now();
    u->created = (long)ks_wall();
    u->oai_tools = json_array();
    snprintf(u->model, sizeof u->model, "%s", a->model && *a->model ? a->model : r->name);
    static atomic_uint_fast64_t counter;
    snprintf(u->id, sizeof u->id, "%s-%lx%llx", a->format == KS_F_OAI_CHAT ? "chatcmpl" : "cmpl", u->created,
             (unsigned long long)atomic_fetch_add(&counter, 1));
    ks_gen_init(&u->g, r->model, a->start_think);
    u->g.stops = o->stop;
    if (json_is_string(o->stop)) { /* one string: wrap it */
        u->g.stops = json_array();
        json_array_append(u->g.stops, o->stop);
    } else if (o->stop) {
        json_incref(o->stop);
    }
    u->g.want_logprobs = o->logprobs;
    /* What the output is split into, as the references do: completions are
     * raw text; reasoning is split unless Ollama's think is false; a
     * <tool_call> block is a call only when the request offered tools. */
    u->g.split_think = a->format != KS_F_OAI_COMPL && !a->think_off;
    u->g.split_tools = (a->format == KS_F_OAI_CHAT || a->format == KS_F_OLL_CHAT) && a->has_tools;
    u->g.on_text = on_text;
    u->g.on_tool = on_tool;
    /* Ollama sends whole calls, as Ollama does */
    if (a->stream && a->format == KS_F_OAI_CHAT) u->g.on_tool_part = on_tool_part;
    u->g.user = u;
    if (a->stream) {
        ks_stream *st = calloc(1, sizeof *st);
        if (!st) {
            run_free(u);
            return ks_error(c, o->ollama, 500, "server_error", "out of memory", NULL);
        }
        st->fill = run_fill;
        st->cleanup = run_cleanup;
        st->user = u;
        int oai = a->format == KS_F_OAI_CHAT || a->format == KS_F_OAI_COMPL;
        return ks_send_stream(c, oai ? "text/event-stream" : "application/x-ndjson", st);
    }
    while (!ks_gen_pump(&u->g, u->q, 100)) {
        if (ks_conn_gone(c)) {
            run_free(u);
            return MHD_NO;
        }
    }
    int rc;
    if (u->g.finish == KS_FIN_ERROR) {
        if (a->format >= KS_F_OLL_GEN) rc = ks_oll_error(c, 500, u->g.err[0] ? u->g.err : "generation failed");
        else rc = ks_send_error(c, 500, "server_error", u->g.err[0] ? u->g.err : "generation failed", NULL);
    } else {
        rc = ks_send_json(c, 200, whole_result(u));
    }
    run_free(u);
    return rc;
}

/* ---- endpoints ---- */

/* One entry of GET /v1/models. */
static json_t *model_entry(const char *id) {
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(id));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(0));
    json_object_set_new(m, "owned_by", json_string("kiln"));
    return m;
}

int ks_oai_models(ks_srv *s, struct MHD_Connection *c) {
    json_t *data = json_array();
    pthread_mutex_lock(&s->mu);
    for (ks_model *m = s->models; m; m = m->next)
        if (m->pinned) json_array_append_new(data, model_entry(m->name));
    pthread_mutex_unlock(&s->mu);
    json_t *arr = ks_store_models(s);
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!name) continue;
        int dup = 0;
        size_t k;
        json_t *have;
        json_array_foreach(data, k, have) dup |= !strcmp(json_string_value(json_object_get(have, "id")), name);
        if (!dup) json_array_append_new(data, model_entry(name));
    }
    json_decref(arr);
    json_t *j = json_object();
    json_object_set_new(j, "object", json_string("list"));
    json_object_set_new(j, "data", data);
    return ks_send_json(c, 200, j);
}

/* Finds and loads the request's model; sends the error itself. */
static ks_model *open_model(ks_srv *s, struct MHD_Connection *c, json_t *body, int ollama, double *load_wait,
                            int *rc) {
    json_t *mv = json_object_get(body, "model");
    if (mv && !json_is_string(mv)) {
        *rc = ollama ? ks_oll_error(c, 400, "'model' must be a string")
                     : ks_send_error(c, 400, "invalid_request_error", "'model' must be a string", "model");
        return NULL;
    }
    int status = 404;
    char msg[600];
    ks_model *r = ks_model_use(s, json_string_value(mv), KS_TASK_GENERATE, load_wait, &status, msg, sizeof msg);
    ks_reqlog_model(ks_reqlog_current(), r ? r->name : json_string_value(mv));
    if (!r) {
        const char *type = status == 404 ? "not_found_error" : status == 400 ? "invalid_request_error"
                           : status == 503 ? "unavailable_error" : "server_error";
        *rc = ollama ? ks_oll_error(c, status, msg) : ks_send_error(c, status, type, msg, "model");
        return NULL;
    }
    return r;
}

static int ends_with_think(const char *p) {
    size_t n = strlen(p);
    while (n && (p[n - 1] == '\n' || p[n - 1] == ' ')) n--;
    return n >= 7 && !strncmp(p + n - 7, "<think>", 7);
}

int ks_force_think(ks_model *r, const char *prompt) {
    if (ends_with_think(prompt)) return 2;
    const char *tmpl = ks_template_text(r);
    return tmpl && strstr(tmpl, "<think>") ? 1 : 0;
}

/* OpenAI's tool_choice: "auto" (or none given) lets the model choose;
 * "none" neither shows the tools to the model nor reads its output as
 * calls; "required" and a named function constrain the output to one call
 * in the template's <tool_call> syntax (sample/call.c), its arguments held
 * to the tool's parameters. */
int ks_tool_choice(const json_t *v, const json_t *tools, int *off, json_t **force, char *msg, size_t cap) {
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
            snprintf(msg, cap, "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
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
        if (want) snprintf(msg, cap, "'tool_choice' names the function '%s', which is not among 'tools'", want);
        else snprintf(msg, cap, "'tool_choice' is \"required\" but 'tools' offers no function");
        return -1;
    }
    *force = out;
    return 0;
}

/* What a message carries besides text ("images", "audio"), or NULL:
 * Ollama's images array, or an OpenAI content part other than text. */
static const char *media_of(json_t *m) {
    json_t *im = json_object_get(m, "images");
    if (json_is_array(im) && json_array_size(im)) return "images";
    json_t *parts = json_object_get(m, "content");
    size_t i;
    json_t *part;
    json_array_foreach(parts, i, part) {
        const char *t = json_string_value(json_object_get(part, "type"));
        if (!t || !strcmp(t, "text")) continue;
        return strstr(t, "audio") ? "audio" : "images";
    }
    return NULL;
}

/* A request the model cannot serve as asked is a 400, never a silent
 * drop: images or audio to a text-only model (every model kiln generates
 * with), Ollama's think: true to a model without thinking (Ollama's rule:
 * its template has no <think>).  messages: the chat's, or NULL for a
 * generate body's own "images".  Returns 1 after sending the error. */
static int cannot_serve(ks_model *r, struct MHD_Connection *c, json_t *body, json_t *messages, int ollama, int *rc) {
    const char *media = messages ? NULL : media_of(body);
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) if (!media) media = media_of(m);
    char msg[400];
    if (media) {
        snprintf(msg, sizeof msg, "\"%s\" does not accept %s: kiln runs it as a text-only model", r->name, media);
        *rc = ks_error(c, ollama, 400, "invalid_request_error", msg, messages ? "messages" : "images");
        return 1;
    }
    const char *tmpl = ks_template_text(r);
    if (ollama && json_is_true(json_object_get(body, "think")) && !(tmpl && strstr(tmpl, "<think>"))) {
        snprintf(msg, sizeof msg, "\"%s\" does not support thinking", r->name);
        *rc = ks_oll_error(c, 400, msg);
        return 1;
    }
    return 0;
}

static int chat_run(ks_srv *s, struct MHD_Connection *c, json_t *body, int format, json_t *force, int tools_off);

/* Shared by /v1/chat/completions and /api/chat. */
int ks_chat_common(ks_srv *s, struct MHD_Connection *c, json_t *body, int format) {
    int tools_off = 0, rc = MHD_NO;
    json_t *force = NULL;
    char msg[300];
    if (format != KS_F_OLL_CHAT && ks_tool_choice(json_object_get(body, "tool_choice"), json_object_get(body, "tools"),
                                                  &tools_off, &force, msg, sizeof msg))
        return bad(c, 0, &rc, "tool_choice", msg);
    rc = chat_run(s, c, body, format, force, tools_off);
    json_decref(force); /* a started request keeps its own copies */
    return rc;
}

static int chat_run(ks_srv *s, struct MHD_Connection *c, json_t *body, int format, json_t *force, int tools_off) {
    int ollama = format == KS_F_OLL_CHAT, rc = MHD_NO;
    ks_gen_opts o;
    json_t *optsrc = ollama ? json_object_get(body, "options") : body;
    if (ks_parse_opts(c, optsrc, ollama, &o, &rc)) return rc;
    o.force_tools = force;
    if (ollama) {
        json_t *fmt = json_object_get(body, "format");
        if (ks_oll_format(fmt, &o, c, &rc)) return rc;
    }
    json_t *messages = json_object_get(body, "messages");
    if (!json_is_array(messages) || !json_array_size(messages))
        return ollama ? ks_oll_error(c, 400, "'messages' must be a non-empty array")
                      : ks_send_error(c, 400, "invalid_request_error", "'messages' must be a non-empty array",
                                      "messages");
    o.urgent = json_is_true(json_object_get(body, "urgent"));
    o.ignore_eos |= json_is_true(json_object_get(body, "ignore_eos"));
    double load_wait = 0;
    ks_model *r = open_model(s, c, body, ollama, &load_wait, &rc);
    if (!r) return rc;
    if (ks_defaults_opts(r, c, optsrc, ollama, &o, &rc)) { /* a store pack's options under the request's */
        ks_model_done(r, NAN);
        return rc;
    }
    if (cannot_serve(r, c, body, messages, ollama, &rc)) {
        ks_model_done(r, ollama ? ks_parse_duration(json_object_get(body, "keep_alive")) : NAN);
        return rc;
    }
    json_t *think = json_object_get(body, "think");
    int th = json_is_boolean(think) ? json_is_true(think) : -1;
    json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (json_is_boolean(json_object_get(kw, "enable_thinking"))) th = json_is_true(json_object_get(kw, "enable_thinking"));
    char err[300];
    json_t *tools = json_object_get(body, "tools");
    if (tools_off) tools = NULL;
    json_t *msgs = ks_defaults_messages(r, messages); /* and its system prompt */
    char *prompt = ks_render_chat(r, msgs, tools, th, err, sizeof err);
    json_decref(msgs);
    double ka = ollama ? ks_parse_duration(json_object_get(body, "keep_alive")) : NAN;
    if (!prompt) {
        ks_model_done(r, ka);
        return ollama ? ks_oll_error(c, 400, err) : ks_send_error(c, 400, "invalid_request_error", err, "messages");
    }
    int32_t n = 0;
    int32_t *ids = ks_tokenize(r->model, prompt, 1, &n);
    o.force_think = ks_force_think(r, prompt);
    ks_run_args a = {format, 1, 0, ends_with_think(prompt), ka, json_string_value(json_object_get(body, "model")),
                     ollama && th == 0, json_is_array(tools) && json_array_size(tools) > 0, 0};
    free(prompt);
    json_t *stream = json_object_get(body, "stream");
    a.stream = ollama ? !json_is_false(stream) : json_is_true(stream);
    a.include_usage = json_is_true(json_object_get(json_object_get(body, "stream_options"), "include_usage"));
    a.load_wait = load_wait;
    ks_req *q = ids ? ks_start(r, c, ids, n, &o, &rc) : NULL;
    if (!ids) rc = ks_error(c, ollama, 500, "server_error", "tokenization failed", NULL);
    if (!q) {
        ks_model_done(r, ka);
        return rc;
    }
    return ks_run(s, r, c, q, &a, &o);
}

int ks_oai_chat(ks_srv *s, struct MHD_Connection *c, json_t *body) { return ks_chat_common(s, c, body, KS_F_OAI_CHAT); }

int ks_generate_common(ks_srv *s, struct MHD_Connection *c, json_t *body, int format, const char *prompt_text,
                       json_t *prompt_ids, ks_gen_opts *o, double ka) {
    int ollama = format == KS_F_OLL_GEN, rc = MHD_NO;
    o->urgent = json_is_true(json_object_get(body, "urgent"));
    o->ignore_eos |= json_is_true(json_object_get(body, "ignore_eos"));
    double load_wait = 0;
    ks_model *r = open_model(s, c, body, ollama, &load_wait, &rc);
    if (!r) return rc;
    if (ks_defaults_opts(r, c, ollama ? json_object_get(body, "options") : body, ollama, o, &rc)) {
        ks_model_done(r, ka);
        return rc;
    }
    if (cannot_serve(r, c, body, NULL, ollama, &rc)) {
        ks_model_done(r, ka);
        return rc;
    }
    int32_t n = 0, *ids = NULL;
    char *rendered = NULL;
    int start_think = 0;
    if (prompt_ids) {
        n = (int32_t)json_array_size(prompt_ids);
        ids = malloc(((size_t)n + 1) * sizeof *ids);
        for (int32_t i = 0; ids && i < n; i++) {
            json_int_t v = json_integer_value(json_array_get(prompt_ids, (size_t)i));
            if (v < 0 || v >= r->n_vocab) {
                free(ids);
                ks_model_done(r, ka);
                return ks_error(c, ollama, 400, "invalid_request_error", "a prompt token id is out of range", "prompt");
            }
            ids[i] = (int32_t)v;
        }
    } else {
        const char *text = prompt_text;
        /* Ollama applies the chat template to a plain prompt unless raw */
        if (ollama && ks_has_chat(r) && !json_is_true(json_object_get(body, "raw"))) {
            json_t *msgs = json_array();
            const char *sys = json_string_value(json_object_get(body, "system"));
            if (!sys) sys = ks_defaults_system(r);
            if (sys) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", sys));
            json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", prompt_text));
            json_t *think = json_object_get(body, "think");
            char err[300];
            rendered = ks_render_chat(r, msgs, NULL, json_is_boolean(think) ? json_is_true(think) : -1, err, sizeof err);
            json_decref(msgs);
            if (!rendered) {
                ks_model_done(r, ka);
                return ks_oll_error(c, 400, err);
            }
            text = rendered;
            start_think = ends_with_think(rendered);
        }
        /* special-token text in a raw prompt is the token, as llama.cpp reads it */
        ids = ks_tokenize(r->model, text, 1, &n);
    }
    free(rendered);
    if (!ids) {
        ks_model_done(r, ka);
        return ks_error(c, ollama, 500, "server_error", "tokenization failed", NULL);
    }
    ks_req *q = ks_start(r, c, ids, n, o, &rc);
    if (!q) {
        ks_model_done(r, ka);
        return rc;
    }
    json_t *stream = json_object_get(body, "stream");
    ks_run_args a = {format, ollama ? !json_is_false(stream) : json_is_true(stream),
                     json_is_true(json_object_get(json_object_get(body, "stream_options"), "include_usage")),
                     start_think, ka, json_string_value(json_object_get(body, "model")),
                     ollama && json_is_false(json_object_get(body, "think")), 0, load_wait};
    return ks_run(s, r, c, q, &a, o);
}

int ks_oai_completions(ks_srv *s, struct MHD_Connection *c, json_t *body) {
    ks_gen_opts o;
    int rc = MHD_NO;
    if (ks_parse_opts(c, body, 0, &o, &rc)) return rc;
    json_t *p = json_object_get(body, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
    if (json_is_string(p)) return ks_generate_common(s, c, body, KS_F_OAI_COMPL, json_string_value(p), NULL, &o, NAN);
    if (json_is_array(p) && json_array_size(p) && json_is_integer(json_array_get(p, 0)))
        return ks_generate_common(s, c, body, KS_F_OAI_COMPL, NULL, p, &o, NAN);
    return ks_send_error(c, 400, "invalid_request_error",
                         "'prompt' must be a string or an array of token ids (one prompt per request)", "prompt");
}
