/* The server's state: the server (server_srv) and the models it knows
 * (server_model), as the files of src/server share them.  Types only: each
 * concern's calls are in its own header (see docs/ARCHITECTURE.md). */
#ifndef KILN_SRV_H
#define KILN_SRV_H

#include "server/guard.h"
#include "server/server.h"
#include "engine/engine.h"
#include "gen/gen.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* ---- the models the server knows (models.c) ---- */
enum { SERVER_M_UNLOADED = 0, SERVER_M_LOADING, SERVER_M_READY, SERVER_M_UNLOADING, SERVER_M_FAILED, SERVER_M_STOPPED };
/* What a request asks of a model. */
enum { SERVER_TASK_GENERATE = 0, SERVER_TASK_EMBED, SERVER_TASK_TRANSCRIBE, SERVER_TASK_INFO, SERVER_TASK_RERANK };

/* Counters of a generation model that /metrics reports as totals since the
 * server started (as llama-server's _total counters), so they survive the
 * model's unloads and reloads. */
typedef struct server_counts {
    gen_spec_stats spec;    /* speculative decoding */
    uint64_t lookup_tokens; /* prompt tokens looked up in the prefix cache */
    uint64_t hit_tokens;    /* of those, found */
} server_counts;

typedef struct server_model {
    struct server_srv *srv;
    char name[256];  /* as clients name it */
    char ref[4096];  /* what its engine loads: a file, or a store name */
    char digest[65]; /* a store model's pack id (SHA-256, hex); "" for a file */
    int pinned;      /* named by -m: loaded at start, the default model */
    kiln_engine_family_id family;
    kiln_engine *eng; /* made at the first load */
    uint64_t file_bytes;
    /* the rest under server_srv.mu */
    int state;         /* SERVER_M_*, from the engine's events */
    char err[512];     /* the latest failure */
    int users;         /* requests holding it: it is not unloaded under them */
    double last_used;  /* server_now() */
    double keep_alive; /* seconds after the last use; < 0 forever */
    double load_started, load_seconds;
    double loaded_at;  /* server_wall() */
    kiln_model *model; /* while READY (and only for a user: it goes with the unload) */
    int32_t n_ctx, n_vocab;
    int32_t ctx_want;      /* generators: tokens per sequence the next load asks for (Ollama's num_ctx); 0: -c */
    int32_t ctx_loaded;    /* the ctx_want the resident load was made with */
    uint64_t weight_bytes; /* of the latest load */
    uint64_t vram_bytes;   /* of the latest load: weights and KV cache in GPU memory (0 on the CPU) */
    const char *backend;   /* of the latest load: "cpu" or "cuda" */
    json_t *details;       /* Ollama's details of the latest load, or NULL */
    json_t *defaults;      /* a store pack's defaults (kiln_store_lease_defaults), or NULL */
    void *tmpl;            /* compiled chat template or NULL */
    int tmpl_tried;
    server_counts base; /* what earlier loads counted */
    server_counts seen; /* what this load had counted when its latest request ended */
    struct server_model *next;
} server_model;

/* images.c: the image pack behind /v1/images/generations (api.h) */
typedef struct server_images server_images;

/* http.c: an open connection while the head of a request is awaited. */
typedef struct server_conn server_conn;

typedef struct server_srv {
    server_config cfg;
    struct MHD_Daemon *mhd;
    int port;
    pthread_mutex_t mu;   /* the models and their fields */
    pthread_cond_t cv;    /* broadcast when a model changes */
    server_model *models; /* every model named so far, first used first */
    uint64_t mem_budget;  /* what resident models may take without --max-loaded */
    pthread_t keeper;     /* keep-alive timers */
    int keeper_started, quit;
    kiln_store *store;
    server_guard guard; /* Host, Origin and public-path rules */
    atomic_int draining;
    atomic_int n_active_http;
    server_images *images; /* NULL without --image */
    /* the open connections and the thread that cuts those whose request
     * head is late (http.c) */
    pthread_mutex_t conn_mu;
    pthread_cond_t conn_cv;
    server_conn *conns;
    pthread_t watchdog;
    int watchdog_started, watchdog_quit; /* under conn_mu */
    atomic_ullong n_cut;                 /* connections cut at the head deadline */
    /* chat template renders (prompt.c): running now, ended because the
     * client went, and failed over each budget (steps, output, memory) */
    atomic_int n_renders;
    atomic_ullong n_render_cancelled, n_render_over[3];
    /* the HTTP library's own messages, at most a few a second (a flood of
     * refused connections would write a line each) */
    pthread_mutex_t log_mu;
    double log_second; /* server_now() at the start of the current second */
    int log_lines, log_dropped;
    int quiet; /* server_logf writes nothing: a start that failed */
} server_srv;

#endif
