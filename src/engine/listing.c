/* The registry listing: every family, its built-in models and the store's
 * models it serves, each with its state in the store.  A store model's
 * family comes from its manifest: the family it records (a reranker or a
 * decision pack, told apart when it was installed), else the architecture
 * (whisper: speech to text; image: an image pack; an encoder: embeddings;
 * another architecture kiln runs: text generation), so no file is opened,
 * hashed or loaded.  A pack installed before the family was recorded is
 * listed by its architecture alone. */
#include "engine/engine.h"

#include "base/base.h"
#include "model/model.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int engine_store_family(const char *arch, const char *family, char *why, size_t cap) {
    if (!arch || !*arch) {
        snprintf(why, cap, "the manifest names no architecture");
        return -1;
    }
    if (!strcmp(arch, "whisper")) return KILN_ENGINE_STT;
    if (!strcmp(arch, "image")) return KILN_ENGINE_IMAGE; /* an image pack (pack.json and its artifacts) */
    const model_arch *a = model_arch_find(arch);
    if (!a) {
        snprintf(why, cap, "architecture '%s' is not one kiln runs (it runs %s)", arch, model_arch_list());
        return -1;
    }
    if (family && !strcmp(family, "rerank")) return KILN_ENGINE_RERANK;
    if (family && !strcmp(family, "decision")) return KILN_ENGINE_DECISION;
    return a->encoder ? KILN_ENGINE_EMBEDDING : KILN_ENGINE_LLM;
}

/* The state of one store entry (kiln_store_list's object) as the listing
 * reports it. */
static json_t *entry(json_t *e, int builtin) {
    const char *st = json_string_value(json_object_get(e, "state"));
    json_t *m = json_object();
    json_object_set(m, "name", json_object_get(e, "name"));
    json_object_set_new(m, "builtin", json_boolean(builtin));
    if (st && !strcmp(st, "missing")) {
        json_object_set_new(m, "state", json_string("files-missing"));
        json_t *f = json_object_get(e, "missing");
        json_object_set_new(m, "file", f ? json_incref(f) : json_string(""));
    } else if (st && !strcmp(st, "damaged")) {
        json_object_set_new(m, "state", json_string("damaged"));
        json_object_set(m, "reason", json_object_get(e, "damaged"));
    } else {
        json_object_set_new(m, "state", json_string("installed"));
        if (st && !strcmp(st, "changed")) json_object_set_new(m, "verify", json_string("at next load"));
    }
    const char *keys[] = {"id", "size", "arch", "quantization"};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(e, keys[i]);
        if (v) json_object_set(m, keys[i], v);
    }
    return m;
}

static int by_name(const void *a, const void *b) {
    const char *x = json_string_value(json_object_get(*(json_t *const *)a, "name"));
    const char *y = json_string_value(json_object_get(*(json_t *const *)b, "name"));
    return strcmp(x ? x : "", y ? y : "");
}

kiln_status kiln_engine_listing(kiln_store *s, char **json_out) {
    *json_out = NULL;
    json_t *installed = NULL;
    if (s) {
        char *text = NULL;
        kiln_status st = kiln_store_list(s, &text);
        if (st != KILN_OK) return st;
        installed = json_loads(text, 0, NULL);
        kiln_store_free_string(text);
    }
    if (!installed) installed = json_array();
    json_t *out = json_array();
    size_t nf = (size_t)kiln_engine_family_count();
    for (size_t f = 0; f < nf; f++) {
        const kiln_engine_family *fam = kiln_engine_family_at((int)f);
        json_t *o = json_object();
        json_object_set_new(o, "key", json_string(fam->key));
        json_object_set_new(o, "display_name", json_string(fam->display_name));
        json_t *tasks = json_array();
        for (const char *const *t = fam->tasks; t && *t; t++) json_array_append_new(tasks, json_string(*t));
        json_object_set_new(o, "tasks", tasks);
        json_t *be = json_array();
        if (fam->backends & (1u << KILN_ENGINE_BACKEND_AUTO)) json_array_append_new(be, json_string("auto"));
        if (fam->backends & (1u << KILN_ENGINE_BACKEND_CPU)) json_array_append_new(be, json_string("cpu"));
        if (fam->backends & (1u << KILN_ENGINE_BACKEND_CUDA)) json_array_append_new(be, json_string("cuda"));
        json_object_set_new(o, "backends", be);
        json_object_set_new(o, "available", json_boolean(fam->available));
        json_t *models = json_array();
        int n_builtin = 0;
        /* built-ins first, in their table's order */
        for (int i = 0; i < kiln_builtin_count(); i++) {
            const kiln_builtin_model *b = kiln_builtin_at(i);
            if (strcmp(b->family, fam->key)) continue;
            n_builtin++;
            json_t *have = NULL;
            size_t k;
            json_t *e;
            json_array_foreach(installed, k, e) {
                const char *name = json_string_value(json_object_get(e, "name"));
                if (name && !strcmp(name, b->name)) have = e;
            }
            json_t *m;
            if (have) {
                m = entry(have, 1);
            } else {
                m = json_object();
                json_object_set_new(m, "name", json_string(b->name));
                json_object_set_new(m, "builtin", json_true());
                json_object_set_new(m, "state", json_string("not-downloaded"));
            }
            json_object_set_new(m, "file", json_string(b->file));
            json_object_set_new(m, "published_size", json_string(b->size));
            json_array_append_new(models, m);
        }
        /* then the store's models this family serves, by name */
        json_t *others = json_array();
        size_t k;
        json_t *e;
        json_array_foreach(installed, k, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (!name || kiln_builtin_find(name)) continue;
            char why[512];
            int fid = engine_store_family(json_string_value(json_object_get(e, "arch")),
                                          json_string_value(json_object_get(e, "family")), why, sizeof why);
            /* an architecture no family serves is listed under the
             * generator, the family its GGUF would have gone to */
            if (fid < 0 ? fam->id != KILN_ENGINE_LLM : fid != (int)fam->id) continue;
            json_t *m = entry(e, 0);
            if (fid < 0) {
                json_object_set_new(m, "state", json_string("not-supported"));
                json_object_set_new(m, "reason", json_string(why));
            }
            json_array_append_new(others, m);
        }
        size_t n = json_array_size(others);
        json_t **v = n ? malloc(n * sizeof *v) : NULL;
        for (size_t i = 0; v && i < n; i++) v[i] = json_array_get(others, i);
        if (v) qsort(v, n, sizeof *v, by_name);
        for (size_t i = 0; v && i < n; i++) json_array_append(models, v[i]);
        free(v);
        json_decref(others);
        json_object_set_new(o, "builtin_count", json_integer(n_builtin));
        json_object_set_new(o, "models", models);
        json_array_append_new(out, o);
    }
    json_decref(installed);
    *json_out = json_dumps(out, JSON_INDENT(2));
    json_decref(out);
    return *json_out ? KILN_OK : base_fail(KILN_ERR_NOMEM, "out of memory");
}
