/* A store pack's defaults under what a request sets, as Ollama applies a
 * model's params and system layers: each option the request leaves out
 * takes the pack's value, and a conversation without a system message gets
 * the pack's.  The pack's options use Ollama's names; an OpenAI-shaped
 * request takes them under its own (num_predict as max_tokens).  A pack's
 * num_ctx is not applied: the context is the server's -c, or the one a
 * request's own options.num_ctx reloads the model with (models.h). */
#include "server/defaults.h"

#include "server/opts.h"
#include "server/srv.h"

#include <string.h>

static json_t *pack_options(server_model *r) {
    json_t *o = json_object_get(r->defaults, "options");
    return json_is_object(o) && json_object_size(o) ? o : NULL;
}

const char *server_defaults_system(server_model *r) {
    const char *s = json_string_value(json_object_get(r->defaults, "system"));
    return s && *s ? s : NULL;
}

int server_defaults_opts(server_model *r, struct MHD_Connection *c, json_t *src, int ollama, server_gen_opts *o,
                         int *rc) {
    json_t *pack = pack_options(r);
    if (!pack) return 0;
    json_t *merged = json_is_object(src) ? json_deep_copy(src) : json_object();
    /* Ollama's name -> the request's name */
    static const char *const names[][2] = {
        {"temperature", "temperature"},
        {"top_p", "top_p"},
        {"top_k", "top_k"},
        {"min_p", "min_p"},
        {"repeat_penalty", "repeat_penalty"},
        {"repeat_last_n", "repeat_last_n"},
        {"presence_penalty", "presence_penalty"},
        {"frequency_penalty", "frequency_penalty"},
        {"seed", "seed"},
        {"num_predict", "max_tokens"},
        {"stop", "stop"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        json_t *v = json_object_get(pack, names[i][0]);
        if (!v) continue;
        const char *key = ollama ? names[i][0] : names[i][1];
        /* the request's own value wins, under any of its spellings */
        int set = json_object_get(merged, key) && !json_is_null(json_object_get(merged, key));
        if (!strcmp(names[i][1], "max_tokens"))
            set |= json_object_get(merged, "max_tokens") || json_object_get(merged, "max_completion_tokens") ||
                   json_object_get(merged, "num_predict");
        if (!strcmp(key, "max_tokens") && json_is_integer(v) && json_integer_value(v) < 0) continue; /* unlimited */
        if (!set) json_object_set(merged, key, v);
    }
    server_gen_opts keep = *o;
    int bad = server_parse_opts(c, merged, ollama, o, rc);
    json_decref(merged);
    if (bad) return -1;
    /* what the pack does not set stays the request's, and what o borrows
     * must outlive merged: the request's schema and stop strings, else the
     * pack's stop strings (the model entry keeps them) */
    o->urgent = keep.urgent;
    o->ignore_eos |= keep.ignore_eos;
    o->json_mode = keep.json_mode;
    o->schema = keep.schema;
    o->force_tools = keep.force_tools;
    o->force_think = keep.force_think;
    if (o->stop) o->stop = keep.stop ? keep.stop : json_object_get(pack, "stop");
    return 0;
}

json_t *server_defaults_messages(server_model *r, json_t *messages) {
    const char *sys = server_defaults_system(r);
    if (!sys || !json_is_array(messages)) return json_incref(messages);
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && (!strcmp(role, "system") || !strcmp(role, "developer"))) return json_incref(messages);
    }
    json_t *out = json_array();
    json_array_append_new(out, json_pack("{s:s,s:s}", "role", "system", "content", sys));
    json_array_extend(out, messages);
    return out;
}
