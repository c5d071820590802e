/* The models a server knows (models.c): loads on demand, uses, keep-alive,
 * room, the drain. */
#ifndef KILN_SERVER_MODELS_H
#define KILN_SERVER_MODELS_H

#include "server/srv.h"

#include <jansson.h>
#include <stddef.h>

/* Loads -m models (and starts the keep-alive timers).  Fails when one is
 * not a model file or store name. */
kiln_status server_models_start(server_srv *s);
/* Waits for the -m models' first loads: the first failure, with msg. */
kiln_status server_models_wait_loaded(server_srv *s, char *msg, size_t cap);
/* Every engine's graceful stop; after grace seconds what still runs is
 * cancelled; returns once every engine has stopped. */
void server_models_drain(server_srv *s, double grace);
void server_models_free(server_srv *s);
/* The model a request names ("" or NULL: the first -m model), loaded if
 * needed (waiting), for task (SERVER_TASK_*: a generation of an embedding
 * model is a 400).  Takes a use, which server_model_done drops.  *load_wait
 * (optional) receives the seconds spent waiting for a load.  NULL with an
 * HTTP status and message. */
server_model *server_model_use(server_srv *s, const char *name, int task, double *load_wait, int *status, char *msg,
                               size_t cap);
/* The same with Ollama's num_ctx (tokens per sequence; 0: whatever is
 * loaded): a generator loaded for another num_ctx is reloaded with this
 * one once its running requests end, as Ollama reloads a runner whose
 * context differs (a context larger than the KV memory budget holds gets
 * what it holds). */
server_model *server_model_use_ctx(server_srv *s, const char *name, int task, int32_t num_ctx, double *load_wait,
                                   int *status, char *msg, size_t cap);
/* The name of the first -m model of family in out; -1 when there is none. */
int server_model_first(server_srv *s, kiln_engine_family_id family, char *out, size_t cap);
/* m's counters since the server started: earlier loads' plus live (the
 * resident model's stats, or NULL when it is not resident).  Under
 * server_srv.mu. */
void server_model_counts(const server_model *m, const gen_sched_stats *live, server_counts *out);
/* Drops a use; keep_alive (seconds; NAN: the server's) is how long the
 * model stays once idle (0: it unloads now). */
void server_model_done(server_model *m, double keep_alive);
/* With s->mu held: 1 when m's generation engine may be asked for its
 * scheduler's figures (engine_llm_stats).  Not while the server drains:
 * server_models_drain enqueues every engine's stop under s->mu, and a stop
 * frees the scheduler on the engine's thread without that lock, so a
 * reader that saw the flag clear finished before any stop began. */
int server_model_stats_ok(const server_model *m);
/* Unloads name once idle (keep_alive 0 without a request); -1 with status. */
int server_model_unload(server_srv *s, const char *name, int *status, char *msg, size_t cap);
/* Ollama's "details" of m (under server_srv.mu; a new object). */
json_t *server_model_details(const server_model *m);
/* The store's installed models the server can serve by name, as
 * kiln_store_list's JSON array with "serves" added (the kiln_engine_family_id
 * serving each); an empty array without a store or on failure.  Packs of
 * an architecture kiln does not run and image packs are left out.  The
 * caller decrefs it. */
json_t *server_store_models(server_srv *s);
/* What a model of family offers, in the words of Ollama's /api/show
 * capabilities ("completion", "embedding", ...): a new array. */
json_t *server_capabilities(int family);
/* 1 when a and b name the same model ("name" is "name:latest"). */
int server_same_model_name(const char *a, const char *b);

#endif
