/* The image family: a resident image pipeline (src/image).  A request
 * yields before every sampling step of every image, so an urgent request
 * waits for at most one DiT evaluation, and cancellation takes effect
 * between steps. */
#include "engine/engine.h"

#include "image/image.h"
#include "base/base.h"

#include <stdlib.h>
#include <string.h>

static kiln_status img_check(void *user, const char *path) {
    if (!image_is_pack(path))
        return base_fail(KILN_ERR_FORMAT, "%s: not an image pack (a directory with pack.json)", path);
    image_files f;
    image_config c;
    char err[1024];
    if (image_pack_read(path, 0, &f, &c, err, sizeof err)) return base_fail(KILN_ERR_FORMAT, "%s", err);
    return KILN_OK;
}

static kiln_status img_load(void *user, const char *path, kiln_engine_backend backend, engine_run *r, void **model) {
    image_files f;
    image_config c;
    char err[1024];
    *model = NULL;
    if (image_pack_read(path, 1, &f, &c, err, sizeof err)) return base_fail(KILN_ERR_FORMAT, "%s", err);
    if (engine_cancelled(r)) return base_fail(KILN_ERR_CANCELLED, "load cancelled");
    image_pipeline *p;
    if (image_pipeline_open(&f, &c, 0, &p, err, sizeof err)) return base_fail(KILN_ERR_FORMAT, "%s", err);
    *model = p;
    return KILN_OK;
}

static kiln_status img_unload(void *user, void *model) {
    image_pipeline_free(model);
    return KILN_OK;
}

typedef struct img_call {
    const kiln_image_request *req;
    kiln_image_result *res;
    engine_run *run;
    int32_t image;
    kiln_status yield_st;
} img_call;

static int on_step(void *user, int step, int steps) {
    img_call *c = user;
    if (step < steps && (c->yield_st = engine_yield(c->run)) != KILN_OK) return 1;
    return c->req->progress && c->req->progress(c->image, step, steps, c->req->user);
}

static kiln_status img_run(void *user, void *model, int task, void *req, engine_run *r) {
    if (task != ENGINE_TASK_IMAGE) return base_fail(KILN_ERR_UNSUPPORTED, "the image family only makes images");
    img_call *c = req;
    const kiln_image_request *q = c->req;
    image_pipeline *p = model;
    const int w = image_pipeline_width(p), h = image_pipeline_height(p);
    if ((q->width && q->width != w) || (q->height && q->height != h))
        return base_fail(KILN_ERR_UNSUPPORTED, "size %dx%d is not supported (this pack makes %dx%d)", q->width,
                         q->height, w, h);
    kiln_image_result *res = calloc(1, sizeof *res);
    if (res) res->images = calloc((size_t)q->n, sizeof *res->images);
    if (!res || !res->images) {
        free(res);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    res->width = w;
    res->height = h;
    c->run = r;
    char err[512];
    kiln_status st = KILN_OK;
    for (int32_t i = 0; i < q->n && st == KILN_OK; i++) {
        c->image = i;
        c->yield_st = KILN_OK;
        image_request ir = {q->prompt, q->steps, q->cfg, q->seed + (uint64_t)i, on_step, c};
        kiln_image *im = &res->images[i];
        int rc = image_generate(p, &ir, &im->png, &im->len, err, sizeof err);
        im->seed = ir.seed;
        if (rc == IMAGE_OK)
            res->n++;
        else if (rc == IMAGE_CANCELLED)
            st = c->yield_st != KILN_OK ? c->yield_st : base_fail(KILN_ERR_CANCELLED, "cancelled");
        else
            st = base_fail(rc == IMAGE_TOO_LONG ? KILN_ERR_CONTEXT_FULL : KILN_ERR_INVALID_ARG, "%s", err);
    }
    if (st != KILN_OK) {
        for (int32_t i = 0; i < q->n; i++) free(res->images[i].png);
        free(res->images);
        free(res);
        return st;
    }
    c->res = res;
    return KILN_OK;
}

const engine_ops engine_image_ops = {.check = img_check, .load = img_load, .unload = img_unload, .run = img_run};

kiln_image_request kiln_image_request_default(void) {
    kiln_image_request r;
    memset(&r, 0, sizeof r);
    r.cfg = -1.0f;
    r.seed = 42;
    r.n = 1;
    return r;
}

kiln_status kiln_engine_image(kiln_engine *e, const kiln_image_request *r, kiln_image_result **out) {
    if (!out) return base_fail(KILN_ERR_INVALID_ARG, "no output");
    *out = NULL;
    if (!e || !r || !r->prompt) return base_fail(KILN_ERR_INVALID_ARG, "no engine, request or prompt");
    if (r->n < 1 || r->n > 16) return base_fail(KILN_ERR_INVALID_ARG, "n must be 1..16, not %d", r->n);
    if (r->steps < 0 || r->steps > IMAGE_MAX_STEPS)
        return base_fail(KILN_ERR_INVALID_ARG, "steps must be 0..%d", IMAGE_MAX_STEPS);
    img_call call = {r, NULL, NULL, 0, KILN_OK};
    kiln_status st = engine_request(e, ENGINE_TASK_IMAGE, &call, r->urgent, r->cancel);
    *out = call.res;
    return st;
}

void kiln_image_result_free(kiln_image_result *r) {
    if (!r) return;
    if (r->images)
        for (int32_t i = 0; i < r->n; i++) free(r->images[i].png);
    free(r->images);
    free(r);
}
