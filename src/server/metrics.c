/* Prometheus text metrics.  Counters and histograms are process-wide;
 * gauges (running, waiting, KV use) are read from the models when
 * rendered.  Names follow vLLM's where one exists, prefixed kiln_. */
#include "server/metrics.h"
#include "server/buf.h"
#include "server/models.h"
#include "server/srv.h"

#include "gen/gen.h"

#include <stdio.h>
#include <string.h>

/* histogram bucket upper bounds, seconds */
static const double k_ttft_b[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double k_itl_b[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
#define NB_TTFT (sizeof k_ttft_b / sizeof k_ttft_b[0])
#define NB_ITL (sizeof k_itl_b / sizeof k_itl_b[0])

typedef struct hist {
    uint64_t n[16]; /* per bucket (not cumulative); last = +Inf */
    uint64_t count;
    double sum;
} hist;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_prompt, g_cached, g_gen;
static uint64_t g_status[6]; /* 1xx..5xx by first digit */
static hist g_ttft, g_itl;

static void observe(hist *h, const double *b, size_t nb, double v) {
    size_t i = 0;
    while (i < nb && v > b[i]) i++;
    pthread_mutex_lock(&g_mu);
    h->n[i]++;
    h->count++;
    h->sum += v;
    pthread_mutex_unlock(&g_mu);
}

void server_metrics_ttft(double s) { observe(&g_ttft, k_ttft_b, NB_TTFT, s); }
void server_metrics_itl(double s) { observe(&g_itl, k_itl_b, NB_ITL, s); }

void server_metrics_request(int status) {
    pthread_mutex_lock(&g_mu);
    if (status >= 100 && status < 600) g_status[status / 100]++;
    pthread_mutex_unlock(&g_mu);
}

void server_metrics_tokens(int64_t prompt, int64_t cached, int64_t generated) {
    pthread_mutex_lock(&g_mu);
    g_prompt += (uint64_t)prompt;
    g_cached += (uint64_t)cached;
    g_gen += (uint64_t)generated;
    pthread_mutex_unlock(&g_mu);
}

static void render_hist(server_buf *o, const char *name, const char *help, const hist *h, const double *b, size_t nb) {
    server_buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < nb; i++) {
        cum += h->n[i];
        server_buf_printf(o, "%s_bucket{le=\"%g\"} %llu\n", name, b[i], (unsigned long long)cum);
    }
    server_buf_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                      (unsigned long long)h->count, name, h->sum, name, (unsigned long long)h->count);
}

void server_metrics_render(server_srv *s, server_buf *o) {
    /* per-model gauges and counters: each family is filled while the
     * models are locked, then written after its HELP/TYPE header */
    enum { RUN, WAIT, KVU, KVB, LOOK, HIT, LOADED, SP_DRAFT, SP_ACC, SP_STEPS, SP_RATE, SP_POS, N_FAM };
    static const char *const head[N_FAM] = {
        "# HELP kiln_requests_running Requests decoding now.\n# TYPE kiln_requests_running gauge\n",
        "# HELP kiln_requests_waiting Requests queued for a slot.\n# TYPE kiln_requests_waiting gauge\n",
        "# HELP kiln_kv_cache_usage_ratio KV blocks held by sequences / all blocks.\n"
        "# TYPE kiln_kv_cache_usage_ratio gauge\n",
        "# HELP kiln_kv_cache_blocks KV blocks by state.\n# TYPE kiln_kv_cache_blocks gauge\n",
        "# HELP kiln_prefix_cache_queries_total Prompt tokens looked up in the prefix cache.\n"
        "# TYPE kiln_prefix_cache_queries_total counter\n",
        "# HELP kiln_prefix_cache_hits_total Prompt tokens found in the prefix cache.\n"
        "# TYPE kiln_prefix_cache_hits_total counter\n",
        "# HELP kiln_model_loaded 1 while the model is resident.\n# TYPE kiln_model_loaded gauge\n",
        "# HELP kiln_spec_decode_num_draft_tokens_total Proposed tokens the model verified (speculative decoding, "
        "since the server started).\n# TYPE kiln_spec_decode_num_draft_tokens_total counter\n",
        "# HELP kiln_spec_decode_num_accepted_tokens_total Of those, accepted.\n"
        "# TYPE kiln_spec_decode_num_accepted_tokens_total counter\n",
        "# HELP kiln_spec_decode_num_drafts_total Verifications (a sequence's proposals checked in one forward).\n"
        "# TYPE kiln_spec_decode_num_drafts_total counter\n",
        "# HELP kiln_spec_decode_acceptance_rate Accepted / proposed tokens since the server started.\n"
        "# TYPE kiln_spec_decode_acceptance_rate gauge\n",
        "# HELP kiln_spec_decode_num_accepted_tokens_per_pos_total Verifications that accepted the proposal at each "
        "position (1 = the first).\n# TYPE kiln_spec_decode_num_accepted_tokens_per_pos_total counter\n",
    };
    server_buf f[N_FAM] = {{0}};
    pthread_mutex_lock(&s->mu);
    for (server_model *r = s->models; r; r = r->next) {
        const char *m = r->name;
        /* requests as the engine's gate counts them (waiting: for a place,
         * or yielded to an urgent one); the KV cache from its scheduler */
        gen_sched_stats gs;
        memset(&gs, 0, sizeof gs);
        const int live = server_model_stats_ok(r) && engine_llm_stats(r->eng, NULL, &gs) == KILN_OK;
        if (r->eng) {
            kiln_engine_observation ob;
            kiln_engine_observe(r->eng, &ob);
            gs.n_running = ob.n_active - ob.n_waiting;
            gs.n_waiting = ob.n_waiting;
        }
        const kiln_kv_stats *kv = &gs.kv;
        server_buf_printf(&f[RUN], "kiln_requests_running{model_name=\"%s\"} %d\n", m, gs.n_running);
        server_buf_printf(&f[WAIT], "kiln_requests_waiting{model_name=\"%s\"} %d\n", m, gs.n_waiting);
        double use = kv->n_blocks ? (double)kv->n_used / kv->n_blocks : 0;
        server_buf_printf(&f[KVU], "kiln_kv_cache_usage_ratio{model_name=\"%s\"} %.6f\n", m, use);
        server_buf_printf(&f[KVB], "kiln_kv_cache_blocks{model_name=\"%s\",state=\"used\"} %d\n", m, kv->n_used);
        server_buf_printf(&f[KVB], "kiln_kv_cache_blocks{model_name=\"%s\",state=\"cached\"} %d\n", m, kv->n_cached);
        server_buf_printf(&f[KVB], "kiln_kv_cache_blocks{model_name=\"%s\",state=\"total\"} %d\n", m, kv->n_blocks);
        /* counters: since the server started, whatever loads came between */
        server_counts tot;
        server_model_counts(r, live ? &gs : NULL, &tot);
        server_buf_printf(&f[HIT], "kiln_prefix_cache_hits_total{model_name=\"%s\"} %llu\n", m,
                          (unsigned long long)tot.hit_tokens);
        server_buf_printf(&f[LOOK], "kiln_prefix_cache_queries_total{model_name=\"%s\"} %llu\n", m,
                          (unsigned long long)tot.lookup_tokens);
        server_buf_printf(&f[LOADED], "kiln_model_loaded{model_name=\"%s\"} %d\n", m, r->state == SERVER_M_READY);
        if (s->cfg.spec.type != KILN_SPEC_NONE && r->family == KILN_ENGINE_LLM) {
            const gen_spec_stats *sp = &tot.spec;
            server_buf_printf(&f[SP_DRAFT], "kiln_spec_decode_num_draft_tokens_total{model_name=\"%s\"} %llu\n", m,
                              (unsigned long long)sp->n_drafted);
            server_buf_printf(&f[SP_ACC], "kiln_spec_decode_num_accepted_tokens_total{model_name=\"%s\"} %llu\n", m,
                              (unsigned long long)sp->n_accepted);
            server_buf_printf(&f[SP_STEPS], "kiln_spec_decode_num_drafts_total{model_name=\"%s\"} %llu\n", m,
                              (unsigned long long)sp->n_steps);
            server_buf_printf(&f[SP_RATE], "kiln_spec_decode_acceptance_rate{model_name=\"%s\"} %.6f\n", m,
                              sp->n_drafted ? (double)sp->n_accepted / (double)sp->n_drafted : 0.0);
            for (int k = 0; k < GEN_DRAFT_MAX; k++)
                server_buf_printf(
                    &f[SP_POS],
                    "kiln_spec_decode_num_accepted_tokens_per_pos_total{model_name=\"%s\",position=\"%d\"} "
                    "%llu\n",
                    m, k + 1, (unsigned long long)sp->n_accepted_at[k]);
        }
    }
    pthread_mutex_unlock(&s->mu);
    for (int k = 0; k < N_FAM; k++) {
        server_buf_puts(o, head[k]);
        server_buf_puts(o, f[k].p ? f[k].p : "");
        server_buf_free(&f[k]);
    }
    pthread_mutex_lock(&g_mu);
    hist ttft = g_ttft, itl = g_itl;
    uint64_t p = g_prompt, cch = g_cached, gen = g_gen, st[6];
    memcpy(st, g_status, sizeof st);
    pthread_mutex_unlock(&g_mu);
    server_buf_printf(o,
                      "# HELP kiln_prompt_tokens_total Prompt tokens of finished requests.\n"
                      "# TYPE kiln_prompt_tokens_total counter\nkiln_prompt_tokens_total %llu\n"
                      "# HELP kiln_prompt_tokens_cached_total Of those, taken from the prefix cache.\n"
                      "# TYPE kiln_prompt_tokens_cached_total counter\nkiln_prompt_tokens_cached_total %llu\n"
                      "# HELP kiln_generation_tokens_total Generated tokens of finished requests.\n"
                      "# TYPE kiln_generation_tokens_total counter\nkiln_generation_tokens_total %llu\n",
                      (unsigned long long)p, (unsigned long long)cch, (unsigned long long)gen);
    server_buf_puts(o, "# HELP kiln_http_responses_total Responses by status class.\n"
                       "# TYPE kiln_http_responses_total counter\n");
    for (int i = 1; i < 6; i++)
        server_buf_printf(o, "kiln_http_responses_total{code=\"%dxx\"} %llu\n", i, (unsigned long long)st[i]);
    server_buf_printf(o,
                      "# HELP kiln_http_head_timeouts_total Connections closed because a request's head did not arrive "
                      "within --header-timeout.\n# TYPE kiln_http_head_timeouts_total counter\n"
                      "kiln_http_head_timeouts_total %llu\n",
                      (unsigned long long)atomic_load(&s->n_cut));
    server_buf_printf(o,
                      "# HELP kiln_template_renders_running Chat template renders running now.\n"
                      "# TYPE kiln_template_renders_running gauge\nkiln_template_renders_running %d\n"
                      "# HELP kiln_template_renders_cancelled_total Chat template renders stopped because their client "
                      "disconnected.\n# TYPE kiln_template_renders_cancelled_total counter\n"
                      "kiln_template_renders_cancelled_total %llu\n"
                      "# HELP kiln_template_budget_exceeded_total Chat template renders that went over a budget.\n"
                      "# TYPE kiln_template_budget_exceeded_total counter\n",
                      atomic_load(&s->n_renders), (unsigned long long)atomic_load(&s->n_render_cancelled));
    static const char *const budget[3] = {"steps", "output", "memory"};
    for (int i = 0; i < 3; i++)
        server_buf_printf(o, "kiln_template_budget_exceeded_total{budget=\"%s\"} %llu\n", budget[i],
                          (unsigned long long)atomic_load(&s->n_render_over[i]));
    render_hist(o, "kiln_time_to_first_token_seconds", "From arrival to the first generated token.", &ttft, k_ttft_b,
                NB_TTFT);
    render_hist(o, "kiln_inter_token_latency_seconds", "Between consecutive generated tokens.", &itl, k_itl_b, NB_ITL);
}
