/* One model's life: loading on demand, unloading when idle (keep-alive),
 * and the generation scheduler (gen.h) that batches its requests: every
 * step is one forward over all of them, prompts going in by chunks. */
#include "server/srv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KS_PREFILL_CHUNK 256 /* prompt tokens one sequence adds per step */

/* ---- requests ---- */

ks_req *ks_req_new(void) { return calloc(1, sizeof(ks_req)); }

void ks_req_free(ks_req *q) {
    if (!q) return;
    gen_req_free(q->gr);
    free(q->prompt);
    ks_schema_free(q->schema);
    free(q);
}

int ks_runner_submit(ks_runner *r, ks_req *q) {
    gen_params p = gen_params_default();
    p.prompt = q->prompt;
    p.n_prompt = q->n_prompt;
    p.n_predict = q->max_tokens;
    p.sampler = q->sp;
    p.n_top = q->want_logprobs ? q->n_top : -1;
    p.reuse = 1;
    if (q->json_mode) {
        ks_sv_init(&q->sv, q->schema);
        sample_json_constraint(&q->cons, &q->sv);
        p.constraint = &q->cons;
    }
    pthread_mutex_lock(&r->mu);
    int rc = -1;
    gen_sched_stats st;
    if (r->sched && !r->quit) {
        gen_sched_get_stats(r->sched, &st);
        q->t_submit = ks_now();
        if (st.n_waiting < r->srv->cfg.max_queue && gen_sched_submit(r->sched, &p, 0, NULL, &q->gr) == KILN_OK)
            rc = 0;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* ---- loading ---- */

static void do_load(ks_runner *r) {
    const ks_config *cfg = &r->srv->cfg;
    double t0 = ks_now();
    kiln_model *m = NULL;
    kiln_context *c = NULL;
    gen_sched *sched = NULL;
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
        } else if (gen_sched_new(m, c, KS_PREFILL_CHUNK, NULL, &sched) != KILN_OK) {
            snprintf(err, sizeof err, "cannot start the scheduler for %s: out of memory", r->name);
            kiln_context_free(c);
            kiln_model_free(m);
            m = NULL;
        }
    }
    pthread_mutex_lock(&r->mu);
    if (m) {
        r->model = m;
        r->ctx = c;
        r->sched = sched;
        r->n_ctx = kiln_context_n_ctx(c);
        kiln_model_info info;
        kiln_model_get_info(m, &info);
        r->n_vocab = info.n_vocab;
        r->state = KS_M_READY;
        r->loaded_at = ks_wall();
        r->load_seconds = ks_now() - t0;
        r->last_used = ks_now();
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
    gen_sched *sched = r->sched;
    void *t = r->tmpl;
    pthread_mutex_lock(&r->emb_mu);
    kiln_embedder *e = r->emb;
    r->emb = NULL;
    pthread_mutex_unlock(&r->emb_mu);
    r->ctx = NULL;
    r->model = NULL;
    r->sched = NULL;
    r->tmpl = NULL;
    r->tmpl_tried = 0;
    r->state = KS_M_UNLOADED;
    r->unload_now = 0;
    pthread_mutex_unlock(&r->mu);
    gen_sched_free(sched);
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

/* ---- the keeper: loads when asked, unloads when idle ---- */

static void *keeper_main(void *arg) {
    ks_runner *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->quit) {
        if (r->want_load && r->state == KS_M_LOADING) {
            pthread_mutex_unlock(&r->mu);
            do_load(r);
            pthread_mutex_lock(&r->mu);
            continue;
        }
        if (r->state == KS_M_READY && r->users == 0) {
            double now = ks_now();
            if (r->unload_now || (r->keep_alive >= 0 && now >= r->last_used + r->keep_alive)) {
                do_unload(r);
                continue;
            }
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1; /* re-check the idle timer every second */
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    while (r->users > 0) pthread_cond_wait(&r->cv, &r->mu); /* cancelled: they end soon */
    if (r->state == KS_M_READY) do_unload(r);
    if (r->state == KS_M_LOADING) {
        r->state = KS_M_FAILED;
        snprintf(r->load_err, sizeof r->load_err, "the server is shutting down");
    }
    pthread_cond_broadcast(&r->load_cv);
    pthread_mutex_unlock(&r->mu);
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
    if (pthread_create(&r->thread, NULL, keeper_main, r)) {
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
