/* Internal types shared by the server's files (see server.h for the map). */
#ifndef KILN_SRV_H
#define KILN_SRV_H

#include "server/guard.h"
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
    ks_schema *schema;        /* with json_mode: the value's schema (owned); NULL = any value */
    ks_sv sv;                 /* the recognizer's state while it runs */
    sample_constraint cons;
    gen_req *gr;              /* in the model's scheduler, once submitted */
    int32_t n_cached;         /* prompt tokens taken from the prefix cache */
    double t_submit, t_start, t_first, t_last;
} ks_req;

/* ---- one model: its weights, context and scheduler thread ---- */
enum { KS_M_UNLOADED = 0, KS_M_LOADING, KS_M_READY, KS_M_FAILED };

typedef struct ks_runner {
    struct ks_srv *srv;
    char name[256];           /* as clients name it */
    char path[4096];
    void *lease;              /* kiln_store_lease when resolved by the store */
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* wakes the scheduler */
    pthread_cond_t load_cv;   /* load finished (READY or FAILED) */
    pthread_t thread;
    int started;
    int state;                /* KS_M_* */
    char load_err[512];
    int want_load;
    int unload_now;
    int quit;
    kiln_model *model;
    kiln_context *ctx;
    void *tmpl;               /* compiled chat template or NULL */
    int tmpl_tried;
    kiln_embedder *emb;       /* created on first embedding request */
    pthread_mutex_t emb_mu;
    int users;                /* HTTP requests holding the model */
    double keep_alive;        /* seconds; < 0 forever */
    double last_used;
    double loaded_at;
    double load_seconds;
    gen_sched *sched;         /* batches the requests while loaded */
    int n_ctx;
    int n_vocab;
} ks_runner;

/* images.c: the image pack behind /v1/images/generations */
typedef struct ks_images ks_images;
ks_images *ks_images_start(const char *pack, char *err, size_t cap);
void ks_images_free(ks_images *im);

typedef struct ks_srv {
    ks_config cfg;
    struct MHD_Daemon *mhd;
    int listen_fd;            /* returned by MHD_quiesce_daemon, or -1 */
    int port;
    pthread_mutex_t mu;       /* runners list */
    ks_runner *runners[16];
    int n_runners;
    kiln_store *store;
    ks_guard guard;           /* Host, Origin and public-path rules */
    atomic_int draining;
    atomic_int n_active_http;
    ks_images *images;        /* NULL without --image */
} ks_srv;

/* runner.c */
ks_runner *ks_runner_new(ks_srv *s, const char *name, const char *path, void *lease);
void ks_runner_free(ks_runner *r);
/* Loads if needed (waits) and takes a use; 0 ok, else a KILN status with
 * msg filled. */
int ks_runner_acquire(ks_runner *r, char *msg, size_t cap);
/* Drops a use; keep_alive (seconds, NAN = unchanged) resets the idle timer. */
void ks_runner_release(ks_runner *r, double keep_alive);
/* Asks the scheduler to unload once idle. */
void ks_runner_unload(ks_runner *r);
/* Starts q in the model's scheduler; -1 when its queue is full. */
int ks_runner_submit(ks_runner *r, ks_req *q);
ks_req *ks_req_new(void);
void ks_req_free(ks_req *q); /* cancels it unless done, and waits for that */
/* Finds or creates the runner for a model name; NULL with status/msg. */
ks_runner *ks_find_model(ks_srv *s, const char *name, int *http_status, char *msg, size_t cap);
/* The store's installed models as kiln_store_list's JSON array (an empty
 * array without a store or on failure); the caller decrefs it. */
json_t *ks_store_models(ks_srv *s);

/* metrics.c */
void ks_metrics_request(int status);
void ks_metrics_tokens(int64_t prompt, int64_t cached, int64_t generated);
void ks_metrics_ttft(double s);
void ks_metrics_itl(double s);
void ks_metrics_render(ks_srv *s, ks_buf *out);

/* prompt.c */
/* Renders messages (+ tools) into a prompt; returns malloc'd text or NULL
 * with err.  think: -1 default, 0 off, 1 on. */
char *ks_render_chat(ks_runner *r, json_t *messages, json_t *tools, int think, char *err, size_t cap);
/* 1 when the model has a chat template kiln can apply. */
int ks_has_chat(ks_runner *r);
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
int ks_send_text(struct MHD_Connection *c, int status, const char *ctype, const char *body, size_t len,
                 int copy);
/* 1 when the client has gone away. */
int ks_conn_gone(struct MHD_Connection *c);

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
} ks_gen_opts;
struct MHD_Connection;
/* 0 when schema (NULL: none) compiles; else a message for a 400. */
int ks_check_schema(const json_t *schema, char *msg, size_t n);
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
} ks_run_args;
/* Sends q's result (streamed or whole) in the chosen shape; takes over the
 * request reference and the runner use. */
int ks_run(ks_srv *s, ks_runner *r, struct MHD_Connection *c, ks_req *q, const ks_run_args *a, const ks_gen_opts *o);
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
int ks_embed_inputs(ks_runner *r, struct MHD_Connection *c, json_t *input, int dims, int truncate, int ollama,
                    json_t **vectors, int *n_tokens, int *rc);
/* Ollama error shape {"error": msg}. */
int ks_oll_error(struct MHD_Connection *c, int status, const char *msg);

/* Validates against the context and queues: returns the request, or NULL
 * after sending the error response (*rc receives MHD's return). */
ks_req *ks_start(ks_runner *r, struct MHD_Connection *c, int32_t *ids, int32_t n, const ks_gen_opts *o, int *rc);

#endif
