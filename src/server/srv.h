/* Internal types shared by the server's files (see server.h for the map). */
#ifndef KILN_SRV_H
#define KILN_SRV_H

#include "server/guard.h"
#include "engine/engine.h"
#include "gen/gen.h"
#include "sample/jschema.h"
#include "sample/sample.h"
#include "server/server.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

double ks_now(void); /* monotonic seconds */
double ks_wall(void); /* Unix time in seconds */

/* ---- growable byte buffer ---- */
typedef struct ks_buf {
    char *p;
    size_t len, cap;
} ks_buf;
void ks_buf_put(ks_buf *b, const char *s, size_t n);
void ks_buf_puts(ks_buf *b, const char *s);
void ks_buf_printf(ks_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends j serialized compactly (and frees nothing). */
void ks_buf_json(ks_buf *b, const json_t *j);
void ks_buf_free(ks_buf *b);
/* A JSON string of s[0..n); invalid UTF-8 bytes become U+FFFD. */
json_t *ks_jstr(const char *s, size_t n);

/* ---- a generation request ---- */
enum { KS_FIN_NONE = 0, KS_FIN_STOP, KS_FIN_LENGTH, KS_FIN_CANCEL, KS_FIN_ERROR };

typedef struct ks_req {
    int32_t *prompt;
    int32_t n_prompt;
    int32_t max_tokens;
    kiln_sampler_params sp;
    int32_t n_top;            /* top logprobs wanted per token (0..20) */
    int want_logprobs;        /* compute the token's logprob */
    int json_mode;            /* constrain sampling to one JSON value */
    int ignore_eos;
    ks_schema *schema;        /* with json_mode: the value's schema (owned); NULL = any value */
    ks_sv sv;                 /* the recognizer's state while it runs */
    int n_call;               /* a forced tool call: the names it may take */
    char **call_names;        /*   (owned) */
    ks_schema **call_schemas; /*   and their arguments' schemas (owned) */
    sample_call call;         /*   its recognizer's state */
    sample_constraint cons;
    engine_llm_req *er;       /* its admission by the model's engine, once started */
    gen_req *gr;              /* and its events */
    int32_t n_cached;         /* prompt tokens taken from the prefix cache */
    int32_t n_drafted;        /* speculative decoding: proposals verified */
    int32_t n_accepted;       /*   and accepted */
    int spec;                 /* the model speculates (timings carry the counts) */
    double t_submit, t_start, t_first, t_last;
} ks_req;

/* ---- the models the server knows (models.c) ---- */
enum { KS_M_UNLOADED = 0, KS_M_LOADING, KS_M_READY, KS_M_UNLOADING, KS_M_FAILED, KS_M_STOPPED };
/* What a request asks of a model. */
enum { KS_TASK_GENERATE = 0, KS_TASK_EMBED, KS_TASK_TRANSCRIBE, KS_TASK_INFO, KS_TASK_RERANK };

/* Counters of a generation model that /metrics reports as totals since the
 * server started (as llama-server's _total counters), so they survive the
 * model's unloads and reloads. */
typedef struct ks_counts {
    gen_spec_stats spec;      /* speculative decoding */
    uint64_t lookup_tokens;   /* prompt tokens looked up in the prefix cache */
    uint64_t hit_tokens;      /* of those, found */
} ks_counts;

typedef struct ks_model {
    struct ks_srv *srv;
    char name[256];           /* as clients name it */
    char ref[4096];           /* what its engine loads: a file, or a store name */
    int pinned;               /* named by -m: loaded at start, the default model */
    kiln_engine_family_id family;
    kiln_engine *eng;         /* made at the first load */
    uint64_t file_bytes;
    /* the rest under ks_srv.mu */
    int state;                /* KS_M_*, from the engine's events */
    char err[512];            /* the latest failure */
    int users;                /* requests holding it: it is not unloaded under them */
    double last_used;         /* ks_now() */
    double keep_alive;        /* seconds after the last use; < 0 forever */
    double load_started, load_seconds;
    double loaded_at;         /* ks_wall() */
    kiln_model *model;        /* while READY (and only for a user: it goes with the unload) */
    int32_t n_ctx, n_vocab;
    uint64_t weight_bytes;    /* of the latest load */
    json_t *details;          /* Ollama's details of the latest load, or NULL */
    json_t *defaults;         /* a store pack's defaults (kiln_store_lease_defaults), or NULL */
    void *tmpl;               /* compiled chat template or NULL */
    int tmpl_tried;
    ks_counts base;           /* what earlier loads counted */
    ks_counts seen;           /* what this load had counted when its latest request ended */
    struct ks_model *next;
} ks_model;

/* images.c: the image pack behind /v1/images/generations */
typedef struct ks_images ks_images;
ks_images *ks_images_start(const char *pack, char *err, size_t cap);
void ks_images_free(ks_images *im);

typedef struct ks_srv {
    ks_config cfg;
    struct MHD_Daemon *mhd;
    int port;
    pthread_mutex_t mu;       /* the models and their fields */
    pthread_cond_t cv;        /* broadcast when a model changes */
    ks_model *models;         /* every model named so far, first used first */
    uint64_t mem_budget;      /* what resident models may take without --max-loaded */
    pthread_t keeper;         /* keep-alive timers */
    int keeper_started, quit;
    kiln_store *store;
    ks_guard guard;           /* Host, Origin and public-path rules */
    atomic_int draining;
    atomic_int n_active_http;
    ks_images *images;        /* NULL without --image */
} ks_srv;

/* Loads -m models (and starts the keep-alive timers).  Fails when one is
 * not a model file or store name. */
kiln_status ks_models_start(ks_srv *s);
/* Waits for the -m models' first loads: the first failure, with msg. */
kiln_status ks_models_wait_loaded(ks_srv *s, char *msg, size_t cap);
/* Every engine's graceful stop; after grace seconds what still runs is
 * cancelled; returns once every engine has stopped. */
void ks_models_drain(ks_srv *s, double grace);
void ks_models_free(ks_srv *s);
/* The model a request names ("" or NULL: the first -m model), loaded if
 * needed (waiting), for task (KS_TASK_*: a generation of an embedding
 * model is a 400).  Takes a use, which ks_model_done drops.  *load_wait
 * (optional) receives the seconds spent waiting for a load.  NULL with an
 * HTTP status and message. */
ks_model *ks_model_use(ks_srv *s, const char *name, int task, double *load_wait, int *status, char *msg,
                       size_t cap);
/* The name of the first -m model of family in out; -1 when there is none. */
int ks_model_first(ks_srv *s, kiln_engine_family_id family, char *out, size_t cap);
/* m's counters since the server started: earlier loads' plus live (the
 * resident model's stats, or NULL when it is not resident).  Under
 * ks_srv.mu. */
void ks_model_counts(const ks_model *m, const gen_sched_stats *live, ks_counts *out);
/* Drops a use; keep_alive (seconds; NAN: the server's) is how long the
 * model stays once idle (0: it unloads now). */
void ks_model_done(ks_model *m, double keep_alive);
/* Unloads name once idle (keep_alive 0 without a request); -1 with status. */
int ks_model_unload(ks_srv *s, const char *name, int *status, char *msg, size_t cap);
/* Ollama's "details" of m (under ks_srv.mu; a new object). */
json_t *ks_model_details(const ks_model *m);
/* The store's installed models as kiln_store_list's JSON array (an empty
 * array without a store or on failure); the caller decrefs it. */
json_t *ks_store_models(ks_srv *s);

/* log.c: the request log line and the server's other lines */
typedef struct ks_reqlog ks_reqlog;
ks_reqlog *ks_reqlog_begin(const ks_srv *s, const char *method, const char *url);
/* The record of the request this connection thread is handling (or NULL);
 * http.c sets it before each call into a handler. */
void ks_reqlog_set_current(ks_reqlog *l);
ks_reqlog *ks_reqlog_current(void);
ks_reqlog *ks_reqlog_ref(ks_reqlog *l);
void ks_reqlog_put(ks_reqlog *l);
void ks_reqlog_status(ks_reqlog *l, int status); /* the first one counts */
void ks_reqlog_model(ks_reqlog *l, const char *model);
void ks_reqlog_tokens(ks_reqlog *l, int64_t prompt, int64_t gen);
/* the sampling seed the request ran with (given or drawn) */
void ks_reqlog_seed(ks_reqlog *l, uint64_t seed);
/* Writes the line, once (later calls do nothing). */
void ks_reqlog_emit(ks_reqlog *l);
/* A generation takes the line over (a reference with it): the
 * connection's end (ks_reqlog_done) leaves it to the generation's end. */
ks_reqlog *ks_reqlog_hold(ks_reqlog *l);
void ks_reqlog_done(ks_reqlog *l);
/* A line about the server ("kiln serve: ..." or a JSON object). */
void ks_logf(const ks_srv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* metrics.c */
void ks_metrics_request(int status);
void ks_metrics_tokens(int64_t prompt, int64_t cached, int64_t generated);
void ks_metrics_ttft(double s);
void ks_metrics_itl(double s);
void ks_metrics_render(ks_srv *s, ks_buf *out);

/* prompt.c */
/* A copy of messages as chat templates expect them (the caller owns it):
 * null or missing content becomes "", an array of parts its text, and
 * tool-call arguments given as JSON text become objects. */
json_t *ks_chat_normalize(json_t *messages);
/* Renders messages (+ tools) into a prompt with the pack's Go template
 * (an Ollama model's) when it has one, else the GGUF's; returns malloc'd
 * text or NULL with err.  think: -1 default, 0 off, 1 on. */
char *ks_render_chat(ks_model *r, json_t *messages, json_t *tools, int think, char *err, size_t cap);
/* 1 when the model has a chat template kiln can apply. */
int ks_has_chat(ks_model *r);
/* The template text ks_render_chat uses (the pack's Go template, else the
 * GGUF's), or NULL: what /api/show shows and capabilities are read from. */
const char *ks_template_text(ks_model *r);
void ks_template_free(void *t);
/* Tokenizes text; parse_special for rendered chat; *n receives the count. */
int32_t *ks_tokenize(kiln_model *m, const char *text, int parse_special, int32_t *n);

/* toolscan.c: a <tool_call> body read as it arrives (see there) */
typedef struct ks_toolscan {
    ks_buf name;              /* the "name" value, decoded (NUL-terminated) */
    ks_buf args;              /* "arguments": its JSON text, or a string's decoded characters */
    int named;                /* name complete and followed by ',' or '}' */
    int args_begun, args_done;
    int closed;               /* the object ended */
    int bad;                  /* the text broke the JSON or the call's shape; the rest is ignored */
    /* lexer state */
    int st, member, str_key, in_args, name_done, seen_name, seen_args;
    ks_buf stack;             /* '{' and '[' of the open containers */
    ks_buf key;               /* a key of the call's object, decoded */
    ks_buf *sink;             /* where the current string's characters go, or NULL */
    const char *lit;
    int litpos, hexn, u8need;
    unsigned cp, hi, u8cp, u8min;
} ks_toolscan;
void ks_toolscan_reset(ks_toolscan *t); /* for a new body; keeps the buffers */
void ks_toolscan_free(ks_toolscan *t);
void ks_toolscan_feed(ks_toolscan *t, const char *s, size_t n);

/* gen.c: turns a request's tokens into text deltas */
enum { KS_D_CONTENT = 0, KS_D_REASONING = 1 };

typedef struct ks_gen {
    kiln_model *m;
    kiln_detok *dt;
    int32_t n_gen;            /* tokens counted as generated */
    json_t *stops;            /* array of stop strings or NULL */
    ks_buf sbuf;              /* text held back by stop matching */
    ks_buf pbuf;              /* text held back by tag parsing */
    ks_buf tool;              /* body of the current <tool_call> */
    ks_toolscan ts;           /* the same body read as it comes (with on_tool_part) */
    int tool_open;            /* the current call's header went out */
    size_t args_sent;         /* bytes of ts.args sent */
    int mode;                 /* 0 content, 1 reasoning, 2 tool call */
    int split_think;          /* 1: <think>...</think> is reasoning, else content as written */
    int split_tools;          /* 1: <tool_call>...</tool_call> is a call, else content as written */
    int finish;               /* KS_FIN_* once over */
    int stop_hit;             /* index in stops of the string that ended it, or -1 */
    int n_tools;
    json_t *tool_calls;       /* array of {name, arguments(obj)} parsed */
    json_t *logprobs;         /* pending logprob entries (OpenAI shape) */
    int want_logprobs;
    char err[256];
    /* sinks */
    void (*on_text)(struct ks_gen *g, int kind, const char *s, size_t n, void *user);
    /* a whole call ({name, arguments}) at its closing tag */
    void (*on_tool)(struct ks_gen *g, int index, json_t *call, void *user);
    /* Optional: streams calls as they are written.  name (NUL-terminated)
     * opens call index, once its "name" is settled and the body so far has
     * the call's shape; then args carries the next piece of the arguments'
     * JSON text (whole UTF-8 characters).  A call opened this way stands
     * even if its body breaks later (e.g. cut by max_tokens) and does not
     * reach on_tool; a body that never opened one goes to on_tool or back
     * to content at its closing tag, as without this sink. */
    void (*on_tool_part)(struct ks_gen *g, int index, const char *name, const char *args, size_t n, void *user);
    void *user;
} ks_gen;

void ks_gen_init(ks_gen *g, kiln_model *m, int start_in_think);
/* During on_tool: the call's arguments as the model wrote them (JSON text,
 * or a JSON string's characters), when the scanner followed the whole body;
 * NULL otherwise (then serialize the parsed value). */
const char *ks_gen_args_text(const ks_gen *g, size_t *n);
void ks_gen_free(ks_gen *g);
/* One generated token through the pipeline.  Returns 1 when a stop string
 * matched: the generation is over (g->finish is KS_FIN_STOP) and the
 * caller ends the request. */
int ks_gen_token(ks_gen *g, const gen_token *t);
/* The end of the tokens (fin: KS_FIN_*): flushes what was held back. */
void ks_gen_end(ks_gen *g, int fin);
/* Takes whatever q's scheduler produced, waiting up to wait_ms when there
 * is nothing new.  Returns 1 when the generation is over (g->finish set). */
int ks_gen_pump(ks_gen *g, ks_req *q, int wait_ms);
/* The pump's second half: detokenized text through stop strings and tags
 * (final: no more text follows).  Returns 1 when a stop string matched.
 * Tests feed text with it directly. */
int ks_gen_text(ks_gen *g, const char *s, size_t n, int final);

/* http.c helpers the API files use */
struct MHD_Connection;
typedef struct ks_conn ks_conn;
int ks_send_json(struct MHD_Connection *c, int status, json_t *j); /* steals j */
int ks_send_error(struct MHD_Connection *c, int status, const char *type, const char *msg, const char *param);
/* An error in the request's API's shape: Ollama's {"error": msg} when
 * ollama, else OpenAI's {"error": {"message", "type", "param", "code"}}. */
int ks_error(struct MHD_Connection *c, int ollama, int status, const char *type, const char *msg, const char *param);
int ks_send_text(struct MHD_Connection *c, int status, const char *ctype, const char *body, size_t len,
                 int copy);
/* 1 when the client has gone away. */
int ks_conn_gone(struct MHD_Connection *c);
/* A thread that fires a cancel token when the client goes away, for a
 * request that runs long before it writes (a transcription, a rerank).
 * Start returns NULL when it cannot watch (then the request runs
 * unwatched); cancel gives the token (NULL for NULL); stop joins the
 * thread and frees the token. */
typedef struct ks_watch ks_watch;
ks_watch *ks_watch_start(struct MHD_Connection *c);
kiln_engine_cancel *ks_watch_cancel(ks_watch *w);
void ks_watch_stop(ks_watch *w);

/* audio.c: POST /v1/audio/transcriptions and /translations over the buffered
 * multipart body. */
int ks_audio_route(ks_srv *s, struct MHD_Connection *c, const char *url, const char *body, size_t len);

/* A streamed response: fill() appends bytes to out and returns 1 at the
 * end; it runs on the connection's thread and may block briefly. */
typedef struct ks_stream {
    ks_buf out;
    size_t pos;
    int ended;
    struct MHD_Connection *conn;
    int (*fill)(struct ks_stream *st);
    void (*cleanup)(struct ks_stream *st);
    void *user;
} ks_stream;
int ks_send_stream(struct MHD_Connection *c, const char *ctype, ks_stream *st);

/* API handlers: body is the parsed JSON (NULL for GET) */
int ks_oai_models(ks_srv *s, struct MHD_Connection *c);
int ks_oai_chat(ks_srv *s, struct MHD_Connection *c, json_t *body);
int ks_oai_completions(ks_srv *s, struct MHD_Connection *c, json_t *body);
int ks_oai_embeddings(ks_srv *s, struct MHD_Connection *c, json_t *body);
int ks_oai_images(ks_srv *s, struct MHD_Connection *c, json_t *body);
int ks_rerank(ks_srv *s, struct MHD_Connection *c, json_t *body); /* rerank.c: /v1/rerank and its aliases */
int ks_oll_route(ks_srv *s, struct MHD_Connection *c, const char *method, const char *url, json_t *body);
extern const char ks_webui_html[];

/* shared request plumbing (openai.c) */
typedef struct ks_gen_opts {
    int32_t max_tokens;       /* -1 = rest of the context */
    kiln_sampler_params sp;
    json_t *stop;             /* borrowed */
    int32_t n_top;
    int logprobs;
    int json_mode;
    const json_t *schema;     /* borrowed: the JSON Schema json_mode output must follow, or NULL */
    int urgent;               /* "urgent": true (kiln's own field): ahead of queued requests */
    int ignore_eos;           /* "ignore_eos": true (llama-server's): never end at an end-of-generation token */
    int ollama;               /* errors in Ollama's shape ({"error": "..."}) */
    const json_t *force_tools; /* borrowed: a forced tool_choice's tools, one of which the output must call */
    int force_think;          /* with force_tools: 1 a <think> block may come first, 2 the prompt opened one */
} ks_gen_opts;
struct MHD_Connection;
/* 0 when schema (NULL: none) compiles; else a message for a 400. */
int ks_check_schema(const json_t *schema, char *msg, size_t n);
/* OpenAI's tool_choice over tools (OpenAI function tools): "auto" or
 * absent leaves both NULL/0; "none" sets *off; "required" or
 * {"type": "function", "function": {"name": N}} sets *force to the tools the
 * one call may name (a new array).  -1 with a message for a 400. */
int ks_tool_choice(const json_t *choice, const json_t *tools, int *off, json_t **force, char *msg, size_t cap);
/* force_think for a prompt: 2 when it opens a <think> block, 1 when the
 * model's template has one, else 0. */
int ks_force_think(ks_model *r, const char *prompt);
/* Ollama's "format": "json" or a JSON Schema into o; a schema that cannot
 * be enforced answers 400 (*rc) and returns -1. */
int ks_oll_format(const json_t *fmt, ks_gen_opts *o, struct MHD_Connection *c, int *rc);
/* Output shapes of ks_run */
enum { KS_F_OAI_CHAT = 0, KS_F_OAI_COMPL, KS_F_OLL_GEN, KS_F_OLL_CHAT };
typedef struct ks_run_args {
    int format;               /* KS_F_* */
    int stream;
    int include_usage;        /* OpenAI stream_options.include_usage */
    int start_think;          /* the prompt opened a <think> block */
    double keep_alive;        /* seconds for the model after this; NAN = keep */
    const char *model;        /* name echoed back */
    int think_off;            /* the request said think: false (Ollama) */
    int has_tools;            /* the request offered tools */
    double load_wait;         /* seconds this request waited for the model to load */
} ks_run_args;
/* Sends q's result (streamed or whole) in the chosen shape; takes over the
 * request and the model use. */
int ks_run(ks_srv *s, ks_model *r, struct MHD_Connection *c, ks_req *q, const ks_run_args *a, const ks_gen_opts *o);
/* Parses OpenAI-style sampling fields (or Ollama's options when ollama);
 * on a bad value sends a 400 and returns -1. */
int ks_parse_opts(struct MHD_Connection *c, json_t *src, int ollama, ks_gen_opts *o, int *rc);
/* "1.5m", "300", 300, -1 ... -> seconds; NAN when absent or bad. */
double ks_parse_duration(json_t *v);
/* Generation endpoints shared by both APIs (openai.c). */
int ks_chat_common(ks_srv *s, struct MHD_Connection *c, json_t *body, int format);
int ks_generate_common(ks_srv *s, struct MHD_Connection *c, json_t *body, int format, const char *prompt_text,
                       json_t *prompt_ids, ks_gen_opts *o, double keep_alive);
/* Embeds inputs (a string or an array of strings) with r's model; fills
 * vectors (json arrays) or sends the error and returns -1. */
int ks_embed_inputs(ks_model *r, struct MHD_Connection *c, json_t *input, int kind, int dims, int truncate, int ollama,
                    json_t **vectors, int *n_tokens, int *rc);
/* Ollama error shape {"error": msg}. */
int ks_oll_error(struct MHD_Connection *c, int status, const char *msg);

/* Validates against the context and queues: returns the request, or NULL
 * after sending the error response (*rc receives MHD's return). */
ks_req *ks_start(ks_model *r, struct MHD_Connection *c, int32_t *ids, int32_t n, const ks_gen_opts *o, int *rc);

/* defaults.c: a store pack's defaults (an Ollama model's params and
 * system layers) under what a request sets.  Re-reads o with the pack's
 * options under the request's (ollama: src is the request's "options",
 * else its body), keeping o's other fields; -1 after sending a 400. */
int ks_defaults_opts(ks_model *r, struct MHD_Connection *c, json_t *src, int ollama, ks_gen_opts *o, int *rc);
/* messages with the pack's system prompt first when they have none: a new
 * reference (messages itself when nothing changes). */
json_t *ks_defaults_messages(ks_model *r, json_t *messages);
/* The pack's system prompt, or NULL. */
const char *ks_defaults_system(ks_model *r);
/* The pack's Go template (an Ollama model's template layer), or NULL. */
const char *ks_defaults_template(ks_model *r);

#endif
