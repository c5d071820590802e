/* What every part of a context shares: its error (model_fail) and the CUDA
 * backend's activation estimate that the load and kiln_context_new keep
 * room for (context.h). */
#include "model/context.h"

#include "base/base.h"

#include <stdarg.h>
#include <stdio.h>

kiln_status model_fail(kiln_context *c, kiln_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    base_vfail(st, fmt, ap);
    va_end(ap);
    if (c) snprintf(c->err, sizeof c->err, "%s", kiln_last_error());
    return st;
}

uint64_t model_cuda_act_bytes(const kiln_model *m, int n_batch, int n_seq) {
    const model_hparams *hp = &m->hp;
    const uint64_t B = (uint64_t)(n_batch > 0 ? n_batch : 512), S = (uint64_t)(n_seq > 0 ? n_seq : 1);
    const uint64_t q = (uint64_t)hp->n_head * (uint64_t)(hp->hd_k > hp->hd_v ? hp->hd_k : hp->hd_v);
    const uint64_t ff = (uint64_t)(hp->n_ff > 0 ? hp->n_ff : 4 * hp->n_embd);
    /* per token: the residual stream and its norm, q/k/v/attention, the
     * FFN's gate and up; the output rows and logits of every token of a
     * batch, which may all ask for them (doubled: growing buffers keep
     * twice what they need), or of one token a sequence if more */
    const uint64_t rows = B * 4 * (6 * (uint64_t)hp->n_embd + 4 * q + 3 * ff);
    const uint64_t out = 2 * (B > S ? B : S) * 4 * ((uint64_t)hp->n_vocab + (uint64_t)hp->n_embd);
    return rows + out + MODEL_CUDA_HEADROOM;
}
