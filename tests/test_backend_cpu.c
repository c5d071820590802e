/* The compute seam (src/backend/backend.h): the backends a build has, and
 * the CPU backend's row-wise ops against the kernels they stand for, on the
 * calling thread (few rows) and on the pool (many), bit for bit. */
#include "kiln.h"

#include "backend/backend.h"
#include "kernels/ssm.h"
#include "quant/quant.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

enum { N = 9, DIM = 67, HEADS = 3, HD = 16 };

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) x[i] = frand(&seed);
}

int main(void) {
    const backend_backend *cpu = backend_get(BACKEND_CPU);
    CHECK(cpu != NULL && cpu->kind == BACKEND_CPU && cpu->host_mem && !strcmp(cpu->name, "cpu"));
    CHECK(backend_get(0) == NULL); /* CUDA (2) only with a driver: test_backend_cuda */
    CHECK(backend_get(2) == NULL || backend_get(2)->kind == BACKEND_CUDA);
    /* an engine asked for CUDA without a GPU (no driver here): one clear
     * error, no engine; a family without CUDA kernels refuses it too */
    kiln_engine *e = NULL;
    if (!backend_get(2)) {
        CHECK(kiln_engine_create(KILN_ENGINE_LLM, KILN_ENGINE_BACKEND_CUDA, &e) == KILN_ERR_UNSUPPORTED && !e);
        CHECK(strstr(kiln_last_error(), "CUDA") != NULL);
    }
    CHECK(kiln_engine_create(KILN_ENGINE_STT, KILN_ENGINE_BACKEND_CUDA, &e) == KILN_ERR_UNSUPPORTED && !e);
    if (!cpu) return t_done();
    quant_init();
    const kern_ops *k = kern_ops_best();
    thread_pool *pool = thread_pool_new(3);
    backend_ctx X;
    const backend_ctx_params p = {pool, 0, 0, NULL};
    CHECK(backend_ctx_init(&X, cpu, &p) == 0);
    const backend_ops *o = X.ops;
    float *x = o->alloc(&X, N * DIM * sizeof(float)), *y = o->alloc(&X, N * DIM * sizeof(float));
    float *want = malloc(N * DIM * sizeof(float)), *want2 = malloc(N * DIM * sizeof(float));
    float *w = malloc(DIM * sizeof(float)), *out = malloc(N * DIM * sizeof(float));
    fill(w, DIM, 7);
    for (int n = 1; n <= N; n += N - 1) { /* 1: inline; N: on the pool */
        /* rmsnorm */
        fill(x, (size_t)n * DIM, 1);
        for (int i = 0; i < n; i++) k->rmsnorm(want + i * DIM, x + i * DIM, w, DIM, 1e-6f);
        o->rmsnorm(&X, out, x, w, n, DIM, 1e-6f);
        CHECK(!memcmp(out, want, (size_t)n * DIM * sizeof(float)));
        /* add, then the fused add + norm */
        fill(y, (size_t)n * DIM, 2);
        memcpy(want, y, (size_t)n * DIM * sizeof(float));
        for (int i = 0; i < n; i++) {
            k->add(want + i * DIM, x + i * DIM, DIM);
            k->rmsnorm(want2 + i * DIM, want + i * DIM, w, DIM, 1e-5f);
        }
        o->add_rmsnorm(&X, y, x, out, w, n, DIM, 1e-5f);
        CHECK(!memcmp(y, want, (size_t)n * DIM * sizeof(float)) &&
              !memcmp(out, want2, (size_t)n * DIM * sizeof(float)));
        /* swiglu */
        memcpy(want, y, (size_t)n * DIM * sizeof(float));
        for (int i = 0; i < n; i++) k->swiglu(want + i * DIM, x + i * DIM, DIM);
        o->swiglu(&X, y, x, n, DIM);
        CHECK(!memcmp(y, want, (size_t)n * DIM * sizeof(float)));
        /* the attention output gate: att *= sigmoid(the second half of each head of qg) */
        float *qg = malloc((size_t)n * HEADS * 2 * HD * sizeof(float)), *att = malloc((size_t)n * HEADS * HD * 4);
        fill(qg, (size_t)n * HEADS * 2 * HD, 3);
        fill(att, (size_t)n * HEADS * HD, 4);
        for (int i = 0; i < n; i++)
            for (int h = 0; h < HEADS; h++)
                for (int d = 0; d < HD; d++)
                    want[(i * HEADS + h) * HD + d] =
                        att[(i * HEADS + h) * HD + d] * kern_sigmoid(qg[(i * HEADS + h) * 2 * HD + HD + d]);
        o->attn_gate(&X, att, qg, n, HEADS, HD);
        CHECK(!memcmp(att, want, (size_t)n * HEADS * HD * sizeof(float)));
        free(qg);
        free(att);
    }
    /* scatter_rows: a permutation of rows; argmax: the first of equal maxima */
    int32_t perm[N], am[N];
    for (int i = 0; i < N; i++) perm[i] = (i * 4 + 1) % N;
    fill(x, N * DIM, 5);
    o->scatter_rows(&X, y, x, perm, N, DIM);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= !memcmp(y + perm[i] * DIM, x + i * DIM, DIM * sizeof(float));
    CHECK(ok);
    for (int i = 0; i < N; i++) {
        x[i * DIM + (i * 7) % DIM] = 5.0f;
        x[i * DIM + (i * 7 + 3) % DIM] = 5.0f;
    }
    o->argmax(&X, x, N, DIM, am);
    for (int i = 0; i < N; i++) {
        const int a = (i * 7) % DIM, b = (i * 7 + 3) % DIM;
        CHECK(am[i] == (a < b ? a : b));
    }
    o->free(&X, x);
    o->free(&X, y);
    free(want);
    free(want2);
    free(w);
    free(out);
    backend_ctx_free(&X);
    thread_pool_free(pool);
    return t_done();
}
