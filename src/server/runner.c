/* One model's life and its scheduler.
 *
 * The scheduler thread owns the context.  Every step it builds ONE batch:
 * one token for each sequence that is generating, then prompt chunks of the
 * sequences still prefilling, up to n_batch tokens (a prefill chunk per
 * step is capped so streams in flight keep moving).  After the forward it
 * samples the sequences whose logits came out and hands the tokens to the
 * waiting HTTP threads.  Sequence i of the context is slot i. */
#include "server/srv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KS_PREFILL_CHUNK 256 /* prompt tokens one sequence adds per step */

typedef struct slot {
    ks_req *q;
    kiln_sampler *smp;
    int32_t n_fed;        /* prompt tokens in the KV cache */
    int32_t pending;      /* sampled token still to feed, -1 none */
    int32_t *hist;        /* prompt + generated, for the prefix cache */
    int32_t n_hist, cap_hist;
    ks_sv *json;          /* JSON-mode recognizer (jschema.h) or NULL */
    double t_last;        /* when the previous token came out */
} slot;

/* ---- requests ---- */

ks_req *ks_req_new(void) {
    ks_req *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    pthread_cond_init(&q->cv, NULL);
    q->refs = 1;
    return q;
}

static void req_free(ks_req *q) {
    pthread_cond_destroy(&q->cv);
    free(q->prompt);
    free(q->out);
    ks_schema_free(q->schema);
    free(q);
}

void ks_req_put(ks_runner *r, ks_req *q) {
    pthread_mutex_lock(&r->mu);
    int last = --q->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last) req_free(q);
}

int ks_runner_submit(ks_runner *r, ks_req *q) {
    pthread_mutex_lock(&r->mu);
    if (r->n_waiting >= r->srv->cfg.max_queue || r->quit) {
        pthread_mutex_unlock(&r->mu);
        return -1;
    }
    q->refs++;
    q->state = KS_Q_WAITING;
    q->t_submit = ks_now();
    q->next = NULL;
    if (r->q_tail) r->q_tail->next = q;
    else r->q_head = q;
    r->q_tail = q;
    r->n_waiting++;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* Under r->mu: marks q over and wakes its reader. */
static void finish_req(ks_runner *r, ks_req *q, int fin, const char *err) {
    q->finish = fin;
    q->state = KS_Q_DONE;
    q->t_done = ks_now();
    if (err) snprintf(q->err, sizeof q->err, "%s", err);
    pthread_cond_broadcast(&q->cv);
    if (--q->refs == 0) req_free(q);
}

/* Under r->mu: ends every queued request with fin and err. */
static void finish_queue(ks_runner *r, int fin, const char *err) {
    while (r->q_head) {
        ks_req *q = r->q_head;
        r->q_head = q->next;
        r->n_waiting--;
        finish_req(r, q, fin, err);
    }
    r->q_tail = NULL;
}

/* ---- loading ---- */

static void do_load(ks_runner *r) {
    const ks_config *cfg = &r->srv->cfg;
    double t0 = ks_now();
    kiln_model *m = NULL;
    kiln_context *c = NULL;
    char err[512] = "";
    if (kiln_model_load(r->path, NULL, &m) != KILN_OK) {
        snprintf(err, sizeof err, "cannot load %s: %s", r->name, kiln_last_error());
    } else {
        kiln_context_params cp = kiln_context_default_params();
        cp.n_ctx = cfg->n_ctx;
        cp.n_batch = cfg->n_batch > 0 ? cfg->n_batch : 512;
        cp.n_seq_max = cfg->parallel > 0 ? cfg->parallel : 4;
        cp.n_threads = cfg->n_threads;
        cp.kv_type = cfg->kv_type;
        cp.mem_limit = cfg->kv_budget;
        if (kiln_context_new(m, &cp, &c) != KILN_OK) {
            snprintf(err, sizeof err, "cannot create a context for %s: %s", r->name, kiln_last_error());
            kiln_model_free(m);
            m = NULL;
        }
    }
    pthread_mutex_lock(&r->mu);
    if (m) {
        r->model = m;
        r->ctx = c;
        r->n_ctx = kiln_context_n_ctx(c);
        kiln_model_info info;
        kiln_model_get_info(m, &info);
        r->n_vocab = info.n_vocab;
        r->state = KS_M_READY;
        r->loaded_at = ks_wall();
        r->load_seconds = ks_now() - t0;
        r->last_used = ks_now();
        kiln_kv_get_stats(c, &r->kv);
        fprintf(stderr, "kiln serve: %s ready (%d tokens x %d sequences, loaded in %.2f s)\n", r->name, r->n_ctx,
                cfg->parallel, r->load_seconds);
    } else {
        r->state = KS_M_FAILED;
        snprintf(r->load_err, sizeof r->load_err, "%s", err);
        fprintf(stderr, "kiln serve: %s\n", err);
    }
    r->want_load = 0;
    pthread_cond_broadcast(&r->load_cv);
    pthread_mutex_unlock(&r->mu);
}

/* Under r->mu, with no request active. */
static void do_unload(ks_runner *r) {
    kiln_context *c = r->ctx;
    kiln_model *m = r->model;
    void *t = r->tmpl;
    pthread_mutex_lock(&r->emb_mu);
    kiln_embedder *e = r->emb;
    r->emb = NULL;
    pthread_mutex_unlock(&r->emb_mu);
    r->ctx = NULL;
    r->model = NULL;
    r->tmpl = NULL;
    r->tmpl_tried = 0;
    r->state = KS_M_UNLOADED;
    r->unload_now = 0;
    memset(&r->kv, 0, sizeof r->kv);
    pthread_mutex_unlock(&r->mu);
    kiln_embedder_free(e);
    ks_template_free(t);
    kiln_context_free(c);
    kiln_model_free(m);
    fprintf(stderr, "kiln serve: %s unloaded\n", r->name);
    pthread_mutex_lock(&r->mu);
}

int ks_runner_acquire(ks_runner *r, char *msg, size_t cap) {
    pthread_mutex_lock(&r->mu);
    r->users++;
    if (r->quit) {
        snprintf(msg, cap, "the server is shutting down");
        r->users--;
        pthread_mutex_unlock(&r->mu);
        return -1;
    }
    if (r->state == KS_M_FAILED) r->state = KS_M_UNLOADED; /* try again */
    if (r->state == KS_M_UNLOADED) {
        r->state = KS_M_LOADING;
        r->want_load = 1;
        pthread_cond_signal(&r->cv);
    }
    while (r->state == KS_M_LOADING) pthread_cond_wait(&r->load_cv, &r->mu);
    int rc = 0;
    if (r->state != KS_M_READY) {
        snprintf(msg, cap, "%s", r->load_err[0] ? r->load_err : "the model is not available");
        r->users--;
        rc = -1;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void ks_runner_release(ks_runner *r, double keep_alive) {
    pthread_mutex_lock(&r->mu);
    r->users--;
    r->last_used = ks_now();
    if (!isnan(keep_alive)) r->keep_alive = keep_alive;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void ks_runner_unload(ks_runner *r) {
    pthread_mutex_lock(&r->mu);
    r->keep_alive = 0;
    r->unload_now = 1;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* ---- the scheduler ---- */

static void log_softmax_top(const float *lg, int nv, int32_t id, int n_top, ks_tok *t) {
    float mx = lg[0];
    for (int i = 1; i < nv; i++) mx = lg[i] > mx ? lg[i] : mx;
    double sum = 0;
    for (int i = 0; i < nv; i++) sum += exp((double)(lg[i] - mx));
    float lse = mx + (float)log(sum);
    t->logprob = lg[id] - lse;
    t->n_top = 0;
    for (int k = 0; k < n_top; k++) {
        int best = -1;
        for (int i = 0; i < nv; i++) {
            if (best >= 0 && lg[i] <= lg[best]) continue;
            int seen = 0;
            for (int j = 0; j < k; j++) seen |= t->top_id[j] == i;
            if (!seen) best = i;
        }
        if (best < 0) break;
        t->top_id[k] = best;
        t->top_lp[k] = lg[best] - lse;
        t->n_top++;
    }
}

/* Samples under the JSON constraint (any value, or the request's schema):
 * the sampler's choice if it fits, else the most likely token that does. */
static int32_t sample_json(ks_runner *r, slot *sl, const float *logits, float *scratch) {
    const ks_sv *v = sl->json;
    kiln_model *m = r->model;
    int nv = r->n_vocab;
    char piece[256];
    int32_t id = kiln_sampler_sample(sl->smp, logits);
    for (int tries = 0; tries < 2; tries++) {
        if (kiln_token_is_eog(m, id)) {
            if (ks_sv_complete(v)) return id;
        } else {
            int n = kiln_token_to_piece(m, id, piece, sizeof piece, 0);
            if (n > 0 && n <= (int)sizeof piece && ks_sv_accepts(v, piece, n)) return id;
        }
        /* mask and resample once, then fall back to a scan by logit */
        memcpy(scratch, logits, (size_t)nv * sizeof(float));
        scratch[id] = -INFINITY;
        logits = scratch;
        id = kiln_sampler_sample(sl->smp, scratch);
    }
    int32_t best = -1;
    for (int i = 0; i < nv; i++) {
        if (scratch[i] == -INFINITY || (best >= 0 && scratch[i] <= scratch[best])) continue;
        if (kiln_token_is_eog(m, i)) {
            if (!ks_sv_complete(v)) continue;
        } else {
            int n = kiln_token_to_piece(m, i, piece, sizeof piece, 0);
            if (n <= 0 || n > (int)sizeof piece || !ks_sv_accepts(v, piece, n)) continue;
        }
        best = i;
    }
    return best >= 0 ? best : kiln_token_eos(m);
}

static void json_advance(ks_runner *r, slot *sl, int32_t id) {
    if (!sl->json || kiln_token_is_eog(r->model, id)) return;
    char piece[256];
    int n = kiln_token_to_piece(r->model, id, piece, sizeof piece, 0);
    for (int i = 0; i < n && i < (int)sizeof piece; i++) ks_sv_byte(sl->json, (unsigned char)piece[i]);
}

static void hist_push(slot *sl, int32_t id) {
    if (sl->n_hist == sl->cap_hist) {
        int32_t nc = sl->cap_hist ? sl->cap_hist * 2 : 256;
        int32_t *nh = realloc(sl->hist, (size_t)nc * sizeof *nh);
        if (!nh) return;
        sl->hist = nh;
        sl->cap_hist = nc;
    }
    sl->hist[sl->n_hist++] = id;
}

static void slot_release(ks_runner *r, slot *sl, int seq) {
    /* publish what was computed so a later request can reuse it */
    kiln_seq_cache(r->ctx, seq, sl->hist, kiln_seq_len(r->ctx, seq));
    kiln_seq_truncate(r->ctx, seq, 0);
    kiln_sampler_free(sl->smp);
    free(sl->hist);
    free(sl->json);
    memset(sl, 0, sizeof *sl);
}

/* Under r->mu: starts q in the free slot seq. */
static int slot_start(ks_runner *r, slot *sl, int seq, ks_req *q) {
    memset(sl, 0, sizeof *sl);
    kiln_model_info info;
    kiln_model_get_info(r->model, &info);
    if (kiln_sampler_new(&q->sp, info.n_vocab, &sl->smp) != KILN_OK) return -1;
    if (q->json_mode) {
        if (!(sl->json = malloc(sizeof *sl->json))) {
            kiln_sampler_free(sl->smp);
            return -1;
        }
        ks_sv_init(sl->json, q->schema);
    }
    sl->q = q;
    sl->pending = -1;
    for (int i = 0; i < q->n_prompt; i++) {
        kiln_sampler_accept(sl->smp, q->prompt[i]);
        hist_push(sl, q->prompt[i]);
    }
    int32_t got = kiln_seq_reuse(r->ctx, seq, q->prompt, q->n_prompt);
    sl->n_fed = got > 0 ? got : 0;
    q->n_cached = sl->n_fed;
    q->state = KS_Q_RUNNING;
    q->t_start = ks_now();
    return 0;
}

static void *sched_main(void *arg) {
    ks_runner *r = arg;
    const ks_config *cfg = &r->srv->cfg;
    int n_par = cfg->parallel > 0 ? cfg->parallel : 4;
    slot *slots = calloc((size_t)n_par, sizeof *slots);
    int32_t *tok = NULL, *seq = NULL, *map = NULL;
    int8_t *want = NULL;
    float *scratch = NULL;
    int n_batch = 0;
    pthread_mutex_lock(&r->mu);
    while (!r->quit) {
        if (r->want_load && r->state == KS_M_LOADING) {
            pthread_mutex_unlock(&r->mu);
            do_load(r);
            pthread_mutex_lock(&r->mu);
            if (r->state == KS_M_READY) {
                n_batch = cfg->n_batch > 0 ? cfg->n_batch : 512;
                if (n_batch > r->n_ctx * n_par) n_batch = r->n_ctx * n_par;
                kiln_model_info info;
                kiln_model_get_info(r->model, &info);
                free(tok); free(seq); free(map); free(want); free(scratch);
                tok = malloc((size_t)n_batch * sizeof *tok);
                seq = malloc((size_t)n_batch * sizeof *seq);
                map = malloc((size_t)n_batch * sizeof *map);
                want = malloc((size_t)n_batch);
                scratch = malloc((size_t)info.n_vocab * sizeof *scratch);
                if (!tok || !seq || !map || !want || !scratch) {
                    do_unload(r);
                    r->state = KS_M_FAILED;
                    snprintf(r->load_err, sizeof r->load_err, "out of memory for the scheduler");
                }
            }
            continue;
        }
        /* fail everything queued while there is no model */
        if (r->state != KS_M_READY) {
            finish_queue(r, KS_FIN_ERROR, "the model is not loaded");
            pthread_cond_wait(&r->cv, &r->mu);
            continue;
        }
        /* admit waiting requests into free slots, oldest first */
        for (int i = 0; i < n_par && r->q_head; i++) {
            if (slots[i].q) continue;
            ks_req *q = r->q_head;
            r->q_head = q->next;
            if (!r->q_head) r->q_tail = NULL;
            r->n_waiting--;
            if (atomic_load(&q->cancel)) {
                finish_req(r, q, KS_FIN_CANCEL, NULL);
                i--;
                continue;
            }
            if (slot_start(r, &slots[i], i, q)) finish_req(r, q, KS_FIN_ERROR, "out of memory");
            else r->n_running++;
        }
        int active = 0;
        for (int i = 0; i < n_par; i++) active += slots[i].q != NULL;
        if (!active) {
            double now = ks_now();
            int idle = r->users == 0 && !r->q_head;
            if (idle && (r->unload_now || (r->keep_alive >= 0 && now >= r->last_used + r->keep_alive))) {
                do_unload(r);
                continue;
            }
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1; /* re-check the idle timer every second */
            pthread_cond_timedwait(&r->cv, &r->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&r->mu);

        /* cancellations first: their blocks go back before the next step */
        for (int i = 0; i < n_par; i++) {
            ks_req *q = slots[i].q;
            if (!q || !atomic_load(&q->cancel)) continue;
            slot_release(r, &slots[i], i);
            pthread_mutex_lock(&r->mu);
            r->n_running--;
            finish_req(r, q, KS_FIN_CANCEL, NULL);
            pthread_mutex_unlock(&r->mu);
        }
        /* build the step: decode tokens, then prefill chunks */
        int n = 0;
        for (int i = 0; i < n_par && n < n_batch; i++) {
            if (!slots[i].q || slots[i].pending < 0) continue;
            tok[n] = slots[i].pending;
            seq[n] = i;
            want[n] = 1;
            map[n] = i;
            n++;
        }
        for (int i = 0; i < n_par && n < n_batch; i++) {
            slot *sl = &slots[i];
            if (!sl->q || sl->pending >= 0 || sl->n_fed >= sl->q->n_prompt) continue;
            int32_t k = sl->q->n_prompt - sl->n_fed;
            if (k > KS_PREFILL_CHUNK) k = KS_PREFILL_CHUNK;
            if (k > n_batch - n) k = n_batch - n;
            for (int32_t j = 0; j < k; j++) {
                tok[n] = sl->q->prompt[sl->n_fed + j];
                seq[n] = i;
                want[n] = sl->n_fed + j == sl->q->n_prompt - 1;
                map[n] = i;
                n++;
            }
            sl->n_fed += k;
        }
        kiln_status st = KILN_OK;
        if (n > 0) {
            kiln_batch b = {n, tok, NULL, seq, want};
            st = kiln_decode(r->ctx, &b);
        }
        if (st != KILN_OK) { /* every sequence in the step is in an unknown state: end them */
            char msg[300];
            snprintf(msg, sizeof msg, "decode failed: %s", kiln_context_error(r->ctx));
            for (int bi = 0; bi < n; bi++) {
                slot *sl = &slots[map[bi]];
                ks_req *q = sl->q;
                if (!q) continue;
                slot_release(r, sl, map[bi]);
                pthread_mutex_lock(&r->mu);
                r->n_running--;
                finish_req(r, q, KS_FIN_ERROR, msg);
                pthread_mutex_unlock(&r->mu);
            }
            n = 0;
        }
        double now = ks_now();
        for (int bi = 0; bi < n; bi++) {
            if (!want[bi]) continue;
            int i = map[bi];
            slot *sl = &slots[i];
            ks_req *q = sl->q;
            const float *lg = kiln_get_logits(r->ctx, bi);
            int32_t id = sl->json ? sample_json(r, sl, lg, scratch) : kiln_sampler_sample(sl->smp, lg);
            kiln_sampler_accept(sl->smp, id);
            json_advance(r, sl, id);
            ks_tok t = {0};
            t.id = id;
            if (q->want_logprobs) log_softmax_top(lg, r->n_vocab, id, q->n_top, &t);
            if (sl->pending < 0) /* the prompt is in: publish its blocks */
                kiln_seq_cache(r->ctx, i, sl->hist, sl->n_hist);
            int eog = kiln_token_is_eog(r->model, id);
            pthread_mutex_lock(&r->mu);
            if (q->n_out == q->cap_out) {
                int32_t nc = q->cap_out ? q->cap_out * 2 : 64;
                ks_tok *no = realloc(q->out, (size_t)nc * sizeof *no);
                if (no) {
                    q->out = no;
                    q->cap_out = nc;
                }
            }
            int fin = KS_FIN_NONE;
            if (q->n_out < q->cap_out) {
                if (!eog) q->out[q->n_out++] = t;
            } else {
                fin = KS_FIN_ERROR;
            }
            if (q->n_out == 1 && !eog) {
                q->t_first = now;
                ks_metrics_ttft(now - q->t_submit);
            } else if (!eog && q->n_out > 1) {
                ks_metrics_itl(now - sl->t_last);
            }
            sl->t_last = now;
            if (!fin) {
                if (eog || (sl->json && sl->json->done)) fin = KS_FIN_STOP;
                else if (q->n_out >= q->max_tokens) fin = KS_FIN_LENGTH;
            }
            pthread_cond_broadcast(&q->cv);
            pthread_mutex_unlock(&r->mu);
            if (fin) {
                slot_release(r, sl, i);
                pthread_mutex_lock(&r->mu);
                r->n_running--;
                finish_req(r, q, fin, fin == KS_FIN_ERROR ? "out of memory" : NULL);
                pthread_mutex_unlock(&r->mu);
            } else {
                sl->pending = id;
                hist_push(sl, id);
            }
        }
        pthread_mutex_lock(&r->mu);
        kiln_kv_get_stats(r->ctx, &r->kv);
    }
    for (int i = 0; i < n_par; i++) {
        ks_req *q = slots[i].q;
        if (!q) continue;
        pthread_mutex_unlock(&r->mu);
        slot_release(r, &slots[i], i);
        pthread_mutex_lock(&r->mu);
        r->n_running--;
        finish_req(r, q, KS_FIN_CANCEL, "the server is shutting down");
    }
    finish_queue(r, KS_FIN_CANCEL, "the server is shutting down");
    if (r->state == KS_M_READY) do_unload(r);
    if (r->state == KS_M_LOADING) {
        r->state = KS_M_FAILED;
        snprintf(r->load_err, sizeof r->load_err, "the server is shutting down");
    }
    pthread_cond_broadcast(&r->load_cv);
    pthread_mutex_unlock(&r->mu);
    free(slots);
    free(tok); free(seq); free(map); free(want); free(scratch);
    return NULL;
}

ks_runner *ks_runner_new(ks_srv *s, const char *name, const char *path, void *lease) {
    ks_runner *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->srv = s;
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->path, sizeof r->path, "%s", path);
    r->lease = lease;
    r->keep_alive = s->cfg.keep_alive;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->emb_mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    pthread_cond_init(&r->load_cv, NULL);
    if (pthread_create(&r->thread, NULL, sched_main, r)) {
        ks_runner_free(r);
        return NULL;
    }
    r->started = 1;
    return r;
}

void ks_runner_free(ks_runner *r) {
    if (!r) return;
    if (r->started) {
        pthread_mutex_lock(&r->mu);
        r->quit = 1;
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->thread, NULL);
    }
    if (r->lease) kiln_store_release(r->lease);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->emb_mu);
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->load_cv);
    free(r);
}
