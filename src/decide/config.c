/* A decision pack's configuration (kiln.decision.config) and heads.  The
 * JSON is checked whole before the model is bound; every number a request
 * will meet is validated here, so a malformed configuration fails the load
 * with one line and nothing stays resident. */
#include "decide/decide.h"

#include "base/base.h"
#include "quant/quant.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CFG_FORMAT "kiln.decision/1"
#define CFG_KEY "kiln.decision.config"

static char *dup_cstr(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void decide_config_free(decide_config *c) {
    for (int i = 0; c->types && i < c->n_types; i++) {
        decide_type *t = &c->types[i];
        free(t->name);
        for (int k = 0; t->labels && k < t->n_labels; k++) free(t->labels[k]);
        free(t->labels);
        free(t->b_lo);
        free(t->b_hi);
        free(t->b_t);
    }
    for (int i = 0; c->heads && i < c->n_heads; i++) free(c->heads[i].name);
    free(c->types);
    free(c->heads);
    memset(c, 0, sizeof *c);
}

/* A positive, finite JSON number as a float (also finite as a float). */
static int temperature_of(const json_t *v, float *out) {
    if (!json_is_number(v)) return -1;
    const double d = json_number_value(v);
    if (!(d > 0.0) || !isfinite(d) || !isfinite((float)d) || (float)d <= 0.0f) return -1;
    *out = (float)d;
    return 0;
}

/* An int member in [lo, hi]; -1 when absent, not an integer or outside. */
static int int_member(const json_t *o, const char *key, long lo, long hi, int *out) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) return -1;
    const json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) return -1;
    *out = (int)x;
    return 0;
}

static int head_name_ok(const char *s) {
    if (!*s || strlen(s) > 48) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-') return 0;
    return 1;
}

/* "N" or "N-M" with 1 <= N <= M. */
static int parse_bucket(const char *key, int32_t *lo, int32_t *hi) {
    char *end;
    long a = strtol(key, &end, 10), b = a;
    if (end == key || a < 1 || a > 1 << 20) return -1;
    if (*end == '-') {
        const char *s = end + 1;
        b = strtol(s, &end, 10);
        if (end == s || b < a || b > 1 << 20) return -1;
    }
    if (*end) return -1;
    *lo = (int32_t)a;
    *hi = (int32_t)b;
    return 0;
}

#define BAD(...)                                                     \
    do {                                                             \
        base_fail(KILN_ERR_FORMAT, "decision config: " __VA_ARGS__); \
        goto fail;                                                   \
    } while (0)

kiln_status decide_config_parse(decide_config *c, const char *text, size_t len) {
    memset(c, 0, sizeof *c);
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) { return base_fail(KILN_ERR_FORMAT, "decision config: not JSON (%s at line %d)", je.text, je.line); }
    if (!json_is_object(root)) BAD("not a JSON object");
    const json_t *fmt = json_object_get(root, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), CFG_FORMAT))
        BAD("\"format\" must be \"" CFG_FORMAT "\"");
    if (int_member(root, "max_len", 4, 1 << 20, &c->max_len)) BAD("\"max_len\" must be an integer >= 4");
    if (int_member(root, "head_max_len", 0, c->max_len - 4, &c->head_max_len))
        BAD("\"head_max_len\" must be an integer from 0 to max_len - 4 (%d)", c->max_len - 4);
    const json_t *eps = json_object_get(root, "norm_eps");
    c->norm_eps = 1e-5f;
    if (eps && (!json_is_number(eps) || !(json_number_value(eps) > 0) || !(json_number_value(eps) < 1)))
        BAD("\"norm_eps\" must be a number in (0, 1)");
    if (eps) c->norm_eps = (float)json_number_value(eps);
    const json_t *pool = json_object_get(root, "pooling");
    c->pooling = MODEL_POOL_CLS;
    if (pool) {
        if (json_is_string(pool) && !strcmp(json_string_value(pool), "cls"))
            c->pooling = MODEL_POOL_CLS;
        else if (json_is_string(pool) && !strcmp(json_string_value(pool), "mean"))
            c->pooling = MODEL_POOL_MEAN;
        else
            BAD("\"pooling\" must be \"cls\" or \"mean\"");
    }
    const json_t *types = json_object_get(root, "question_types");
    if (!json_is_object(types) || json_object_size(types) == 0 || json_object_size(types) > 256)
        BAD("\"question_types\" must be an object of 1 to 256 question types");
    const size_t nt = json_object_size(types);
    c->types = calloc(nt, sizeof *c->types);
    c->heads = calloc(nt, sizeof *c->heads);
    if (!c->types || !c->heads) BAD("out of memory");
    const char *name;
    const json_t *tv;
    json_object_foreach((json_t *)types, name, tv) {
        decide_type *t = &c->types[c->n_types++];
        if (!(t->name = dup_cstr(name))) BAD("out of memory");
        if (!json_is_object(tv)) BAD("question type '%s' must be an object", name);
        const json_t *hv = json_object_get(tv, "head"), *lv = json_object_get(tv, "labels"),
                     *sv = json_object_get(tv, "option_slots");
        if (!json_is_string(hv) || !head_name_ok(json_string_value(hv)))
            BAD("question type '%s': \"head\" must name a head ([A-Za-z0-9_-], at most 48)", name);
        if (!lv == !sv) BAD("question type '%s' needs exactly one of \"labels\" and \"option_slots\"", name);
        if (lv) {
            if (!json_is_array(lv) || json_array_size(lv) < 1 || json_array_size(lv) > 4096)
                BAD("question type '%s': \"labels\" must be an array of 1 to 4096 strings", name);
            t->n_labels = (int)json_array_size(lv);
            if (!(t->labels = calloc((size_t)t->n_labels, sizeof *t->labels))) BAD("out of memory");
            for (int k = 0; k < t->n_labels; k++) {
                const json_t *l = json_array_get(lv, (size_t)k);
                if (!json_is_string(l)) BAD("question type '%s': label %d is not a string", name, k);
                for (int p = 0; p < k; p++)
                    if (!strcmp(t->labels[p], json_string_value(l)))
                        BAD("question type '%s': label '%s' appears twice", name, t->labels[p]);
                if (!(t->labels[k] = dup_cstr(json_string_value(l)))) BAD("out of memory");
            }
        } else if (int_member(tv, "option_slots", 1, 4096, &t->slots)) {
            BAD("question type '%s': \"option_slots\" must be an integer from 1 to 4096", name);
        }
        /* heads by name: types may share one when they agree on its outputs */
        const char *hn = json_string_value(hv);
        const int n_out = t->n_labels ? t->n_labels : 1;
        t->head = -1;
        for (int h = 0; h < c->n_heads; h++)
            if (!strcmp(c->heads[h].name, hn)) t->head = h;
        if (t->head < 0) {
            t->head = c->n_heads++;
            if (!(c->heads[t->head].name = dup_cstr(hn))) BAD("out of memory");
            c->heads[t->head].n_out = n_out;
        } else if (c->heads[t->head].n_out != n_out) {
            BAD("question type '%s': head '%s' is shared with a type of %d outputs, this one needs %d", name, hn,
                c->heads[t->head].n_out, n_out);
        }
    }
    const json_t *temps = json_object_get(root, "temperature");
    if (!json_is_object(temps)) BAD("\"temperature\" must be an object with each question type's temperature");
    json_object_foreach((json_t *)temps, name, tv) {
        if (!decide_type_find(c, name)) BAD("\"temperature\" names '%s', which is not a question type", name);
    }
    for (int i = 0; i < c->n_types; i++) {
        decide_type *t = &c->types[i];
        if (temperature_of(json_object_get(temps, t->name), &t->temperature))
            BAD("question type '%s': temperature must be a positive, finite number", t->name);
    }
    const json_t *tbo = json_object_get(root, "temperature_by_options");
    if (tbo && !json_is_object(tbo)) BAD("\"temperature_by_options\" must be an object");
    json_object_foreach((json_t *)tbo, name, tv) {
        decide_type *t = (decide_type *)decide_type_find(c, name);
        if (!t) BAD("\"temperature_by_options\" names '%s', which is not a question type", name);
        if (t->n_labels) BAD("\"temperature_by_options\": '%s' is a labels type, not an options type", name);
        if (!json_is_object(tv) || json_object_size(tv) == 0)
            BAD("\"temperature_by_options\" of '%s' must be an object of option-count buckets", name);
        const size_t nb = json_object_size(tv);
        t->b_lo = malloc(nb * sizeof *t->b_lo);
        t->b_hi = malloc(nb * sizeof *t->b_hi);
        t->b_t = malloc(nb * sizeof *t->b_t);
        if (!t->b_lo || !t->b_hi || !t->b_t) BAD("out of memory");
        const char *key;
        const json_t *bv;
        json_object_foreach((json_t *)tv, key, bv) {
            int32_t lo, hi;
            if (parse_bucket(key, &lo, &hi))
                BAD("\"temperature_by_options\" of '%s': bucket '%s' is not N or N-M (1 <= N <= M)", name, key);
            if (hi > t->slots)
                BAD("\"temperature_by_options\" of '%s': bucket '%s' goes past the %d option slots", name, key,
                    t->slots);
            for (int b = 0; b < t->n_buckets; b++)
                if (lo <= t->b_hi[b] && t->b_lo[b] <= hi)
                    BAD("\"temperature_by_options\" of '%s': bucket '%s' overlaps another", name, key);
            float temp;
            if (temperature_of(bv, &temp))
                BAD("\"temperature_by_options\" of '%s': bucket '%s' must be a positive, finite number", name, key);
            t->b_lo[t->n_buckets] = lo;
            t->b_hi[t->n_buckets] = hi;
            t->b_t[t->n_buckets++] = temp;
        }
    }
    json_decref(root);
    return KILN_OK;
fail:
    json_decref(root);
    decide_config_free(c);
    return KILN_ERR_FORMAT;
}

kiln_status decide_config_load(decide_config *c, const gguf_file *f) {
    memset(c, 0, sizeof *c);
    gguf_str s;
    if (gguf_get_str(f, CFG_KEY, &s) != 0)
        return base_fail(KILN_ERR_NOT_FOUND, "not a decision pack (no " CFG_KEY " in the metadata)");
    return decide_config_parse(c, s.ptr, s.len);
}

const decide_type *decide_type_find(const decide_config *c, const char *name) {
    for (int i = 0; i < c->n_types; i++)
        if (!strcmp(c->types[i].name, name)) return &c->types[i];
    return NULL;
}

float decide_temperature(const decide_type *t, int n) {
    for (int b = 0; b < t->n_buckets; b++)
        if (t->b_lo[b] <= n && n <= t->b_hi[b]) return t->b_t[b];
    return t->temperature;
}

/* ---------------------------------------------------------------- heads */

#undef BAD
#define CORRUPT(...) return base_fail(KILN_ERR_CORRUPT, "model corrupt: " __VA_ARGS__)

/* The tensor decision.<head>.<part> when present, with its shape checked:
 * dims 1 or 2, ne as given.  *t NULL when absent; -1 on a bad shape. */
static int head_tensor(const kiln_model *m, const char *head, const char *part, int dims, int64_t ne0, int64_t ne1,
                       const gguf_tensor **t, char *what, size_t wl) {
    snprintf(what, wl, "decision.%s.%s", head, part);
    *t = gguf_find_tensor(m->gf, what);
    if (!*t) return 0;
    if ((int)(*t)->n_dims != dims || (*t)->ne[0] != ne0 || (dims == 2 && (*t)->ne[1] != ne1)) return -1;
    if (dims == 1 && (*t)->type != QUANT_F32) return -1;
    return 0;
}

kiln_status decide_heads_bind(decide_config *c, const kiln_model *m) {
    const int64_t E = m->hp.n_embd;
    if (c->max_len > m->hp.n_ctx_train)
        CORRUPT("the configuration's max_len %d exceeds the encoder's %d positions", c->max_len, m->hp.n_ctx_train);
    for (int h = 0; h < c->n_heads; h++) {
        decide_head *hd = &c->heads[h];
        const gguf_tensor *t;
        char what[96];
        if (head_tensor(m, hd->name, "out.weight", 2, E, hd->n_out, &t, what, sizeof what) || !t) {
            if (!t) CORRUPT("head '%s' has no %s", hd->name, what);
            CORRUPT("%s has shape [%lld, %lld], the configuration needs [%lld, %d]", what, (long long)t->ne[0],
                    (long long)(t->n_dims > 1 ? t->ne[1] : 1), (long long)E, hd->n_out);
        }
        hd->out = (kern_mat){t->data, (int)t->type, E, hd->n_out, NULL};
        if (head_tensor(m, hd->name, "out.bias", 1, hd->n_out, 0, &t, what, sizeof what))
            CORRUPT("%s must be F32 [%d]", what, hd->n_out);
        hd->out_b = t ? t->data : NULL;
        if (head_tensor(m, hd->name, "dense.weight", 2, E, E, &t, what, sizeof what))
            CORRUPT("%s must be [%lld, %lld]", what, (long long)E, (long long)E);
        if (t) hd->dense = (kern_mat){t->data, (int)t->type, E, E, NULL};
        const int dense = t != NULL;
        const char *parts[] = {"dense.bias", "norm.weight", "norm.bias"};
        const float **dst[] = {&hd->dense_b, &hd->norm_w, &hd->norm_b};
        for (int k = 0; k < 3; k++) {
            if (head_tensor(m, hd->name, parts[k], 1, E, 0, &t, what, sizeof what))
                CORRUPT("%s must be F32 [%lld]", what, (long long)E);
            if (t && !dense) CORRUPT("%s without decision.%s.dense.weight", what, hd->name);
            *dst[k] = t ? t->data : NULL;
        }
        if (hd->norm_b && !hd->norm_w) CORRUPT("decision.%s.norm.bias without its weight", hd->name);
        for (int k = 0; k < 2; k++) {
            const kern_mat *w = k ? &hd->dense : &hd->out;
            if (w->data && !quant_supported(w->type))
                CORRUPT("decision.%s has a tensor type kiln cannot compute", hd->name);
        }
    }
    /* every tensor under decision. is a part of a configured head */
    static const char *const parts[] = {"out.weight", "out.bias",    "dense.weight",
                                        "dense.bias", "norm.weight", "norm.bias"};
    for (int i = 0; i < gguf_n_tensors(m->gf); i++) {
        const char *n = gguf_tensor_at(m->gf, i)->name;
        if (strncmp(n, "decision.", 9)) continue;
        int known = 0;
        for (int h = 0; h < c->n_heads && !known; h++) {
            const size_t l = strlen(c->heads[h].name);
            if (strncmp(n + 9, c->heads[h].name, l) || n[9 + l] != '.') continue;
            for (size_t k = 0; k < sizeof parts / sizeof parts[0] && !known; k++) known = !strcmp(n + 10 + l, parts[k]);
        }
        if (!known) CORRUPT("tensor %s is not a part of any head of the configuration", n);
    }
    return KILN_OK;
}
