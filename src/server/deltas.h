/* A generation request as the server holds it (server_req, made by run.c) and
 * the pipeline that turns its tokens into text deltas (gen.c). */
#ifndef KILN_SERVER_GEN_H
#define KILN_SERVER_GEN_H

#include "server/buf.h"
#include "server/callfmt.h"
#include "server/toolscan.h"
#include "engine/engine.h"
#include "gen/gen.h"
#include "sample/jschema.h"
#include "sample/sample.h"

#include <jansson.h>
#include <stdint.h>

/* ---- a generation request ---- */
/* BUDGET: the thinking budget ran out with no room to answer; REPEAT: the
 * repetition guard (gen.h's GEN_BUDGET, GEN_REPEAT). */
enum {
    SERVER_FIN_NONE = 0,
    SERVER_FIN_STOP,
    SERVER_FIN_LENGTH,
    SERVER_FIN_CANCEL,
    SERVER_FIN_ERROR,
    SERVER_FIN_BUDGET,
    SERVER_FIN_REPEAT
};
/* The reason an incomplete reply names on every API: "thinking_budget",
 * "repetition"; NULL for the other ends. */
const char *server_fin_incomplete(int fin);

/* What a prompt with images carries beside its ids (vision_prompt's), all
 * owned: embd [n_rows][the model's input width], row k for the k-th
 * negative id; mpos NULL or [n_prompt][4] multimodal RoPE positions. */
typedef struct server_prompt_media {
    float *embd;
    int32_t n_rows;
    int32_t *mpos;
} server_prompt_media;

typedef struct server_req {
    int32_t *prompt;
    int32_t n_prompt;
    server_prompt_media media; /* the prompt's image rows (owned) */
    int32_t max_tokens;
    kiln_sampler_params sp;
    int32_t n_top;     /* top logprobs wanted per token (0..20) */
    int want_logprobs; /* compute the token's logprob */
    int json_mode;     /* constrain sampling to one JSON value (an object without a schema) */
    int ignore_eos;
    sample_schema *schema;        /* with json_mode: the value's schema (owned); NULL = any object */
    sample_sv sv;                 /* the recognizer's state while it runs */
    int n_call;                   /* a forced tool call: the names it may take */
    char **call_names;            /*   (owned) */
    sample_schema **call_schemas; /*   and their arguments' schemas (owned) */
    sample_call call;             /*   its recognizer's state */
    sample_call_form call_form;   /*   the literals of its form (another family's than <tool_call>) */
    sample_constraint cons;
    sample_think think;           /* with json_mode after a reasoning block: cons held back until it ends */
    sample_constraint think_cons; /*   the constraint that does so */
    sample_lead lead;             /* with json_mode on a harmony model: the final channel's header first; */
    sample_constraint lead_cons;  /*   the constraint that does so; */
    char lead_text[160];          /*   a forced call's header there (cons is then the lead) */
    sample_constraint args_cons;  /*   and its arguments' constraint (over sv) */
    engine_llm_req *er;           /* its admission by the model's engine, once started */
    gen_req *gr;                  /* and its events */
    int32_t n_cached;             /* prompt tokens taken from the prefix cache */
    int32_t n_drafted;            /* speculative decoding: proposals verified */
    int32_t n_accepted;           /*   and accepted */
    int spec;                     /* the model speculates (timings carry the counts) */
    double t_submit, t_start, t_first, t_last;
} server_req;

enum { SERVER_D_CONTENT = 0, SERVER_D_REASONING = 1 };

typedef struct server_gen {
    kiln_model *m;
    kiln_detok *dt;
    int32_t n_gen;      /* tokens counted as generated */
    json_t *stops;      /* array of stop strings or NULL */
    server_buf sbuf;    /* text held back by stop matching */
    server_buf pbuf;    /* text held back by tag parsing */
    server_buf tool;    /* body of the current <tool_call> */
    server_toolscan ts; /* the same body read as it comes, as JSON */
    server_xmlscan xs;  /*   and in the XML form */
    json_t *tools;      /* the request's tools (a reference, released by server_gen_free), or NULL */
    int tool_open;      /* the current call's header went out */
    int tool_xml;       /*   from the XML scanner */
    size_t args_sent;   /* bytes of ts.args sent */
    int mode;           /* 0 content, 1 reasoning, 2 <tool_call> body, 3 a section of another form */
    int fmt;            /* SERVER_CF_*: how the model writes calls (server_gen_format) */
    int sec_opener;     /*   the opener (index in its tags' open[], -1 at_start) of the section in g->tool */
    int reply_begun;    /*   a byte other than a blank went out since the start or </think> */
    int n_marks;        /*   the form's markers that are control tokens of the vocabulary: */
    int32_t mark_id[8];
    const char *mark_text[8]; /*   their ids and texts (shown in a chat with tools) */
    unsigned mark_think;      /*   bit i: mark i belongs to the form's reasoning block (shown when it is split) */
    int split_think;          /* 1: <think>...</think> is reasoning, else content as written */
    int split_tools;          /* 1: <tool_call>...</tool_call> is a call, else content as written */
    int after_think;          /* 1: </think> passed and no content yet; blank space here is not content */
    /* the harmony format (gpt-oss): <|channel|>NAME [to=RECIPIENT]<|message|>BODY<|end|> messages,
     * analysis as reasoning, final and commentary as content, to=functions.NAME as calls */
    int harmony;      /* 1: the model writes harmony (its vocabulary has the tokens); read even with
                        neither split (think: false: analysis is content), not in raw completions */
    int h_body;       /*   0: reading a message's header, 1: its body */
    server_buf h_hdr; /*   the header so far */
    char h_name[96];  /*   the called function, in a call's body */
    int finish;       /* SERVER_FIN_* once over */
    int stop_hit;     /* index in stops of the string that ended it, or -1 */
    int n_tools;
    json_t *tool_calls; /* array of {name, arguments(obj)} parsed */
    json_t *logprobs;   /* pending logprob entries (OpenAI shape) */
    int want_logprobs;
    char err[256];
    /* sinks */
    void (*on_text)(struct server_gen *g, int kind, const char *s, size_t n, void *user);
    /* a whole call ({name, arguments}) at its closing tag */
    void (*on_tool)(struct server_gen *g, int index, json_t *call, void *user);
    /* Optional: streams calls as they are written.  name (NUL-terminated)
     * opens call index, once its "name" is settled and the body so far has
     * the call's shape; then args carries the next piece of the arguments'
     * JSON text (whole UTF-8 characters).  A call opened this way stands
     * even if its body breaks later (e.g. cut by max_tokens) and does not
     * reach on_tool; a body that never opened one goes to on_tool or back
     * to content at its closing tag, as without this sink. */
    void (*on_tool_part)(struct server_gen *g, int index, const char *name, const char *args, size_t n, void *user);
    void *user;
} server_gen;

void server_gen_init(server_gen *g, kiln_model *m, int start_in_think);
/* How the model writes tool calls (SERVER_CF_*, server_callfmt_detect; SERVER_CF_TAG
 * until set): sections of another form than <tool_call> are read whole at
 * their closer (or the reply's end) and reach on_tool, never on_tool_part. */
void server_gen_format(server_gen *g, int fmt);
/* 1 when m writes the harmony format (its vocabulary has the tokens). */
int server_gen_harmony(const kiln_model *m);
/* The tools the request offered (borrowed: g takes its own reference);
 * their schemas type the arguments of calls in the XML form. */
void server_gen_tools(server_gen *g, json_t *tools);
/* During on_tool: the call's arguments as the model wrote them (JSON text,
 * or a JSON string's characters), when the scanner followed the whole body;
 * NULL otherwise (then serialize the parsed value). */
const char *server_gen_args_text(const server_gen *g, size_t *n);
void server_gen_free(server_gen *g);
/* One generated token through the pipeline.  Returns 1 when a stop string
 * matched: the generation is over (g->finish is SERVER_FIN_STOP) and the
 * caller ends the request. */
int server_gen_token(server_gen *g, const gen_token *t);
/* The end of the tokens (fin: SERVER_FIN_*): flushes what was held back. */
void server_gen_end(server_gen *g, int fin);
/* Takes whatever q's scheduler produced, waiting up to wait_ms when there
 * is nothing new.  Returns 1 when the generation is over (g->finish set). */
int server_gen_pump(server_gen *g, server_req *q, int wait_ms);
/* The pump's second half: detokenized text through stop strings and tags
 * (final: no more text follows).  Returns 1 when a stop string matched.
 * Tests feed text with it directly. */
int server_gen_text(server_gen *g, const char *s, size_t n, int final);

#endif
