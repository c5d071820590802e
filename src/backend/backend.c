/* The backends this build has, and a context's backend state (backend.h). */
#include "backend/cpu.h"
#include "backend/cuda.h"

#include <string.h>

const kbe_backend *kbe_get(int kind) {
    if (kind == KBE_CPU) return &kbe_cpu_backend;
    if (kind == KBE_CUDA) return kbe_cuda_get(NULL, 0);
    return NULL;
}

int kbe_ctx_init(kbe_ctx *X, const kbe_backend *be, const kbe_ctx_params *p) {
    memset(X, 0, sizeof *X);
    X->be = be;
    X->ops = be->ops;
    X->pool = p->pool;
    X->n_head = p->n_head;
    if (p->kv) X->kv = *p->kv;
    return be->ctx_init(X, p);
}

void kbe_ctx_free(kbe_ctx *X) {
    if (X->be) X->be->ctx_free(X);
    X->dev = NULL;
}
