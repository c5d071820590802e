/*
 * What the vision tests share (test_vision, test_vision_qwen): a model pack
 * of a text model and its projector in a scratch directory, an LLM engine
 * that loaded it, and the text a request's pieces make.
 */
#ifndef KILN_TEST_VISION_PACK_H
#define KILN_TEST_VISION_PACK_H

#include "kiln.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The pieces of a request, joined (cut at the buffer's size). */
typedef struct text_buf {
    char s[4096];
    size_t n;
} text_buf;

/* kiln_engine_generate_request.on_token into a text_buf (user). */
static int on_piece(const char *piece, size_t len, int32_t token, void *user) {
    (void)token;
    text_buf *t = user;
    if (t->n + len < sizeof t->s) {
        memcpy(t->s + t->n, piece, len);
        t->n += len;
        t->s[t->n] = 0;
    }
    return 0;
}

static int copy_file(const char *from, const char *to) {
    size_t len = 0;
    char *b = t_read_file(from, &len);
    FILE *f = b ? fopen(to, "wb") : NULL;
    int ok = f && fwrite(b, 1, len, f) == len;
    if (f) ok = fclose(f) == 0 && ok;
    free(b);
    return ok ? 0 : -1;
}

/* A pack directory: model.gguf (a copy of text), mmproj.gguf (of mmproj)
 * and the manifest naming their roles. */
typedef struct vision_pack {
    char tmpl[64];
    char *dir; /* NULL: not made */
    char model[512], proj[512], man[512];
} vision_pack;

/* Makes the pack under a mkdtemp of tmpl ("/tmp/..._XXXXXX"); 0 when made. */
static int vision_pack_make(vision_pack *p, const char *tmpl, const char *text, const char *mmproj) {
    memset(p, 0, sizeof *p);
    snprintf(p->tmpl, sizeof p->tmpl, "%s", tmpl);
    p->dir = mkdtemp(p->tmpl);
    if (!p->dir) return -1;
    snprintf(p->model, sizeof p->model, "%s/model.gguf", p->dir);
    snprintf(p->proj, sizeof p->proj, "%s/mmproj.gguf", p->dir);
    snprintf(p->man, sizeof p->man, "%s/manifest.json", p->dir);
    if (copy_file(text, p->model) || copy_file(mmproj, p->proj)) return -1;
    FILE *f = fopen(p->man, "w");
    if (!f) return -1;
    fputs("{\"artifacts\": [{\"role\": \"model\", \"path\": \"model.gguf\"}, "
          "{\"role\": \"mmproj\", \"path\": \"mmproj.gguf\"}]}\n",
          f);
    return fclose(f) ? -1 : 0;
}

static void vision_pack_remove(const vision_pack *p) {
    if (!p->dir) return;
    unlink(p->model);
    unlink(p->proj);
    unlink(p->man);
    rmdir(p->dir);
}

/* An LLM engine (contexts of 256 tokens, 2 sequences, 2 threads, in *cp)
 * that loaded path; NULL when it did not. */
static kiln_engine *vision_engine(const char *path, kiln_context_params *cp) {
    kiln_engine *e = NULL;
    if (kiln_engine_create(KILN_ENGINE_LLM, KILN_ENGINE_BACKEND_AUTO, &e) != KILN_OK) return NULL;
    *cp = kiln_context_default_params();
    cp->n_ctx = 256;
    cp->n_seq_max = 2;
    cp->n_threads = 2;
    kiln_engine_set_context_params(e, cp);
    if (kiln_engine_start(e) != KILN_OK || kiln_engine_load(e, path, NULL) != KILN_OK ||
        kiln_engine_wait_idle(e, 60000) != KILN_OK) {
        kiln_engine_free(e);
        return NULL;
    }
    return e;
}

#endif
