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
 * with the pack, read-only.  Each is at most KST_TEXT_MAX bytes. */
#include "store/store.h"

#include "base/base.h"

#include <stdlib.h>
#include <string.h>

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

kiln_status kst_check_text(const char *path, const char *role, const char *file) {
    if (!is_text_role(role)) return KILN_OK;
    size_t len = 0;
    char *txt = kst_read_text(path, KST_TEXT_MAX, &len);
    if (!txt)
        return kb_fail(KILN_ERR_FORMAT, "artifact %s: cannot read it as text of at most %u bytes", file, KST_TEXT_MAX);
    char why[128];
    json_t *v = text_value(role, txt, len, why, sizeof why);
    free(txt);
    if (!v) return kb_fail(KILN_ERR_FORMAT, "artifact %s: %s", file, why);
    json_decref(v);
    return KILN_OK;
}

json_t *kst_pack_defaults(const char *pack_dir, json_t *man) {
    json_t *d = json_object();
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(man, "artifacts"), i, a) {
        const char *role = json_string_value(json_object_get(a, "role"));
        const char *file = json_string_value(json_object_get(a, "path"));
        if (!role || !file || !is_text_role(role) || !kst_file_ok(file)) continue;
        char p[PATH_MAX];
        if (kst_path(p, "%s/%s", pack_dir, file)) continue;
        size_t len = 0;
        char *txt = kst_read_text(p, KST_TEXT_MAX, &len);
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
