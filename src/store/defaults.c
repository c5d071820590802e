/* A pack's defaults: what an Ollama model carries beside its GGUF.
 *
 *   role template  the chat template override (Go text/template syntax,
 *                  as Ollama writes it: "template_format": "go")
 *   role system    the default system prompt
 *   role params    default options, a JSON object of Ollama's option
 *                  names (temperature, top_k, num_ctx, stop, ...)
 *   role license   license texts, in manifest order
 *   role messages  an initial conversation, a JSON array
 *
 * They are artifacts like the model: hashed into the manifest, verified
 * with the pack, read-only.  Each is at most STORE_TEXT_MAX bytes. */
#include "store/store.h"

#include "base/base.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int is_text_role(const char *role) {
    return !strcmp(role, "template") || !strcmp(role, "system") || !strcmp(role, "params") ||
           !strcmp(role, "license") || !strcmp(role, "messages");
}

/* The value an artifact's text contributes, or NULL (message in why) when
 * it is not what its role needs. */
static json_t *text_value(const char *role, const char *txt, size_t len, char *why, size_t cap) {
    if (memchr(txt, 0, len)) {
        snprintf(why, cap, "the %s holds a NUL byte", role);
        return NULL;
    }
    if (!strcmp(role, "params") || !strcmp(role, "messages")) {
        json_error_t je;
        json_t *j = json_loadb(txt, len, 0, &je);
        if (!j || (!strcmp(role, "params") ? !json_is_object(j) : !json_is_array(j))) {
            json_decref(j);
            snprintf(why, cap, "the %s is not a JSON %s", role, !strcmp(role, "params") ? "object" : "array");
            return NULL;
        }
        return j;
    }
    json_t *s = json_stringn(txt, len);
    if (!s) snprintf(why, cap, "the %s is not UTF-8 text", role);
    return s;
}

kiln_status store_check_text(const char *path, const char *role, const char *file) {
    if (!is_text_role(role)) return KILN_OK;
    size_t len = 0;
    char *txt = store_read_text(path, STORE_TEXT_MAX, &len);
    if (!txt)
        return base_fail(KILN_ERR_FORMAT, "artifact %s: cannot read it as text of at most %u bytes", file,
                         STORE_TEXT_MAX);
    char why[128];
    json_t *v = text_value(role, txt, len, why, sizeof why);
    free(txt);
    if (!v) return base_fail(KILN_ERR_FORMAT, "artifact %s: %s", file, why);
    json_decref(v);
    return KILN_OK;
}

json_t *store_pack_defaults(const char *pack_dir, json_t *man) {
    json_t *d = json_object();
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(man, "artifacts"), i, a) {
        const char *role = json_string_value(json_object_get(a, "role"));
        const char *file = json_string_value(json_object_get(a, "path"));
        if (!role || !file || !is_text_role(role) || !store_file_ok(file)) continue;
        char p[PATH_MAX];
        if (store_path(p, "%s/%s", pack_dir, file)) continue;
        size_t len = 0;
        char *txt = store_read_text(p, STORE_TEXT_MAX, &len);
        char why[128];
        json_t *v = txt ? text_value(role, txt, len, why, sizeof why) : NULL;
        free(txt);
        if (!v) continue;
        if (!strcmp(role, "license")) {
            json_t *arr = json_object_get(d, "license");
            if (!arr) json_object_set_new(d, "license", arr = json_array());
            json_array_append_new(arr, v);
        } else if (!strcmp(role, "params")) {
            json_object_set_new(d, "options", v);
        } else {
            json_object_set_new(d, role, v);
            if (!strcmp(role, "template")) json_object_set_new(d, "template_format", json_string("go"));
        }
    }
    return d;
}

/* Writes one text artifact of role into dir as file and lists it. */
static kiln_status add_text(json_t *arts, const char *dir, const char *role, const char *file, const char *txt) {
    char p[PATH_MAX], hex[STORE_ID_LEN + 1];
    const size_t n = strlen(txt);
    if (n > STORE_TEXT_MAX) return base_fail(KILN_ERR_INVALID_ARG, "the %s is over %u bytes", role, STORE_TEXT_MAX);
    if (store_path(p, "%s/%s", dir, file) || store_write_atomic(p, txt, n, 0444) != 0)
        return base_fail(KILN_ERR_IO, "cannot write the %s: %s", role, strerror(errno));
    store_sha256_hex(txt, n, hex);
    json_t *a = json_pack("{s:s,s:s,s:I,s:s,s:s}", "role", role, "path", file, "length", (json_int_t)n, "sha256", hex,
                          "source", "saved");
    if (!a || json_array_append_new(arts, a)) return base_fail(KILN_ERR_NOMEM, "out of memory");
    return KILN_OK;
}

kiln_status kiln_store_save_as(kiln_store *s, const char *src, const char *name, const char *system,
                               const char *options_json, char *id_out) {
    static atomic_uint seq;
    if (!s || !src || !name) return base_fail(KILN_ERR_INVALID_ARG, "no store, model or name");
    char norm[STORE_NAME_MAX + 1];
    kiln_status st = store_name_norm(name, norm);
    if (st) return st;
    json_t *opts = NULL;
    if (options_json) {
        json_error_t je;
        opts = json_loads(options_json, 0, &je);
        if (!json_is_object(opts)) {
            json_decref(opts);
            return base_fail(KILN_ERR_INVALID_ARG, "the options are not a JSON object");
        }
    }
    char *txt = NULL;
    if ((st = kiln_store_info(s, src, &txt))) {
        json_decref(opts);
        return st;
    }
    json_t *inf = json_loads(txt, 0, NULL);
    kiln_store_free_string(txt);
    json_t *man = json_object_get(inf, "manifest");
    const char *id = json_string_value(json_object_get(inf, "id"));
    char key[96], dir[PATH_MAX], to[PATH_MAX];
    snprintf(key, sizeof key, "save-%ld-%u", (long)getpid(), atomic_fetch_add(&seq, 1));
    if (!man || !id) st = base_fail(KILN_ERR_FORMAT, "%s: the store's record is unreadable", src);
    if (!st) st = store_staging(s, key, dir);
    if (st) {
        json_decref(inf);
        json_decref(opts);
        return st;
    }
    /* the source's artifacts are the same files (hard links inside the store,
     * read-only: nothing is copied); its system prompt and options give way
     * to the ones given */
    json_t *arts = json_array();
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(man, "artifacts"), i, a) {
        const char *role = json_string_value(json_object_get(a, "role"));
        const char *file = json_string_value(json_object_get(a, "path"));
        if (!role || !file || !store_file_ok(file)) continue;
        if ((system && !strcmp(role, "system")) || (opts && !strcmp(role, "params"))) continue;
        if (store_path(to, "%s/%s", dir, file)) {
            st = base_fail(KILN_ERR_INVALID_ARG, "%s: path too long", file);
            break;
        }
        if ((st = store_share_artifact(s, id, file, to))) break;
        json_array_append(arts, a);
    }
    if (!st && system && *system) st = add_text(arts, dir, "system", "system.txt", system);
    if (!st && opts) st = add_text(arts, dir, "params", "params.json", options_json); /* as the caller wrote it */
    json_t *nm = NULL;
    if (!st) {
        nm = json_pack(
            "{s:O,s:s,s:O}", "mode", json_object_get(man, "mode"), "origin",
            json_string_value(json_object_get(man, "origin")) ? json_string_value(json_object_get(man, "origin")) : "",
            "artifacts", arts);
        if (!nm) st = base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    if (!st) {
        json_object_set_new(nm, "source", json_pack("{s:s,s:s}", "type", "saved", "from", id));
        char out[STORE_ID_LEN + 1];
        st = store_publish(s, dir, nm, norm, out); /* moves or quarantines dir */
        if (!st && id_out) memcpy(id_out, out, STORE_ID_LEN + 1);
    } else {
        store_rmtree(dir);
    }
    json_decref(nm);
    json_decref(arts);
    json_decref(inf);
    json_decref(opts);
    return st;
}

int store_pack_companion(const char *model_path, const char *role, char *out, size_t cap) {
    if (!model_path || !out || cap == 0) return 0;
    const char *slash = strrchr(model_path, '/');
    const int dir_len = slash ? (int)(slash - model_path) : 1;
    const char *dir = slash ? model_path : ".";
    char man[PATH_MAX];
    if (snprintf(man, sizeof man, "%.*s/manifest.json", dir_len, dir) >= (int)sizeof man) return 0;
    if (access(man, R_OK) != 0) return 0;
    json_t *m = json_load_file(man, 0, NULL);
    int found = 0;
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(m, "artifacts"), i, a) {
        const char *r = json_string_value(json_object_get(a, "role"));
        const char *file = json_string_value(json_object_get(a, "path"));
        if (!r || !file || strcmp(r, role) || !store_file_ok(file)) continue;
        found = snprintf(out, cap, "%.*s/%s", dir_len, dir, file) < (int)cap && access(out, R_OK) == 0;
        break;
    }
    json_decref(m);
    return found;
}
