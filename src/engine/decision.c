/* The decision family: a resident kiln_decider (a decision pack).  The
 * check reads the header only: a file without a decision configuration is
 * not compatible.  A request frames every question first (no model runs),
 * then runs one forward run at a time, yielding before each.  Measure runs
 * no forward pass: it takes the gate only to see the resident pack. */
#include "engine/engine.h"

#include "base/base.h"
#include "model/model.h"

#include <stdio.h>

static kiln_status dec_check(void *user, const char *path) {
    kiln_status st = engine_gguf_check(path, 0);
    if (st != KILN_OK) return st;
    gguf_file *f;
    if ((st = gguf_open(path, &f))) return st;
    st = gguf_find(f, "kiln.decision.config")
             ? KILN_OK
             : base_fail(KILN_ERR_FORMAT, "%s: not a decision pack (no kiln.decision.config in the metadata)", path);
    gguf_close(f);
    return st;
}

static kiln_status dec_load(void *user, const char *path, kiln_engine_backend backend, engine_run *r, void **model) {
    kiln_decider *d = NULL;
    kiln_decider_params p = kiln_decider_default_params();
    p.n_batch = 512; /* a short run bounds an urgent request's wait */
    kiln_status st = kiln_decider_new(path, &p, &d);
    *model = d;
    return st;
}

static kiln_status dec_unload(void *user, void *model) {
    kiln_decider_free(model);
    return KILN_OK;
}

typedef struct dec_call {
    const kiln_decide_request *req;
    kiln_decide_job *job;
    int32_t *state_tokens, *budgets;
} dec_call;

static kiln_status dec_run(void *user, void *model, int task, void *req, engine_run *r) {
    dec_call *call = req;
    if (task == ENGINE_TASK_MEASURE) return kiln_decide_measure(model, call->req, call->state_tokens, call->budgets);
    if (task != ENGINE_TASK_DECIDE) return base_fail(KILN_ERR_UNSUPPORTED, "the decision family only decides");
    kiln_decide_job *j = NULL;
    kiln_status st = kiln_decide_begin(model, call->req, &j);
    for (int32_t left = 1; st == KILN_OK && left > 0;) {
        st = engine_yield(r);
        if (st == KILN_OK) st = kiln_decide_next(j, &left);
    }
    if (st != KILN_OK) {
        kiln_decide_job_free(j);
        return st;
    }
    call->job = j;
    return KILN_OK;
}

const engine_ops engine_decision_ops = {.check = dec_check, .load = dec_load, .unload = dec_unload, .run = dec_run};

kiln_status kiln_engine_decide(kiln_engine *e, const kiln_decide_request *r, kiln_engine_cancel *cancel,
                               kiln_decide_job **out) {
    if (!out) return base_fail(KILN_ERR_INVALID_ARG, "no output job");
    *out = NULL;
    if (!e || !r) return base_fail(KILN_ERR_INVALID_ARG, "no engine or request");
    dec_call call = {r, NULL, NULL, NULL};
    kiln_status st = engine_request(e, ENGINE_TASK_DECIDE, &call, 0, cancel);
    *out = call.job;
    return st;
}

kiln_status kiln_engine_decide_measure(kiln_engine *e, const kiln_decide_request *r, int32_t *state_tokens,
                                       int32_t *budgets) {
    if (!e || !r || !state_tokens) return base_fail(KILN_ERR_INVALID_ARG, "no engine, request or output");
    dec_call call = {r, NULL, state_tokens, budgets};
    return engine_request(e, ENGINE_TASK_MEASURE, &call, 1, NULL);
}
