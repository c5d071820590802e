/* Chat messages to prompt text.  A store pack's Go template (an Ollama
 * model's template layer) runs in kiln's Go text/template subset with
 * Ollama's data model (src/chat/gotmpl.h); else the GGUF's
 * tokenizer.chat_template runs in kiln's Jinja2-subset interpreter
 * (src/chat); a template it cannot compile falls back to the built-in
 * format its markers suggest (ChatML, Llama 3, Llama 2).  A model without a
 * template (a base model) gets the message texts joined by blank lines, to
 * be continued as plain text. */
#include "server/prompt.h"

#include "server/buf.h"
#include "server/callfmt.h"
#include "server/srv.h"

#include "chat/gotmpl.h"
#include "chat/template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A store pack's Go template (an Ollama model's template layer), or NULL. */
static const char *pack_go_template(server_model *r) {
    const char *t = json_string_value(json_object_get(r->defaults, "template"));
    const char *f = json_string_value(json_object_get(r->defaults, "template_format"));
    return t && *t && f && !strcmp(f, "go") ? t : NULL;
}

typedef struct chat_fmt {
    const char *marker; /* text in the template that selects it */
    const char *sys_pre, *sys_post;
    const char *user_pre, *user_post;
    const char *asst_pre, *asst_post;
} chat_fmt;

static const chat_fmt k_formats[] = {
    {"<|im_start|>", "<|im_start|>system\n", "<|im_end|>\n", "<|im_start|>user\n", "<|im_end|>\n",
     "<|im_start|>assistant\n", "<|im_end|>\n"},
    {"<|start_header_id|>", "<|start_header_id|>system<|end_header_id|>\n\n", "<|eot_id|>",
     "<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|eot_id|>"},
    {"[INST]", "[INST] ", " [/INST]", "[INST] ", " [/INST]", "", "</s>"},
};

/* A model's compiled template: the pack's Go one, or the GGUF's Jinja. */
typedef struct server_tmpl {
    kgt *go;
    chat_tmpl *jinja;
    int callfmt; /* SERVER_CF_*: how the model writes calls, from the template's text and the vocabulary */
} server_tmpl;

void server_template_free(void *t) {
    server_tmpl *k = t;
    if (!k) return;
    chat_gotmpl_free(k->go);
    chat_free(k->jinja);
    free(k);
}

const char *server_template_text(server_model *r) {
    const char *go = pack_go_template(r);
    return go ? go : kiln_model_chat_template(r->model);
}

/* The text of a message's content: a string, or the text parts of an
 * array of parts. */
static void content_text(json_t *msg, server_buf *out) {
    json_t *c = json_object_get(msg, "content");
    if (json_is_string(c)) {
        server_buf_put(out, json_string_value(c), json_string_length(c));
    } else if (json_is_array(c)) {
        size_t i;
        json_t *part;
        json_array_foreach(c, i, part) {
            json_t *t = json_object_get(part, "text");
            if (json_is_string(t)) server_buf_put(out, json_string_value(t), json_string_length(t));
        }
    }
}

int server_has_chat(server_model *r) { return server_template_text(r) != NULL; }

int server_model_callfmt(server_model *r) {
    pthread_mutex_lock(&r->srv->mu);
    const server_tmpl *k = r->tmpl;
    const int fmt = k ? k->callfmt : -1;
    pthread_mutex_unlock(&r->srv->mu);
    return fmt >= 0 ? fmt : server_callfmt_detect(server_template_text(r), r->model);
}

static char *token_text(kiln_model *m, int32_t id) {
    char buf[128];
    int n = id >= 0 ? kiln_token_to_piece(m, id, buf, sizeof buf, 1) : 0;
    if (n < 0 || n >= (int)sizeof buf) n = 0;
    buf[n] = 0;
    return strdup(buf);
}

json_t *server_chat_normalize(json_t *messages) {
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        json_t *c = json_deep_copy(m);
        if (!json_is_object(c)) {
            json_decref(c);
            continue;
        }
        json_t *content = json_object_get(c, "content");
        if (!content || json_is_null(content)) {
            /* an assistant turn that only calls tools: OpenAI sends null,
             * some clients leave it out; templates test and slice it */
            json_object_set_new(c, "content", json_string(""));
        } else if (json_is_array(content)) {
            server_buf b = {0};
            content_text(m, &b);
            json_object_set_new(c, "content", server_jstr(b.p ? b.p : "", b.len));
            server_buf_free(&b);
        }
        /* the reasoning of an earlier turn under the name Ollama and the
         * harmony template (gpt-oss) read, beside OpenAI's */
        json_t *rc = json_object_get(c, "reasoning_content");
        if (json_is_string(rc) && !json_object_get(c, "thinking")) json_object_set(c, "thinking", rc);
        json_t *tc = json_object_get(c, "tool_calls");
        size_t k;
        json_t *call;
        json_array_foreach(tc, k, call) {
            json_t *fn = json_object_get(call, "function");
            json_t *args = json_object_get(fn, "arguments");
            if (json_is_string(args)) {
                json_t *p = json_loads(json_string_value(args), 0, NULL);
                if (p) json_object_set_new(fn, "arguments", p);
            }
        }
        json_array_append_new(out, c);
    }
    return out;
}

int server_render_status(const char *err) {
    if (strstr(err, "out of memory")) return 500;
    if (strstr(err, SERVER_TOO_LARGE)) return 413;
    return strstr(err, "render exceeded its ") ? 500 : 400;
}

/* Counts a failed render, and names a conversation of SERVER_LARGE_CHAT bytes
 * or more as the cause of a budget it went over (413): a real template
 * spends steps, output and memory in proportion to the conversation, so a
 * small one over a budget is the template's doing (500). */
static void render_failed(server_srv *s, json_t *messages, json_t *tools, char *err, size_t cap) {
    if (strstr(err, "render cancelled")) {
        atomic_fetch_add(&s->n_render_cancelled, 1);
        return;
    }
    static const char *const budget[3] = {"its step budget", "its output budget", "its memory budget"};
    int k = 0;
    while (k < 3 && !strstr(err, budget[k])) k++;
    if (k == 3) return;
    atomic_fetch_add(&s->n_render_over[k], 1);
    const size_t n =
        json_dumpb(messages, NULL, 0, JSON_COMPACT) + (tools ? json_dumpb(tools, NULL, 0, JSON_COMPACT) : 0);
    if (n < SERVER_LARGE_CHAT) return;
    char why[512];
    snprintf(why, sizeof why, "%s", err);
    snprintf(err, cap, "%s (%zu bytes of messages and tools): %s", SERVER_TOO_LARGE, n, why);
}

char *server_render_chat(server_model *r, json_t *messages, json_t *tools, int think, const chat_opts *opts, char *err,
                         size_t cap) {
    const char *src = kiln_model_chat_template(r->model);
    snprintf(err, cap, "the chat template failed");
    if (!json_is_array(messages) || json_array_size(messages) == 0) {
        snprintf(err, cap, "'messages' must be a non-empty array");
        return NULL;
    }
    const char *go_src = pack_go_template(r);
    pthread_mutex_lock(&r->srv->mu);
    if ((src || go_src) && !r->tmpl_tried) {
        /* a template that fails for want of memory is tried again by the
         * next request, not replaced by a built-in format for good */
        kiln_status cst = KILN_OK;
        server_tmpl *k = calloc(1, sizeof *k);
        if (k && go_src && (cst = chat_gotmpl_compile(go_src, strlen(go_src), &k->go)) && cst != KILN_ERR_NOMEM)
            fprintf(stderr, "kiln serve: %s: the pack's Go template: %s; using the GGUF's\n", r->name,
                    kiln_last_error());
        if (k && !k->go && cst != KILN_ERR_NOMEM && src && (cst = chat_compile(src, strlen(src), &k->jinja)) &&
            cst != KILN_ERR_NOMEM)
            fprintf(stderr, "kiln serve: %s: chat template: %s; using a built-in format\n", r->name, kiln_last_error());
        if (!k || cst == KILN_ERR_NOMEM) {
            server_template_free(k);
            pthread_mutex_unlock(&r->srv->mu);
            snprintf(err, cap, "out of memory compiling the chat template");
            return NULL;
        }
        k->callfmt = server_callfmt_detect(go_src ? go_src : src, r->model);
        r->tmpl_tried = 1;
        r->tmpl = k;
    }
    const server_tmpl *k = r->tmpl;
    pthread_mutex_unlock(&r->srv->mu);
    server_srv *s = r->srv;
    chat_opts ro = opts ? *opts : (chat_opts){0};
    if (!ro.max_steps) ro.max_steps = s->cfg.template_steps;
    if (k && k->go) {
        json_t *msgs = server_chat_normalize(messages);
        atomic_fetch_add(&s->n_renders, 1);
        char *out;
        if (chat_gotmpl_render_chat_opts(k->go, msgs, tools, think, &ro, &out))
            snprintf(err, cap, "%s", kiln_last_error());
        atomic_fetch_sub(&s->n_renders, 1);
        json_decref(msgs);
        if (!out) render_failed(s, messages, tools, err, cap);
        return out;
    }
    const chat_tmpl *tmpl = k ? k->jinja : NULL;
    if (tmpl) {
        json_t *vars = json_object();
        json_object_set_new(vars, "messages", server_chat_normalize(messages));
        if (json_is_array(tools) && json_array_size(tools)) json_object_set(vars, "tools", tools);
        json_object_set_new(vars, "add_generation_prompt", json_true());
        char *bos = token_text(r->model, kiln_token_bos(r->model));
        char *eos = token_text(r->model, kiln_token_eos(r->model));
        json_object_set_new(vars, "bos_token", json_string(bos ? bos : ""));
        json_object_set_new(vars, "eos_token", json_string(eos ? eos : ""));
        free(bos);
        free(eos);
        if (think >= 0) json_object_set_new(vars, "enable_thinking", json_boolean(think));
        atomic_fetch_add(&s->n_renders, 1);
        char *out;
        if (chat_render_opts(tmpl, vars, &ro, &out)) snprintf(err, cap, "%s", kiln_last_error());
        atomic_fetch_sub(&s->n_renders, 1);
        json_decref(vars);
        if (!out) render_failed(s, messages, tools, err, cap);
        return out;
    }
    const chat_fmt *f = NULL;
    for (size_t i = 0; src && i < sizeof k_formats / sizeof k_formats[0]; i++)
        if (strstr(src, k_formats[i].marker)) f = &k_formats[i];
    server_buf b = {0};
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role) role = "user";
        if (!f) {
            if (b.len) server_buf_puts(&b, "\n\n");
            content_text(m, &b);
            continue;
        }
        int sys = !strcmp(role, "system"), asst = !strcmp(role, "assistant");
        server_buf_puts(&b, sys ? f->sys_pre : asst ? f->asst_pre : f->user_pre);
        content_text(m, &b);
        server_buf_puts(&b, sys ? f->sys_post : asst ? f->asst_post : f->user_post);
    }
    if (f) server_buf_puts(&b, f->asst_pre);
    if (!b.p) server_buf_puts(&b, "");
    if (b.failed || !b.p) {
        server_buf_free(&b);
        snprintf(err, cap, "out of memory");
        return NULL;
    }
    return b.p;
}

int server_add_bos(kiln_model *m, const char *text, int parse_special) {
    /* a rendered template may already begin with the BOS text */
    int add = 1;
    char *bos = token_text(m, kiln_token_bos(m));
    if (parse_special && bos && *bos && !strncmp(text, bos, strlen(bos))) add = 0;
    free(bos);
    return add;
}

int32_t *server_tokenize(kiln_model *m, const char *text, int parse_special, int32_t *n_out) {
    size_t len = strlen(text);
    int add = server_add_bos(m, text, parse_special);
    int cap = (int)len + 8;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return NULL;
    int n = kiln_tokenize(m, text, len, add, parse_special, ids, cap);
    if (n > cap) {
        int32_t *nb = realloc(ids, (size_t)n * sizeof *ids);
        if (!nb) {
            free(ids);
            return NULL;
        }
        ids = nb;
        n = kiln_tokenize(m, text, len, add, parse_special, ids, n);
    }
    if (n < 0) {
        free(ids);
        return NULL;
    }
    *n_out = n;
    return ids;
}

int server_prompt_opens_think(const char *p) {
    size_t n = strlen(p);
    while (n && (p[n - 1] == '\n' || p[n - 1] == ' ')) n--;
    return n >= 7 && !strncmp(p + n - 7, "<think>", 7);
}

int server_force_think(server_model *r, const char *prompt, int think_off) {
    if (server_prompt_opens_think(prompt)) return 2;
    if (think_off) return 0;
    const char *tmpl = server_template_text(r);
    return tmpl && strstr(tmpl, "<think>") ? 1 : 0;
}
