/*
 * The image engine family: registry entry, load of the tiny pack through
 * the lifecycle, a request of two images (seeds 42 and 43) with progress
 * and yields, the first equal to the PyTorch reference's pixels within 2
 * levels, an unsupported size, cancellation from a token between steps,
 * and a load of something that is not a pack failing on the call.
 */
#include "kiln.h"
#include "testutil.h"

#include <png.h>
#include <stdlib.h>
#include <string.h>

#define TINY "data/image/tiny"

typedef struct prog {
    int calls, last_image;
    kiln_engine_cancel *fire_at_step2;
} prog;

static int on_progress(int32_t image, int32_t step, int32_t steps, void *user) {
    prog *p = user;
    p->calls++;
    p->last_image = image;
    if (p->fire_at_step2 && step == 2) kiln_engine_cancel_fire(p->fire_at_step2);
    return 0;
}

int main(void) {
    const kiln_engine_family *fam = kiln_engine_family_find("image");
    CHECK(fam && fam->id == KILN_ENGINE_IMAGE && fam->available && !strcmp(fam->tasks[0], "image"));
    kiln_engine *e;
    CHECK(kiln_engine_create(KILN_ENGINE_IMAGE, KILN_ENGINE_BACKEND_CPU, &e) == KILN_OK);
    CHECK(kiln_engine_start(e) == KILN_OK);
    CHECK(kiln_engine_load(e, "data/image/ckpt/good.pt", NULL) != KILN_OK && strstr(kiln_last_error(), "pack"));
    CHECK(kiln_engine_load(e, TINY "/pack.json", NULL) == KILN_OK);
    CHECK(kiln_engine_wait_idle(e, 60000) == KILN_OK);
    kiln_engine_observation ob;
    CHECK(kiln_engine_observe(e, &ob) == KILN_OK && ob.state == KILN_ENGINE_LOADED);

    kiln_image_request r = kiln_image_request_default();
    r.prompt = "a red circle on a blue background";
    r.steps = 4;
    r.cfg = 4.5f;
    r.n = 2;
    prog pg = {0, -1, NULL};
    r.progress = on_progress;
    r.user = &pg;
    kiln_image_result *res = NULL;
    kiln_status st = kiln_engine_image(e, &r, &res);
    CHECKF(st == KILN_OK, "%s", kiln_last_error());
    CHECK(pg.calls == 2 * 5 && pg.last_image == 1);
    if (res) {
        CHECK(res->n == 2 && res->width == 256 && res->height == 256);
        CHECK(res->images[0].seed == 42 && res->images[1].seed == 43);
        CHECK(res->images[0].len != res->images[1].len ||
              memcmp(res->images[0].png, res->images[1].png, res->images[0].len));
        int w, h;
        uint8_t *px = t_png_pixels(res->images[0].png, res->images[0].len, &w, &h);
        size_t rl;
        uint8_t *want = (uint8_t *)t_read_file(TINY "/ref_image.rgb", &rl);
        int mx = 255;
        if (px && want && rl == (size_t)w * h * 3) {
            mx = 0;
            for (size_t i = 0; i < rl; i++) {
                int d = abs((int)px[i] - want[i]);
                if (d > mx) mx = d;
            }
        }
        CHECKF(mx <= 2, "max pixel error %d", mx);
        free(px);
        free(want);
    }
    kiln_image_result_free(res);

    r.n = 1;
    r.width = r.height = 512;
    CHECK(kiln_engine_image(e, &r, &res) == KILN_ERR_UNSUPPORTED && !res && strstr(kiln_last_error(), "512x512"));
    r.width = r.height = 0;
    r.n = 0;
    CHECK(kiln_engine_image(e, &r, &res) == KILN_ERR_INVALID_ARG);
    r.n = 1;
    /* a token fired during step 2 cancels at the next yield */
    kiln_engine_cancel *c = kiln_engine_cancel_new();
    pg = (prog){0, -1, c};
    r.cancel = c;
    CHECK(kiln_engine_image(e, &r, &res) == KILN_ERR_CANCELLED && !res);
    CHECK(pg.calls == 3);
    kiln_engine_cancel_free(c);

    CHECK(kiln_engine_unload(e, NULL) == KILN_OK);
    CHECK(kiln_engine_wait_idle(e, 60000) == KILN_OK);
    r.cancel = NULL;
    CHECK(kiln_engine_image(e, &r, &res) == KILN_ERR_STATE);
    CHECK(kiln_engine_stop(e, NULL) == KILN_OK);
    kiln_engine_free(e);
    return t_done();
}
