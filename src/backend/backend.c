/* The backends this build has, and a context's backend state (backend.h). */
#include "backend/cpu.h"
#include "backend/cuda.h"

#include <string.h>

const backend_backend *backend_get(int kind) {
    if (kind == BACKEND_CPU) return &backend_cpu_backend;
    if (kind == BACKEND_CUDA) return backend_cuda_get(NULL, 0);
    return NULL;
}

int backend_ctx_init(backend_ctx *X, const backend_backend *be, const backend_ctx_params *p) {
    memset(X, 0, sizeof *X);
    X->be = be;
    X->ops = be->ops;
    X->pool = p->pool;
    X->n_head = p->n_head;
    if (p->kv) X->kv = *p->kv;
    return be->ctx_init(X, p);
}

void backend_ctx_free(backend_ctx *X) {
    if (X->be) X->be->ctx_free(X);
    X->dev = NULL;
}
