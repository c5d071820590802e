/* What Responses' and Messages' requests share (xapi.h): the text of a
 * request's content. */
#include "server/xapi.h"

#include "server/buf.h"

#include <stdio.h>
#include <string.h>

int server_xapi_text(json_t *v, server_buf *b, const char *const *types, const char *what, char *err, size_t cap) {
    if (json_is_string(v)) {
        server_buf_put(b, json_string_value(v), json_string_length(v));
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
        server_buf_put(b, json_string_value(tx), json_string_length(tx));
    }
    return 0;
}
