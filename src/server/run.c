/* A generation request from its admission to its response: the same token
 * stream leaves as OpenAI chat or completion objects (SSE "data:" chunks
 * ending with [DONE]) or as Ollama generate/chat objects (NDJSON). */
#include "server/run.h"

#include "server/buf.h"
#include "server/gen.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/models.h"
#include "server/opts.h"
#include "server/prompt.h"
#include "server/reply.h"
#include "server/srv.h"

#include <math.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    const int fmt = ks_model_callfmt(r);
    const int harmony = fmt == KS_CF_HARMONY; /* a message to functions.NAME */
    if (fmt == KS_CF_TAG && (!tmpl || !strstr(tmpl, "<tool_call>"))) {
        snprintf(msg, cap,
                 "'tool_choice' forces a call, which needs a chat template that writes calls as "
                 "<tool_call>...</tool_call>; the template of \"%.100s\" does not",
                 r->name);
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
    if (harmony) {
        /* the call's header, then its arguments (a value of the schema);
         * <|call|> ends the generation */
        const char *nm = q->call_names[0];
        int plain = q->n_call == 1 && *nm;
        for (const char *c = nm; *c && plain; c++)
            plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
                    *c == '-' || *c == '.';
        if (!plain || strlen(nm) > 64) {
            snprintf(msg, cap,
                     "a forced call on a harmony model takes one tool whose name is letters, digits, '_', '-' or '.' "
                     "(at most 64)");
            return -1;
        }
        snprintf(q->lead_text, sizeof q->lead_text,
                 "<|channel|>commentary to=functions.%s <|constrain|>json<|message|>", nm);
        ks_sv_init(&q->sv, q->call_schemas[0]);
        sample_json_constraint(&q->args_cons, &q->sv);
        sample_lead_init(&q->lead, q->lead_text, &q->args_cons);
        sample_lead_constraint(&q->cons, &q->lead);
        return 0;
    }
    /* another family's form: its literals around the name and arguments */
    if (fmt != KS_CF_TAG && ks_callfmt_call_form(fmt, tmpl, &q->call_form)) {
        snprintf(msg, cap, "a forced call is not available for the %s call form", ks_callfmt_name(fmt));
        return -1;
    }
    const int bad = fmt != KS_CF_TAG
                        ? sample_call_init_form(&q->call, &q->call_form, (const char *const *)q->call_names,
                                                (const ks_schema *const *)q->call_schemas, q->n_call, o->force_think)
                        : sample_call_init(&q->call, (const char *const *)q->call_names,
                                           (const ks_schema *const *)q->call_schemas, q->n_call, o->force_think);
    if (bad) {
        snprintf(msg, cap,
                 "a forced call takes 1..%d tools with distinct names free of quotes, backslashes and "
                 "control characters%s%s",
                 SAMPLE_CALL_MAX, fmt != KS_CF_TAG ? " and of " : "",
                 fmt != KS_CF_TAG ? (q->call_form.mid[0] == '[' ? "'['" : "line breaks") : "");
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
    /* The client's token limit is a cap, as llama-server's and Ollama's: the
     * engine gets the smaller of it and the room the prompt leaves, so a reply
     * that fills the context ends with the length reason.  A prompt that
     * leaves no room is refused here, before any compute, never truncated. */
    const int32_t room = r->n_ctx - n;
    if (room < 1) {
        free(ids);
        snprintf(msg, sizeof msg, "the prompt has %d tokens; the context holds %d, leaving no room to generate", n,
                 r->n_ctx);
        *rc = ks_error(c, o->ollama, 400, "invalid_request_error", msg, "prompt");
        return NULL;
    }
    const int32_t max = o->max_tokens < 0 || o->max_tokens > room ? room : o->max_tokens;
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
    /* reasoning first: the budget counts the block's tokens, and a JSON
     * answer's constraint starts after it (a forced call's recognizer
     * takes the block itself) */
    p.think = o->force_think;
    p.think_budget = o->think_budget == KS_BUDGET_SERVER ? r->srv->cfg.reasoning_budget : o->think_budget;
    p.repeat_guard = r->srv->cfg.repeat_guard;
    if (q->json_mode) {
        ks_sv_init(&q->sv, q->schema ? q->schema : ks_schema_any_object()); /* JSON mode: an object */
        sample_json_constraint(&q->cons, &q->sv);
        p.constraint = &q->cons;
        if (o->force_think) {
            sample_think_init(&q->think, &q->cons, o->force_think);
            sample_think_constraint(&q->think_cons, &q->think);
            p.constraint = &q->think_cons;
        } else if (ks_gen_harmony(r->model)) { /* the answer on the final channel */
            sample_lead_init(&q->lead, "<|channel|>final<|message|>", &q->cons);
            sample_lead_constraint(&q->lead_cons, &q->lead);
            p.constraint = &q->lead_cons;
        }
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
    ks_buf *sink; /* the stream's output while filling */
    int sent_role;
    int sent_final;
    json_t *oai_tools; /* OpenAI-shaped tool calls */
    double t0;
    ks_reqlog *log; /* the request's log line */
} run;

static const char *finish_str(const run *u) {
    if (u->g.finish == KS_FIN_LENGTH) return "length";
    if (ks_fin_incomplete(u->g.finish)) return ks_fin_incomplete(u->g.finish);
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
                json_object_set_new(d, kind == KS_D_REASONING ? "reasoning_content" : "content", ks_jstr(s, n));
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
        json_object_set_new(m, "content",
                            ks_jstr(kind == KS_D_CONTENT && !tool ? s : "", kind == KS_D_CONTENT && !tool ? n : 0));
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
    if (u->a.stream)
        stream_delta(u, kind, s, n, NULL);
    else
        ks_buf_put(kind == KS_D_REASONING ? &u->reasoning : &u->content, s, n);
}

static void on_tool(ks_gen *g, int index, json_t *call, void *user) {
    run *u = user;
    int oai = u->a.format == KS_F_OAI_CHAT;
    if (u->a.stream)
        stream_delta(u, KS_D_CONTENT, "", 0, oai ? oai_tool(u, index, call, 1) : oll_tool(call));
    else
        json_array_append_new(u->oai_tools, oai ? oai_tool(u, index, call, 0) : oll_tool(call));
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
    const char *done = u->g.finish == KS_FIN_LENGTH ? "length" : ks_fin_incomplete(u->g.finish);
    json_object_set_new(j, "done_reason", json_string(done ? done : "stop"));
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
        if (chat)
            json_object_set_new(ch, "delta", json_object());
        else
            json_object_set_new(ch, "text", json_string(""));
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
            /* a reply that is only tool calls has content null, as OpenAI's */
            size_t k = 0;
            while (k < u->content.len && strchr(" \t\r\n", content[k])) k++;
            const int calls_only = json_array_size(u->oai_tools) && k == u->content.len;
            json_object_set_new(m, "content", calls_only ? json_null() : ks_jstr(content, u->content.len));
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
    /* the request's clock starts where ks_start handed it to the engine:
     * the scheduler may begin its prefill (q->t_start) before this line */
    u->t0 = q->t_submit > 0 ? q->t_submit : ks_now();
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
    ks_gen_tools(&u->g, a->tools);
    ks_gen_format(&u->g, ks_model_callfmt(r));
    u->a.tools = NULL; /* borrowed for this call only */
    /* What the output is split into, as the references do: completions are
     * raw text; reasoning is split unless Ollama's think is false; a
     * <tool_call> block is a call only when the request offered tools. */
    u->g.split_think = a->format != KS_F_OAI_COMPL && !a->think_off;
    u->g.split_tools = (a->format == KS_F_OAI_CHAT || a->format == KS_F_OLL_CHAT) && a->has_tools;
    if (a->format == KS_F_OAI_COMPL) u->g.harmony = 0; /* harmony's headers too */
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
    if (u->content.failed || u->reasoning.failed) { /* the text did not fit in memory: no cut answer */
        snprintf(u->g.err, sizeof u->g.err, "out of memory");
        u->g.finish = KS_FIN_ERROR;
    }
    if (u->g.finish == KS_FIN_ERROR) {
        if (a->format >= KS_F_OLL_GEN)
            rc = ks_oll_error(c, 500, u->g.err[0] ? u->g.err : "generation failed");
        else
            rc = ks_send_error(c, 500, "server_error", u->g.err[0] ? u->g.err : "generation failed", NULL);
    } else {
        rc = ks_send_json(c, 200, whole_result(u));
    }
    run_free(u);
    return rc;
}
