/* The CPU backend's Gated DeltaNet core (backend.h, backend_gdn): the gates,
 * the causal convolution and the delta rule by (run, channel block) and
 * (run, value head) items on the context's pool, state captures and the
 * rollback rows, and the replay of a recorded run. */
#include "backend/cpu.h"

#include "kernels/ssm.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct gdn_job {
    backend_ctx *X;
    const backend_gdn *a;
    const kern_ssm_ops *sops;
    atomic_long next;
} gdn_job;

static inline float *live(const backend_gdn *a, int seq) { return a->state + (size_t)seq * a->slot_floats; }

/* where capture k of run r ends, as a row of the step */
static inline int cap_end(const backend_gdn *a, int r, int k) {
    const int r0 = a->run[r];
    return k < a->cap_n[r] ? r0 + (a->cap_pos[(size_t)r * BACKEND_GDN_MAX_CAP + k] - a->pos[r0]) : a->run[r + 1];
}

static void gates_rows(void *ud, int i0, int i1) {
    const backend_gdn *a = ud;
    const int Hv = a->Hv, r = a->Hv / a->Hk;
    for (int i = i0; i < i1; i++) {
        const float *ba = a->ba + (size_t)i * 2 * Hv;
        float *beta = a->beta + (size_t)i * Hv, *gd = a->gd + (size_t)i * Hv;
        for (int v = 0; v < Hv; v++) {
            float b, al;
            if (a->ba_grouped) { /* per key head: [beta x r, alpha x r] */
                b = ba[(v / r) * 2 * r + v % r];
                al = ba[(v / r) * 2 * r + r + v % r];
            } else {
                b = ba[v];
                al = ba[Hv + v];
            }
            beta[v] = kern_sigmoid(b);
            gd[v] = kern_softplus(al + a->dt_bias[v]) * a->ssm_a[v];
        }
    }
}

static void qknorm_rows(void *ud, int i0, int i1) {
    const backend_gdn *a = ud;
    for (int i = i0; i < i1; i++) {
        float *cv = a->cv + (size_t)i * a->conv_dim;
        for (int hh = 0; hh < 2 * a->Hk; hh++) kern_l2norm(cv + (size_t)hh * a->Dk, a->Dk, a->eps);
    }
}

static void out_rows(void *ud, int i0, int i1) {
    const backend_gdn *a = ud;
    const int vd = a->Hv * a->Dv;
    for (int i = i0; i < i1; i++) {
        float *o = a->o + (size_t)i * vd;
        const float *z = a->z + (size_t)i * vd;
        for (int v = 0; v < a->Hv; v++)
            kern_rmsnorm_gated(o + (size_t)v * a->Dv, o + (size_t)v * a->Dv, a->ssm_norm, z + (size_t)v * a->Dv, a->Dv,
                               a->eps);
    }
}

/* The convolution: work items of (run, block of channels), each through
 * every capture point of its run. */
#define CONV_BLOCK 256

static void conv_task(void *ud, int ith, int nth) {
    gdn_job *j = ud;
    const backend_gdn *a = j->a;
    const int nb = (a->conv_dim + CONV_BLOCK - 1) / CONV_BLOCK;
    const long n_items = (long)a->n_run * nb;
    for (long it; (it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < n_items;) {
        const int r = (int)(it / nb), c0 = (int)(it % nb) * CONV_BLOCK;
        const int cn = a->conv_dim - c0 < CONV_BLOCK ? a->conv_dim - c0 : CONV_BLOCK;
        const int r0 = a->run[r], seq = a->seq[r0];
        float *state = live(a, seq) + a->conv_off + c0;
        int t = r0;
        for (int k = 0; k <= a->cap_n[r]; k++) { /* segments end at each capture, then at the run's end */
            const int end = cap_end(a, r, k);
            if (end > t) {
                kern_conv cv = {end - t,
                                cn,
                                a->K,
                                a->qkv + (size_t)t * a->conv_dim + c0,
                                (size_t)a->conv_dim,
                                a->conv_w + c0,
                                state,
                                (size_t)a->conv_dim,
                                a->cv + (size_t)t * a->conv_dim + c0,
                                (size_t)a->conv_dim,
                                NULL};
                j->sops->conv_silu(&cv);
                t = end;
            }
            if (k < a->cap_n[r]) {
                float *dst = a->cap_dst[(size_t)r * BACKEND_GDN_MAX_CAP + k] + a->conv_off + c0;
                for (int row = 0; row < a->K - 1; row++)
                    memcpy(dst + (size_t)row * a->conv_dim, state + (size_t)row * a->conv_dim,
                           (size_t)cn * sizeof(float));
            }
        }
    }
    (void)ith;
    (void)nth;
}

/* The delta rule: work items of (run, value head). */
static void delta_task(void *ud, int ith, int nth) {
    gdn_job *j = ud;
    const backend_gdn *a = j->a;
    const backend_cpu *C = backend_cpu_of(j->X);
    const long n_items = (long)a->n_run * a->Hv;
    const size_t delta_off = a->conv_off + a->conv_floats;
    const size_t head = (size_t)a->Dv * a->Dk;
    const int r_kv = a->Hv / a->Hk;
    float *scratch = C->gdn_scratch + (size_t)ith * C->gdn_per_thread;
    for (long it; (it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < n_items;) {
        const int r = (int)(it / a->Hv), v = (int)(it % a->Hv);
        const int kh = a->kh_grouped ? v / r_kv : v % a->Hk;
        const int r0 = a->run[r], seq = a->seq[r0];
        float *S = live(a, seq) + delta_off + (size_t)v * head;
        const size_t ld = (size_t)a->conv_dim;
        int t = r0;
        for (int k = 0; k <= a->cap_n[r]; k++) {
            const int end = cap_end(a, r, k);
            if (end > t) {
                const float *row = a->cv + (size_t)t * ld;
                kern_gdn g = {end - t,
                              a->pos[t],
                              a->Dk,
                              a->Dv,
                              row + (size_t)kh * a->Dk,
                              row + (size_t)(a->Hk + kh) * a->Dk,
                              ld,
                              row + (size_t)2 * a->Hk * a->Dk + (size_t)v * a->Dv,
                              ld,
                              a->gd + (size_t)t * a->Hv + v,
                              a->beta + (size_t)t * a->Hv + v,
                              (size_t)a->Hv,
                              1.0f / sqrtf((float)a->Dk),
                              S,
                              a->o + (size_t)t * a->Hv * a->Dv + (size_t)v * a->Dv,
                              (size_t)a->Hv * a->Dv,
                              scratch};
                if (end - t > 1 && !a->verify[r])
                    j->sops->gdn_chunk(&g);
                else
                    j->sops->gdn_step(&g); /* one token, or a run recorded for rollback: as decoding does */
                t = end;
            }
            if (k < a->cap_n[r])
                memcpy(a->cap_dst[(size_t)r * BACKEND_GDN_MAX_CAP + k] + delta_off + (size_t)v * head, S,
                       head * sizeof(float));
        }
    }
    (void)nth;
}

static void run_items(gdn_job *j, thread_pool_fn fn) {
    atomic_store_explicit(&j->next, 0, memory_order_relaxed);
    thread_pool_run_shared(j->X->pool, fn, j);
}

int backend_cpu_gdn_reserve(backend_ctx *X, int Dk, int Dv) {
    backend_cpu *C = backend_cpu_of(X);
    const size_t per = kern_gdn_scratch(Dk, Dv);
    if (C->gdn_scratch && C->gdn_per_thread >= per) return 0;
    const size_t n_thr = (size_t)(X->pool ? thread_pool_size(X->pool) : 1);
    float *p = malloc(n_thr * per * sizeof(float));
    if (!p) return -1;
    free(C->gdn_scratch);
    C->gdn_scratch = p;
    C->gdn_per_thread = per;
    return 0;
}

void backend_cpu_gdn(backend_ctx *X, const backend_gdn *a, int n) {
    gdn_job j = {X, a, backend_cpu_of(X)->s, 0};
    backend_cpu_for_rows(X, n, gates_rows, (void *)a);
    const size_t row = (size_t)a->conv_dim + 2 * (size_t)a->Hv;
    for (int r = 0; r < a->n_run; r++) { /* a recorded run keeps this layer's inputs */
        if (!a->verify[r]) continue;
        const int r0 = a->run[r], len = a->run[r + 1] - r0;
        float *dst = a->roll + (size_t)a->seq[r0] * a->roll_stride + a->roll_off;
        for (int t = 0; t < len; t++, dst += row) {
            memcpy(dst, a->qkv + (size_t)(r0 + t) * a->conv_dim, (size_t)a->conv_dim * sizeof(float));
            memcpy(dst + a->conv_dim, a->beta + (size_t)(r0 + t) * a->Hv, (size_t)a->Hv * sizeof(float));
            memcpy(dst + a->conv_dim + a->Hv, a->gd + (size_t)(r0 + t) * a->Hv, (size_t)a->Hv * sizeof(float));
        }
    }
    if (n == 1) { /* conv_dim x K multiply-adds: less than a pool hand-off */
        conv_task(&j, 0, 1);
    } else {
        run_items(&j, conv_task);
    }
    backend_cpu_for_rows(X, n, qknorm_rows, (void *)a);
    run_items(&j, delta_task);
    backend_cpu_for_rows(X, n, out_rows, (void *)a);
}

void backend_cpu_gdn_replay(backend_ctx *X, const backend_gdn *a, int seq, int n) {
    const kern_ssm_ops *sops = backend_cpu_of(X)->s;
    const size_t row = (size_t)a->conv_dim + 2 * (size_t)a->Hv, head = (size_t)a->Dv * a->Dk;
    const int r_kv = a->Hv / a->Hk;
    const float *in = a->roll + (size_t)seq * a->roll_stride + a->roll_off;
    float *st = live(a, seq) + a->conv_off;
    kern_conv cv = {n,     a->conv_dim,         a->K, in, row, a->conv_w, st, (size_t)a->conv_dim,
                    a->cv, (size_t)a->conv_dim, NULL};
    sops->conv_silu(&cv);
    for (int t = 0; t < n; t++)
        for (int hh = 0; hh < 2 * a->Hk; hh++)
            kern_l2norm(a->cv + (size_t)t * a->conv_dim + (size_t)hh * a->Dk, a->Dk, a->eps);
    for (int v = 0; v < a->Hv; v++) {
        const int kh = a->kh_grouped ? v / r_kv : v % a->Hk;
        kern_gdn g = {n,
                      0,
                      a->Dk,
                      a->Dv,
                      a->cv + (size_t)kh * a->Dk,
                      a->cv + (size_t)(a->Hk + kh) * a->Dk,
                      (size_t)a->conv_dim,
                      a->cv + (size_t)2 * a->Hk * a->Dk + (size_t)v * a->Dv,
                      (size_t)a->conv_dim,
                      in + a->conv_dim + a->Hv + v,
                      in + a->conv_dim + v,
                      row,
                      1.0f / sqrtf((float)a->Dk),
                      st + a->conv_floats + (size_t)v * head,
                      a->o,
                      (size_t)a->Dv,
                      NULL};
        sops->gdn_step(&g);
    }
}
