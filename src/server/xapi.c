/* What Responses and Messages share (xapi.h): the text of a request's
 * content, and the writers' common part (a response id, its blocks, SSE
 * events with a name). */
#include "server/xapi.h"

#include "server/buf.h"

#include <stdio.h>
#include <string.h>

void ks_xw_init(ks_xw *w, const ks_xw_ops *ops, const char *prefix, const char *serial, const char *model,
                ks_buf *out) {
    memset(w, 0, sizeof *w);
    w->ops = ops;
    w->out = out;
    snprintf(w->serial, sizeof w->serial, "%s", serial);
    snprintf(w->id, sizeof w->id, "%s_%s", prefix, serial);
    snprintf(w->model, sizeof w->model, "%s", model ? model : "");
    w->created = (long)ks_wall();
    w->open = KS_XB_NONE;
    w->items = json_array();
}

void ks_xw_free(ks_xw *w) {
    json_decref(w->echo);
    json_decref(w->cur);
    json_decref(w->items);
    json_decref(w->result);
    ks_buf_free(&w->acc);
    memset(w, 0, sizeof *w);
}

void ks_xw_event(ks_xw *w, const char *name, json_t *j) {
    if (w->out) {
        ks_buf_printf(w->out, "event: %s\ndata: ", name);
        ks_buf_json(w->out, j);
        ks_buf_puts(w->out, "\n\n");
    }
    json_decref(j);
}

void ks_xw_opened(ks_xw *w, int kind, json_t *blk) {
    w->open = kind;
    w->cur = blk;
}

void ks_xw_closed(ks_xw *w) {
    json_array_append_new(w->items, w->cur);
    w->cur = NULL;
    w->open = KS_XB_NONE;
    w->acc.len = 0;
}

int ks_xapi_text(json_t *v, ks_buf *b, const char *const *types, const char *what, char *err, size_t cap) {
    if (json_is_string(v)) {
        ks_buf_put(b, json_string_value(v), json_string_length(v));
        return 0;
    }
    if (!json_is_array(v)) {
        snprintf(err, cap, "%s must be a string or an array of text parts", what);
        return -1;
    }
    size_t i;
    json_t *p;
    json_array_foreach(v, i, p) {
        const char *t = json_string_value(json_object_get(p, "type"));
        int k = 0;
        while (t && types[k] && strcmp(t, types[k])) k++;
        /* a refusal part holds its text under "refusal" */
        json_t *tx = json_object_get(p, t && !strcmp(t, "refusal") ? "refusal" : "text");
        if (!t || !types[k] || !json_is_string(tx)) {
            snprintf(err, cap, "%s[%zu] is %s%s%s; only text parts are supported here", what, i,
                     t ? "of type '" : "not a text part", t ? t : "", t ? "'" : "");
            return -1;
        }
        ks_buf_put(b, json_string_value(tx), json_string_length(tx));
    }
    return 0;
}
