/* The models a server knows, each served by an engine instance (kiln.h,
 * "engine") of the family its file needs: llm for decoders (generation by
 * continuous batching, and embeddings), embedding for encoders.
 *
 * An entry is made the first time a request names a model (or at start
 * for -m); there is no fixed table.  Loads happen on demand; the engine
 * reports each transition and the entry follows its events, which feed
 * /api/ps, /health and /metrics.  A model unloads when the server asks its
 * engine to: keep-alive expiry (the latest request's keep_alive, else the
 * server's), keep_alive 0, or room for another model (--max-loaded, or
 * memory: the least recently used idle model goes first).  The engine
 * holds the store lease while the model is resident and releases it with
 * the model.  Drain is every engine's graceful stop, escalated after the
 * grace period.
 *
 * Every field of every entry is guarded by server_srv.mu; s->cv is broadcast
 * on each change.  Lock order: server_srv.mu before an engine's own lock (the
 * engine calls status_cb without holding its lock). */
#include "server/models.h"
#include "server/buf.h"
#include "server/log.h"
#include "server/prompt.h"
#include "server/srv.h"

#include "base/base.h"
#include "engine/engine.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- engine events ---- */

/* Ollama's "details" of a loaded model. */
static json_t *details_of(const kiln_model *m) {
    json_t *d = json_object();
    json_object_set_new(d, "format", json_string("gguf"));
    if (m) {
        kiln_model_info info;
        kiln_model_get_info(m, &info);
        char ps[32];
        base_fmt_count((double)info.n_params, ps, sizeof ps);
        json_object_set_new(d, "family", json_string(info.arch));
        json_object_set_new(d, "parameter_size", json_string(ps));
        json_object_set_new(d, "quantization_level", json_string(info.ftype));
    }
    return d;
}

/* ---- counters that outlive a load ---- */

static void counts_of(const gen_sched_stats *gs, server_counts *c) {
    c->spec = gs->spec;
    c->lookup_tokens = gs->kv.lookup_blocks * (uint64_t)gs->kv.block_tokens;
    c->hit_tokens = gs->kv.hit_blocks * (uint64_t)gs->kv.block_tokens;
}

static void counts_add(server_counts *to, const server_counts *c) {
    to->spec.n_steps += c->spec.n_steps;
    to->spec.n_drafted += c->spec.n_drafted;
    to->spec.n_accepted += c->spec.n_accepted;
    for (int k = 0; k < GEN_DRAFT_MAX; k++) to->spec.n_accepted_at[k] += c->spec.n_accepted_at[k];
    to->lookup_tokens += c->lookup_tokens;
    to->hit_tokens += c->hit_tokens;
}

void server_model_counts(const server_model *m, const gen_sched_stats *live, server_counts *out) {
    *out = m->base;
    server_counts now = m->seen;
    if (live) counts_of(live, &now);
    counts_add(out, &now);
}

static void status_cb(kiln_engine *e, const kiln_engine_event *ev, void *user) {
    server_model *m = user;
    server_srv *s = m->srv;
    pthread_mutex_lock(&s->mu);
    switch (ev->state) {
    case KILN_ENGINE_LOADED: {
        m->state = SERVER_M_READY;
        memset(&m->seen, 0, sizeof m->seen); /* a new scheduler counts from 0 */
        m->model = engine_model(e);          /* NULL for families without a kiln_model (speech) */
        m->load_seconds = server_now() - m->load_started;
        m->loaded_at = server_wall();
        m->last_used = server_now();
        json_decref(m->details);
        m->details = NULL;
        m->weight_bytes = m->file_bytes;
        m->vram_bytes = 0;
        m->backend = "cpu";
        uint64_t kv_per_token = 0;
        int gpu_layers = 0, n_layer = 0;
        if (m->model) {
            kiln_model_info info;
            kiln_model_get_info(m->model, &info);
            m->n_vocab = info.n_vocab;
            m->n_ctx = info.n_ctx_train;
            m->weight_bytes = info.n_bytes;
            m->details = details_of(m->model);
            m->backend = info.backend;
            m->vram_bytes = info.device_bytes;
            kv_per_token = !strcmp(info.backend, "cuda") ? info.kv_bytes_per_token : 0;
            gpu_layers = info.gpu_layers;
            n_layer = info.n_layer;
            /* a split model keeps its host layers' cache in RAM (the dense
             * family's: every layer has one) */
            if (kv_per_token && info.n_layer > 0 && info.gpu_layers < info.n_layer)
                kv_per_token = kv_per_token * (uint64_t)info.gpu_layers / (uint64_t)info.n_layer;
        }
        if (m->family == KILN_ENGINE_LLM) {
            engine_llm_stats(e, &m->n_ctx, NULL);
            m->vram_bytes += kv_per_token * (uint64_t)m->n_ctx * (uint64_t)s->cfg.parallel;
            char where[96];
            if (!strcmp(m->backend, "cuda") && gpu_layers < n_layer)
                snprintf(where, sizeof where, "CUDA, %d of %d layers, %.0f MiB on the GPU; the rest on the CPU",
                         gpu_layers, n_layer, (double)m->vram_bytes / 1048576.0);
            else if (!strcmp(m->backend, "cuda"))
                snprintf(where, sizeof where, "CUDA, %.0f MiB on the GPU", (double)m->vram_bytes / 1048576.0);
            else
                snprintf(where, sizeof where, "CPU %s", kiln_cpu_path());
            server_logf(s, "%s ready (generation, %d tokens x %d sequences, %s, loaded in %.2f s)", m->name, m->n_ctx,
                        s->cfg.parallel, where, m->load_seconds);
        } else {
            server_logf(s, "%s ready (%s, loaded in %.2f s)", m->name,
                        m->family == KILN_ENGINE_EMBEDDING ? "embeddings"
                        : m->family == KILN_ENGINE_RERANK  ? "reranking"
                                                           : "speech to text",
                        m->load_seconds);
        }
        break;
    }
    case KILN_ENGINE_UNLOADED:
    case KILN_ENGINE_STOPPED:
        if (ev->model[0]) server_logf(s, "%s %s", m->name, kiln_engine_state_str(ev->state));
        m->state = ev->state == KILN_ENGINE_STOPPED ? SERVER_M_STOPPED : SERVER_M_UNLOADED;
        m->model = NULL;
        /* no request ran after the last one ended: what it saw is the
         * load's total */
        counts_add(&m->base, &m->seen);
        memset(&m->seen, 0, sizeof m->seen);
        server_template_free(m->tmpl);
        m->tmpl = NULL;
        m->tmpl_tried = 0;
        break;
    case KILN_ENGINE_FAILED:
        snprintf(m->err, sizeof m->err, "%s", ev->message);
        server_logf(s, "%s: %s", m->name, ev->message);
        /* a failed load leaves nothing resident; a failed release keeps
         * the model (the engine refuses requests until a retry) */
        if (m->state == SERVER_M_LOADING)
            m->state = SERVER_M_FAILED;
        else if (m->state == SERVER_M_UNLOADING)
            m->state = SERVER_M_FAILED;
        break;
    default: break;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* The store as the engine's resolver: a name's lease lives as long as the
 * model is resident. */
static kiln_status store_acquire(void *user, const char *family, const char *name, char *path, size_t cap,
                                 void **lease) {
    server_srv *s = user;
    *lease = NULL;
    if (!s->store) return KILN_ERR_NOT_FOUND;
    kiln_store_lease *l = NULL;
    kiln_status st = kiln_store_resolve(s->store, name, &l);
    if (st != KILN_OK) return st;
    snprintf(path, cap, "%s", kiln_store_lease_path(l));
    *lease = l;
    return KILN_OK;
}

static void store_release(void *user, void *lease) { kiln_store_release(lease); }

/* ---- entries ---- */

static int same_name(const char *have, const char *want) {
    if (!strcmp(have, want)) return 1;
    size_t hl = strlen(have);
    /* "name:latest" is "name" */
    return !strncmp(have, want, hl) && !strcmp(want + hl, ":latest");
}

static int name_ok(const char *n) {
    size_t len = strlen(n);
    if (!len || len > 200 || strstr(n, "..") || n[0] == '/' || n[0] == '.') return 0;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("._:-/", *p)))
            return 0;
    return 1;
}

/* Under mu: the entry a request's model name reaches ("" or NULL: the
 * first -m model). */
static server_model *lookup(server_srv *s, const char *name) {
    for (server_model *m = s->models; m; m = m->next) {
        if (!name || !*name) {
            if (m->pinned) return m;
            continue;
        }
        if (same_name(m->name, name) || (m->pinned && !strcmp(m->ref, name))) return m;
    }
    return NULL;
}

static uint64_t file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

/* A new entry for a model file (path) that clients call name and the
 * engine loads as ref; the family comes from its header.  NULL with the
 * reason in msg. */
static server_model *make(server_srv *s, const char *name, const char *ref, const char *path, char *msg, size_t cap) {
    kiln_engine_family_id fam = KILN_ENGINE_STT;
    if (!kiln_is_whisper_file(path) && engine_gguf_family(path, &fam) != KILN_OK) {
        snprintf(msg, cap, "%s", kiln_last_error());
        return NULL;
    }
    server_model *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(msg, cap, "out of memory");
        return NULL;
    }
    m->srv = s;
    snprintf(m->name, sizeof m->name, "%s", name);
    snprintf(m->ref, sizeof m->ref, "%s", ref);
    m->family = fam;
    m->file_bytes = file_size(path);
    m->keep_alive = s->cfg.keep_alive;
    return m;
}

/* Under mu: appends m (names stay in the order they were first used). */
static void add(server_srv *s, server_model *m) {
    server_model **p = &s->models;
    while (*p) p = &(*p)->next;
    *p = m;
}

/* Finds or makes the entry for name (mu not held).  NULL with an HTTP
 * status and message. */
static server_model *find(server_srv *s, const char *name, int *status, char *msg, size_t cap) {
    pthread_mutex_lock(&s->mu);
    server_model *m = lookup(s, name);
    pthread_mutex_unlock(&s->mu);
    if (m) return m;
    if (!name || !*name) {
        *status = 400;
        snprintf(msg, cap, "'model' is required");
        return NULL;
    }
    *status = 404;
    snprintf(msg, cap, "model '%s' not found", name);
    if (!name_ok(name) || !s->store) return NULL;
    kiln_store_lease *lease = NULL;
    if (kiln_store_resolve(s->store, name, &lease) != KILN_OK) return NULL; /* the message above */
    char why[512];
    server_model *made = make(s, name, name, kiln_store_lease_path(lease), why, sizeof why);
    if (made) {
        made->defaults = json_loads(kiln_store_lease_defaults(lease), 0, NULL);
        snprintf(made->digest, sizeof made->digest, "%s", kiln_store_lease_id(lease));
    }
    kiln_store_release(lease); /* the engine takes its own lease at each load */
    if (!made) {
        *status = 500;
        snprintf(msg, cap, "%s", why);
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    m = lookup(s, name);
    if (!m) {
        add(s, made);
        m = made;
        made = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    if (made) json_decref(made->defaults);
    free(made);
    return m;
}

/* ---- memory and the number of loaded models ---- */

/* Bytes m is expected to take while resident: its weights, and for a
 * generator the KV cache it may fill. */
static uint64_t footprint(const server_srv *s, const server_model *m) {
    uint64_t kv = m->family == KILN_ENGINE_LLM ? s->cfg.kv_budget : 0;
    if (!kv && m->family == KILN_ENGINE_LLM) kv = m->file_bytes / 4; /* a guess before the context exists */
    return m->file_bytes + kv;
}

static uint64_t phys_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    return pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 8ull << 30;
}

static int resident(const server_model *m) {
    return m->state == SERVER_M_READY || m->state == SERVER_M_LOADING || m->state == SERVER_M_UNLOADING;
}

/* Under mu: asks m's engine to unload. */
static void unload_locked(server_model *m) {
    if (m->state != SERVER_M_READY) return;
    m->state = SERVER_M_UNLOADING;
    if (kiln_engine_unload(m->eng, NULL) != KILN_OK) {
        snprintf(m->err, sizeof m->err, "unload: %s", kiln_last_error());
        m->state = SERVER_M_FAILED;
    }
}

/* Under mu: unloads idle models, least recently used first, until `want`
 * fits beside the resident ones (by count and by memory), and waits until
 * those unloads have released their memory.  Returns 0, or -1 when every
 * other resident model is busy. */
static int make_room(server_srv *s, server_model *want) {
    for (;;) {
        int n = 0, unloading = 0;
        uint64_t bytes = footprint(s, want);
        for (server_model *m = s->models; m; m = m->next) {
            if (m == want || !resident(m)) continue;
            if (m->state == SERVER_M_UNLOADING) {
                unloading = 1; /* it is on its way out */
                continue;
            }
            n++;
            bytes += footprint(s, m);
        }
        const int over = (s->cfg.max_loaded > 0 && n >= s->cfg.max_loaded) ||
                         (s->cfg.max_loaded <= 0 && n > 0 && bytes > s->mem_budget);
        if (over) {
            server_model *lru = NULL;
            for (server_model *m = s->models; m; m = m->next)
                if (m != want && m->state == SERVER_M_READY && m->users == 0 && (!lru || m->last_used < lru->last_used))
                    lru = m;
            if (lru) {
                server_logf(s, "unloading %s (idle the longest) to make room for %s", lru->name, want->name);
                unload_locked(lru);
                continue;
            }
            if (!unloading) return -1;
        } else if (!unloading) {
            return 0;
        }
        pthread_cond_wait(&s->cv, &s->mu); /* an unload finishing, or a model going idle */
    }
}

/* Under mu: starts loading m (a new engine at its first load). */
static int start_load(server_srv *s, server_model *m, char *msg, size_t cap) {
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = m->ctx_want > 0 ? m->ctx_want : s->cfg.n_ctx;
    cp.n_batch = s->cfg.n_batch > 0 ? s->cfg.n_batch : 512;
    cp.n_seq_max = s->cfg.parallel > 0 ? s->cfg.parallel : 4;
    cp.n_threads = s->cfg.n_threads;
    cp.kv_type = s->cfg.kv_type;
    cp.mem_limit = s->cfg.kv_budget;
    if (!m->eng) {
        kiln_engine *e = NULL;
        kiln_engine_store hooks = {store_acquire, store_release, s};
        const int be = m->family == KILN_ENGINE_LLM ? s->cfg.backend : KILN_ENGINE_BACKEND_AUTO;
        if (kiln_engine_create(m->family, (kiln_engine_backend)be, &e) != KILN_OK ||
            kiln_engine_set_status_fn(e, status_cb, m) != KILN_OK || kiln_engine_set_store(e, &hooks) != KILN_OK ||
            kiln_engine_set_context_params(e, &cp) != KILN_OK ||
            (m->family == KILN_ENGINE_LLM && kiln_engine_set_spec_params(e, &s->cfg.spec) != KILN_OK) ||
            (m->family == KILN_ENGINE_LLM && m->pinned && kiln_engine_set_mmproj(e, s->cfg.mmproj) != KILN_OK) ||
            (m->family == KILN_ENGINE_LLM && kiln_engine_set_gpu_layers(e, s->cfg.gpu_layers) != KILN_OK) ||
            kiln_engine_start(e) != KILN_OK) {
            snprintf(msg, cap, "cannot start an engine for %s: %s", m->name, kiln_last_error());
            kiln_engine_free(e);
            return -1;
        }
        m->eng = e;
    } else if (kiln_engine_set_context_params(m->eng, &cp) != KILN_OK) { /* this load's num_ctx */
        snprintf(msg, cap, "cannot set the context of %s: %s", m->name, kiln_last_error());
        return -1;
    }
    m->ctx_loaded = m->ctx_want;
    m->state = SERVER_M_LOADING;
    m->err[0] = 0;
    m->load_started = server_now();
    if (kiln_engine_load(m->eng, m->ref, NULL) != KILN_OK) {
        snprintf(m->err, sizeof m->err, "cannot load %s: %s", m->name, kiln_last_error());
        m->state = SERVER_M_FAILED;
        snprintf(msg, cap, "%s", m->err);
        return -1;
    }
    return 0;
}

/* ---- uses ---- */

server_model *server_model_use(server_srv *s, const char *name, int task, double *load_wait, int *status, char *msg,
                               size_t cap) {
    return server_model_use_ctx(s, name, task, 0, load_wait, status, msg, cap);
}

server_model *server_model_use_ctx(server_srv *s, const char *name, int task, int32_t num_ctx, double *load_wait,
                                   int *status, char *msg, size_t cap) {
    if (load_wait) *load_wait = 0;
    if (atomic_load(&s->draining)) {
        *status = 503;
        snprintf(msg, cap, "the server is shutting down");
        return NULL;
    }
    server_model *m = find(s, name, status, msg, cap);
    if (!m) return NULL;
    const char *cannot = NULL;
    if (m->family != KILN_ENGINE_RERANK && task == SERVER_TASK_RERANK)
        cannot = "not a reranker (no classification head cls.output, or a decoder without rank pooling)";
    else if (m->family == KILN_ENGINE_EMBEDDING && task != SERVER_TASK_EMBED && task != SERVER_TASK_INFO)
        cannot = "an embedding model: it cannot generate text (it serves /v1/embeddings and /api/embed)";
    else if (m->family == KILN_ENGINE_STT && task != SERVER_TASK_TRANSCRIBE && task != SERVER_TASK_INFO)
        cannot = "a speech-to-text model: it serves /v1/audio/transcriptions and /v1/audio/translations only";
    else if (m->family != KILN_ENGINE_STT && task == SERVER_TASK_TRANSCRIBE)
        cannot = "not a speech-to-text model";
    else if (m->family == KILN_ENGINE_RERANK && task != SERVER_TASK_RERANK && task != SERVER_TASK_INFO)
        cannot = "a reranker: it serves /v1/rerank only (it neither embeds nor generates)";
    if (cannot) {
        *status = 400;
        snprintf(msg, cap, "'%s' is %s", m->name, cannot);
        return NULL;
    }
    const double t0 = server_now();
    pthread_mutex_lock(&s->mu);
    m->users++;
    int rc = 0, tried = 0;
    if (m->family != KILN_ENGINE_LLM || task != SERVER_TASK_GENERATE) num_ctx = 0;
        /* loaded for another num_ctx: reload with this one (once) */
#define SERVER_OTHER_CTX (num_ctx > 0 && !tried && m->ctx_loaded != num_ctx)
    const int waited = m->state != SERVER_M_READY || SERVER_OTHER_CTX;
    while (rc == 0 && (m->state != SERVER_M_READY || SERVER_OTHER_CTX)) {
        if (atomic_load(&s->draining) || m->state == SERVER_M_STOPPED) {
            *status = 503;
            snprintf(msg, cap, "the server is shutting down");
            rc = -1;
        } else if (m->state == SERVER_M_READY) {
            /* the requests running on the other context finish first; a
             * request waiting here holds no use, so two waiting for
             * different contexts take turns instead of waiting on each other */
            if (m->users > 1) {
                m->users--;
                pthread_cond_wait(&s->cv, &s->mu);
                m->users++;
            } else {
                server_logf(s, "reloading %s with a context of %d tokens (num_ctx)", m->name, num_ctx);
                unload_locked(m);
            }
        } else if (m->state == SERVER_M_UNLOADED || (m->state == SERVER_M_FAILED && !tried)) {
            tried = 1;
            m->ctx_want = num_ctx; /* a load takes the context of the request that starts it */
            if (make_room(s, m)) {
                *status = 503;
                snprintf(msg, cap, "%d model(s) are loaded and busy; %s cannot be loaded beside them yet",
                         s->cfg.max_loaded, m->name);
                rc = -1;
            } else if (start_load(s, m, msg, cap)) {
                *status = 500;
                rc = -1;
            }
        } else if (m->state == SERVER_M_FAILED) {
            *status = 500;
            snprintf(msg, cap, "%s", m->err[0] ? m->err : "the model failed to load");
            rc = -1;
        } else {
            pthread_cond_wait(&s->cv, &s->mu); /* loading or unloading */
        }
    }
#undef SERVER_OTHER_CTX
    if (rc)
        m->users--;
    else
        m->last_used = server_now();
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (!rc && load_wait && waited) *load_wait = server_now() - t0;
    return rc ? NULL : m;
}

int server_model_stats_ok(const server_model *m) {
    return m->state == SERVER_M_READY && m->family == KILN_ENGINE_LLM && !atomic_load(&m->srv->draining);
}

void server_model_done(server_model *m, double keep_alive) {
    server_srv *s = m->srv;
    pthread_mutex_lock(&s->mu);
    if (server_model_stats_ok(m)) {
        gen_sched_stats gs;
        memset(&gs, 0, sizeof gs);
        if (engine_llm_stats(m->eng, NULL, &gs) == KILN_OK) counts_of(&gs, &m->seen);
    }
    m->users--;
    m->last_used = server_now();
    m->keep_alive = isnan(keep_alive) ? s->cfg.keep_alive : keep_alive;
    if (m->users == 0 && m->keep_alive == 0) unload_locked(m);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int server_model_unload(server_srv *s, const char *name, int *status, char *msg, size_t cap) {
    server_model *m = find(s, name, status, msg, cap);
    if (!m) return -1;
    pthread_mutex_lock(&s->mu);
    m->keep_alive = 0;
    if (m->users == 0) unload_locked(m);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* ---- the keeper: keep-alive expiry ---- */

static void *keeper_main(void *arg) {
    server_srv *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->quit) {
        const double now = server_now();
        for (server_model *m = s->models; m; m = m->next)
            if (m->state == SERVER_M_READY && m->users == 0 && m->keep_alive >= 0 &&
                now >= m->last_used + m->keep_alive)
                unload_locked(m);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1; /* timers are checked every second */
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- the server's models ---- */

static void display_name(const char *path, char *out, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(out, cap, "%s", b);
    size_t n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf"))
        out[n - 5] = 0;
    else if (n > 4 && !strcmp(out + n - 4, ".bin"))
        out[n - 4] = 0; /* whisper.cpp's ggml-*.bin */
}

int server_model_first(server_srv *s, kiln_engine_family_id family, char *out, size_t cap) {
    pthread_mutex_lock(&s->mu);
    out[0] = 0;
    for (server_model *m = s->models; m && !out[0]; m = m->next)
        if (m->pinned && m->family == family) snprintf(out, cap, "%s", m->name);
    pthread_mutex_unlock(&s->mu);
    return out[0] ? 0 : -1;
}

kiln_status server_models_start(server_srv *s) {
    s->mem_budget = phys_bytes() / 4 * 3;
    for (int i = 0; i < s->cfg.n_models; i++) {
        const char *ref = s->cfg.models[i];
        char name[256], msg[512];
        server_model *m = NULL;
        kiln_store_lease *lease = NULL;
        if (access(ref, R_OK) == 0) {
            display_name(ref, name, sizeof name);
            m = make(s, name, ref, ref, msg, sizeof msg);
        } else if (s->store && kiln_store_resolve(s->store, ref, &lease) == KILN_OK) {
            m = make(s, ref, ref, kiln_store_lease_path(lease), msg, sizeof msg);
            if (m) {
                m->defaults = json_loads(kiln_store_lease_defaults(lease), 0, NULL);
                snprintf(m->digest, sizeof m->digest, "%s", kiln_store_lease_id(lease));
            }
            kiln_store_release(lease);
        } else {
            snprintf(msg, sizeof msg, "model '%s' is neither a readable file nor in the store", ref);
        }
        if (!m) {
            server_logf(s, "%s", msg);
            return KILN_ERR_NOT_FOUND;
        }
        m->pinned = 1;
        pthread_mutex_lock(&s->mu);
        server_model *dup = lookup(s, m->name);
        if (!dup) add(s, m);
        pthread_mutex_unlock(&s->mu);
        if (dup) {
            server_logf(s, "-m %s names the model %s a second time", ref, m->name);
            json_decref(m->defaults);
            free(m);
            return KILN_ERR_INVALID_ARG;
        }
    }
    if (pthread_create(&s->keeper, NULL, keeper_main, s)) return KILN_ERR_NOMEM;
    s->keeper_started = 1;
    /* the -m models load now, as many as may be loaded together */
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (server_model *m = s->models; m; m = m->next) {
        char msg[512];
        if (s->cfg.max_loaded > 0 && n >= s->cfg.max_loaded) {
            server_logf(s, "%s loads when asked for (--max-loaded %d)", m->name, s->cfg.max_loaded);
            continue;
        }
        if (make_room(s, m) == 0 && start_load(s, m, msg, sizeof msg) == 0)
            n++;
        else if (m->state != SERVER_M_FAILED)
            server_logf(s, "%s loads when asked for (not enough memory beside the others)", m->name);
    }
    pthread_mutex_unlock(&s->mu);
    return KILN_OK;
}

kiln_status server_models_wait_loaded(server_srv *s, char *msg, size_t cap) {
    pthread_mutex_lock(&s->mu);
    kiln_status st = KILN_OK;
    for (server_model *m = s->models; m && st == KILN_OK; m = m->next) {
        if (!m->pinned) continue;
        while (m->state == SERVER_M_LOADING) pthread_cond_wait(&s->cv, &s->mu);
        if (m->state == SERVER_M_FAILED) {
            snprintf(msg, cap, "%s", m->err);
            st = KILN_ERR_FORMAT;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

void server_models_drain(server_srv *s, double grace) {
    /* every engine's graceful stop: from here requests are refused, the
     * admitted ones finish */
    kiln_engine_cancel *tok = kiln_engine_cancel_new();
    pthread_mutex_lock(&s->mu);
    for (server_model *m = s->models; m; m = m->next)
        if (m->eng) kiln_engine_stop(m->eng, tok);
    pthread_mutex_unlock(&s->mu);
    const double end = server_now() + grace;
    for (;;) {
        int busy = 0;
        pthread_mutex_lock(&s->mu);
        for (server_model *m = s->models; m; m = m->next) busy |= m->users > 0;
        pthread_mutex_unlock(&s->mu);
        if (!busy || server_now() >= end) break;
        usleep(20000);
    }
    /* what is left is cancelled; each engine reports STOPPED once its
     * native work has ended and its memory is released */
    kiln_engine_cancel_fire(tok);
    kiln_engine_cancel_free(tok);
    pthread_mutex_lock(&s->mu);
    for (server_model *m = s->models; m; m = m->next) {
        kiln_engine *e = m->eng;
        if (!e) continue;
        pthread_mutex_unlock(&s->mu);
        kiln_engine_wait_idle(e, -1);
        pthread_mutex_lock(&s->mu);
    }
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void server_models_free(server_srv *s) {
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->keeper_started) pthread_join(s->keeper, NULL);
    s->keeper_started = 0;
    for (server_model *m = s->models, *nx; m; m = nx) {
        nx = m->next;
        kiln_engine_free(m->eng); /* stops and waits for native work */
        server_template_free(m->tmpl);
        json_decref(m->details);
        json_decref(m->defaults);
        free(m);
    }
    s->models = NULL;
}

json_t *server_model_details(const server_model *m) {
    if (m->details) return json_deep_copy(m->details);
    json_t *d = json_object();
    json_object_set_new(d, "format", json_string("gguf"));
    return d;
}

json_t *server_capabilities(int family) {
    json_t *caps = json_array();
    const char *c = family == KILN_ENGINE_LLM         ? "completion"
                    : family == KILN_ENGINE_EMBEDDING ? "embedding"
                    : family == KILN_ENGINE_RERANK    ? "rerank"
                    : family == KILN_ENGINE_STT       ? "transcription"
                    : family == KILN_ENGINE_IMAGE     ? "image"
                    : family == KILN_ENGINE_DECISION  ? "decision"
                                                      : NULL;
    if (c) json_array_append_new(caps, json_string(c));
    return caps;
}

int server_same_model_name(const char *a, const char *b) {
    if (!strcmp(a, b)) return 1;
    size_t la = strlen(a), lb = strlen(b);
    if (la < lb) return !strncmp(a, b, la) && !strcmp(b + la, ":latest");
    return !strncmp(a, b, lb) && !strcmp(a + lb, ":latest");
}

json_t *server_store_models(server_srv *s) {
    char *list = NULL;
    json_t *arr = NULL;
    if (s->store && kiln_store_list(s->store, &list) == KILN_OK) {
        arr = json_loads(list, 0, NULL);
        kiln_store_free_string(list);
    }
    if (!json_is_array(arr)) {
        json_decref(arr);
        return json_array();
    }
    json_t *out = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        char why[256];
        int fam = engine_store_family(json_string_value(json_object_get(e, "arch")),
                                      json_string_value(json_object_get(e, "family")), why, sizeof why);
        /* an architecture kiln does not run, and image packs (only the one
         * --image names is served, and it is listed by that flag) cannot be
         * asked for by name */
        if (fam < 0 || fam == KILN_ENGINE_IMAGE) continue;
        json_object_set_new(e, "serves", json_integer(fam));
        json_array_append(out, e);
    }
    json_decref(arr);
    return out;
}
