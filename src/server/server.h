/*
 * server — `kiln serve`: an OpenAI-, Anthropic- and Ollama-compatible HTTP API over
 * libmicrohttpd.  Each model is an engine instance (kiln.h, "engine"):
 * requests go through its gate, and a generator's engine batches them
 * continuously over the paged KV cache (prefix reuse included).
 *
 * The contract (this header) is what the CLI uses:
 *
 *   server_config cfg = server_config_default();  cfg.models = ...;
 *   server_server *s;  server_server_start(&cfg, &s);   // binds, starts loading
 *   ... wait for SIGTERM ...
 *   server_server_drain(s, 10.0);                   // stop accepting, finish
 *   server_server_free(s);
 *
 * Files, from the top down (each file calls only those below it; every
 * concern has its own small header, srv.h holds the shared types):
 *   http.c     daemon, guard and API key, body limit, JSON errors, /health,
 *              /metrics; asks the route tables (api.h) for everything else
 *   openai.c   the route table of OpenAI-style paths (/v1/..., rerank aliases)
 *   ollama.c   /api/... (its route table; models and the store)
 *   llama.c    llama-server's /tokenize, /detokenize, /apply-template, /props
 *   generate.c chat and generate/completion, shared by both APIs
 *   embed.c    embeddings for both APIs
 *   audio.c    /v1/audio/transcriptions, /v1/audio/translations (multipart)
 *   rerank.c   /v1/rerank over a reranker    images.c /v1/images/generations
 *   run.c      a generation from admission to response: one loop drives
 *              the writer of its shape; the OpenAI Responses and Anthropic
 *              Messages endpoints (their requests translated by responses.c
 *              and messages.c, xapi.h, which hold their writers)
 *   write.c    the writer table (write.h): OpenAI chat and completions (SSE),
 *              Ollama chat and generate (NDJSON)
 *   defaults.c a store pack's defaults        opts.c   a request's options
 *   reply.c    responses: JSON, errors in each API's shape, streams, watches
 *   models.c   the models: engines, loads on demand, keep-alive, room, drain
 *   metrics.c  Prometheus text               webui.c  GET / (the chat page)
 *   deltas.c   token stream -> text: stop strings, <think>, calls
 *   toolscan.c a <tool_call> body read as it arrives (streamed calls)
 *   xmlcall.c  the XML form of a call, typed by the tool's schema
 *   media.c    images in requests: data: URLs, base64, fetched URLs, markers
 *   prompt.c   chat messages -> prompt text (GGUF template or built-ins)
 *   callfmt.c  the other families' call forms (Llama 3.x, Mistral, ...)
 *   log.c      the request log line and the server's other lines
 *   buf.c      clocks, the byte buffer      guard.c  Host / Origin / paths
 */
#ifndef KILN_SERVER_H
#define KILN_SERVER_H

#include "kiln.h"

#include <stddef.h>
#include <stdint.h>

#define SERVER_DEFAULT_PORT 8080

typedef struct server_config {
    const char *host;          /* bind address, IPv4 or IPv6 ("::1", "[::1]");
                                    default "127.0.0.1"; "localhost" = 127.0.0.1 */
    int port;                  /* default SERVER_DEFAULT_PORT; 0 = any free port */
    const char *const *models; /* GGUF paths or store names (-m), may be 0 */
    int n_models;
    const char *mmproj;       /* --mmproj: the image projector of the one -m model, or NULL */
    const char *store_root;   /* NULL = the default store */
    int parallel;             /* sequences decoded together per model (4) */
    int n_ctx;                /* tokens per sequence; 0 = model's, capped */
    int n_batch;              /* most tokens per forward step (512) */
    int n_threads;            /* 0 = all CPUs */
    int kv_type;              /* KILN_KV_* (F16) */
    uint64_t kv_budget;       /* bytes of KV cache per model; 0 = -c x --parallel */
    const char *api_key;      /* NULL: no auth */
    const char *cors_origins; /* extra allowed browser origins, comma-separated
                                    globs ("*" = any); NULL = $KILN_ORIGINS */
    double keep_alive;        /* seconds an idle model stays; < 0 forever (300) */
    size_t max_body;          /* request body limit in bytes (8 MiB) */
    double max_audio_seconds; /* longest audio one transcription decodes (7200 s);
                                    longer gets 413 */
    int max_queue;            /* waiting requests per model before 429 (64) */
    int max_connections;      /* open connections, all clients together (512) */
    int max_conn_per_ip;      /* open connections from one client address (32) */
    double header_timeout;    /* seconds a connection has to send a request's head:
                                    from its opening, or from the end of its previous
                                    response (10) */
    const char *image_pack;   /* image pack served at /v1/images/generations, or NULL */
    int max_loaded;           /* models resident at once; 0 = as memory allows */
    int log_json;             /* 1: stderr lines are JSON objects (--log-format json) */
    int32_t reasoning_budget; /* thinking tokens when a request names no budget; -1 no limit (the default) */
    int32_t repeat_guard;     /* tokens a repeated stretch covers to end a reply; 0 off (256) */
    uint64_t template_steps;  /* evaluation steps one chat template render may take; 0: the
                                    engines' default (4 million, src/chat/template.h) */
    int allow_image_urls;     /* 1: fetch http(s) image URLs in requests (--allow-image-urls); 0:
                                    refuse them (400), data: URLs and base64 only */
    size_t max_image_bytes;   /* one request's images, encoded bytes in all (20 MiB); over: 413 */
    kiln_spec_params spec;    /* speculative decoding for every request of every generating
                                    model (type KILN_SPEC_NONE: off); draft_model borrowed */
    int backend;              /* kiln_engine_backend the generating models load on: AUTO (the
                                    default: the GPU when it takes the model), CPU or CUDA */
    int gpu_layers;           /* -ngl: kiln_model_params.gpu_layers of each generating model */
} server_config;

server_config server_config_default(void);

typedef struct server_server server_server;

/* Binds and starts serving; the models of cfg start loading in the
 * background (GET /health answers 503 until the first is ready).  cfg's
 * strings must outlive the server. */
kiln_status server_server_start(const server_config *cfg, server_server **out);
/* Waits until the -m models have loaded (or failed): KILN_OK, or the
 * first failure with its message in msg. */
kiln_status server_server_wait_loaded(server_server *s, char *msg, size_t cap);
/* The bound port (useful with port 0). */
int server_server_port(const server_server *s);
/* Refuses new work (503; /health too), lets running requests finish for up
 * to grace seconds, then cancels what is left; returns once every model's
 * engine has stopped (its native work over, its memory released). */
void server_server_drain(server_server *s, double grace);
void server_server_free(server_server *s);
/* One line on stderr as the server writes its own: "kiln serve: msg", or
 * with json a JSON object {time, msg}. */
void server_log_line(int json, const char *msg);

#endif
