/* The writers' common part (xapi.h): a response id, its blocks, SSE
 * events with a name. */
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
