/* kiln run and kiln chat: prompt in, streamed continuation out.  Only the
 * generated text goes to stdout; diagnostics and timings go to stderr. */
#define _GNU_SOURCE /* memmem */
#include "cli/cli.h"
#include "cli/common.h"
#include "cli/model.h"

#include "base/base.h"

#include "chat/gotmpl.h"
#include "chat/template.h"
#include "gen/gen.h"
#include "model/model.h"
#include "spec/spec.h"
#include "sample/jschema.h"
#include "sample/sample.h"
#include "server/deltas.h"
#include "vision/vision.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct gen_stats {
    int n_prompt, n_gen;
    double t_prompt, t_gen;
    int interrupted;           /* Ctrl-C stopped the generation */
    int n_drafted, n_accepted; /* speculative decoding */
} gen_stats;

/* Ctrl-C: stops the prompt or the generation at the next batch or token
 * (run then exits, chat goes back to its prompt); a second one before that
 * ends the process as usual. */
static volatile sig_atomic_t g_sigint;

static void on_sigint(int sig) {
    if (g_sigint) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
    g_sigint = 1;
}

static void catch_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: a read at chat's prompt returns */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

/* How kiln chat shows a reply.  Reasoning (<think>...</think>) is dimmed on
 * a terminal (ANSI faint), set between Ollama's "Thinking..." and
 * "...done thinking." lines otherwise, or hidden (--hidethinking); a tool
 * call (<tool_call>{"name": ..., "arguments": ...}</tool_call>) is shown as
 * the call, "-> name({...})".  Only the display changes: the conversation
 * keeps the reply as the model wrote it, except a harmony model's (gpt-oss:
 * <|channel|>NAME<|message|>...<|end|> messages, read by server/deltas.h),
 * kept as its final text and, as thinking, its analysis: the template
 * refuses the channels' markup in a message. */
enum { VIEW_TEXT, VIEW_THINK, VIEW_TOOL };

typedef struct chat_view {
    int tty, hide_think;
    int mode;       /* VIEW_* */
    int trim;       /* whitespace just after a tag is not shown */
    int think_open; /* the reasoning's opening was written */
    char pend[16];  /* text that may be the beginning of a tag */
    size_t n_pend;
    char *call; /* a tool call's text so far */
    size_t n_call, cap_call;
    server_gen *hg;                /* a harmony model's reply through its reader, or NULL */
    server_buf h_content, h_think; /*   what it made of it */
} chat_view;

static const char *const view_tags[] = {"<think>", "</think>", "<tool_call>", "</tool_call>"};

static void view_emit(chat_view *v, const char *s, size_t n) {
    for (; n && v->trim && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t'); s++, n--) {}
    if (!n) return;
    v->trim = 0;
    if (v->mode == VIEW_TEXT) {
        fwrite(s, 1, n, stdout);
    } else if (v->mode == VIEW_THINK) {
        if (v->hide_think) return;
        if (!v->think_open) fputs(v->tty ? "\033[2m" : "Thinking...\n", stdout);
        v->think_open = 1;
        fwrite(s, 1, n, stdout);
    } else if (v->n_call + n + 1 <= 65536) { /* a tool call longer than that is cut in the display only */
        if (v->n_call + n + 1 > v->cap_call) {
            size_t cap = (v->n_call + n + 1) * 2;
            char *nb = realloc(v->call, cap);
            if (!nb) return;
            v->call = nb;
            v->cap_call = cap;
        }
        memcpy(v->call + v->n_call, s, n);
        v->n_call += n;
        v->call[v->n_call] = 0;
    }
}

static void view_end_think(chat_view *v) {
    if (v->think_open) fputs(v->tty ? "\033[0m\n\n" : "\n...done thinking.\n\n", stdout);
    v->think_open = 0;
}

static void view_show_call(chat_view *v) {
    json_t *j = v->call ? json_loads(v->call, 0, NULL) : NULL;
    const char *name = json_string_value(json_object_get(j, "name"));
    json_t *args = json_object_get(j, "arguments");
    char *a = args ? json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    if (name)
        printf("%s%s(%s)\n", v->tty ? "\xe2\x86\x92 " : "-> ", name, a ? a : "");
    else /* not a call kiln can read: as written */
        printf("<tool_call>%s</tool_call>", v->call ? v->call : "");
    free(a);
    json_decref(j);
    v->n_call = 0;
    if (v->call) v->call[0] = 0;
}

static void view_tag(chat_view *v, int tag) {
    if (tag == 0) {
        v->mode = VIEW_THINK;
        v->think_open = 0;
    } else if (tag == 1) {
        if (v->mode == VIEW_THINK) view_end_think(v);
        v->mode = VIEW_TEXT;
    } else if (tag == 2) {
        v->mode = VIEW_TOOL;
        v->n_call = 0;
    } else if (v->mode == VIEW_TOOL) {
        view_show_call(v);
        v->mode = VIEW_TEXT;
    }
    v->trim = 1;
}

/* The harmony reader's sinks: reasoning and text shown as the tags'
 * would be, and kept; calls shown. */
static void view_h_text(server_gen *g, int kind, const char *s, size_t n, void *user) {
    (void)g;
    chat_view *v = user;
    const int mode = kind == SERVER_D_REASONING ? VIEW_THINK : VIEW_TEXT;
    if (mode != v->mode) {
        if (v->mode == VIEW_THINK) view_end_think(v);
        v->mode = mode;
        v->trim = 1;
    }
    view_emit(v, s, n);
    server_buf_put(kind == SERVER_D_REASONING ? &v->h_think : &v->h_content, s, n);
}

static void view_h_tool(server_gen *g, int index, json_t *call, void *user) {
    (void)g;
    (void)index;
    chat_view *v = user;
    if (v->mode == VIEW_THINK) view_end_think(v);
    v->mode = VIEW_TEXT;
    char *a = json_dumps(json_object_get(call, "arguments"), JSON_COMPACT | JSON_ENCODE_ANY);
    printf("%s%s(%s)\n", v->tty ? "\xe2\x86\x92 " : "-> ", json_string_value(json_object_get(call, "name")),
           a ? a : "");
    free(a);
}

static void view_put(chat_view *v, const char *s, size_t n) {
    if (v->hg) {
        server_gen_text(v->hg, s, n, 0);
        fflush(stdout);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!v->n_pend && c != '<') {
            size_t run = 1;
            while (i + run < n && s[i + run] != '<') run++;
            view_emit(v, s + i, run);
            i += run - 1;
            continue;
        }
        if (c == '<' && v->n_pend) { /* a new tag may begin here */
            view_emit(v, v->pend, v->n_pend);
            v->n_pend = 0;
        }
        v->pend[v->n_pend++] = c;
        int prefix = 0;
        for (int t = 0; t < 4; t++) {
            const size_t tl = strlen(view_tags[t]);
            if (v->n_pend == tl && !memcmp(v->pend, view_tags[t], tl)) {
                v->n_pend = 0;
                view_tag(v, t);
                prefix = 1;
                break;
            }
            if (v->n_pend < tl && !memcmp(v->pend, view_tags[t], v->n_pend)) prefix = 1;
        }
        if (!prefix) {
            view_emit(v, v->pend, v->n_pend);
            v->n_pend = 0;
        }
    }
    fflush(stdout);
}

/* The reply ended: what was held back goes out, an open reasoning closes. */
static void view_finish(chat_view *v) {
    if (v->hg) server_gen_text(v->hg, "", 0, 1);
    view_emit(v, v->pend, v->n_pend);
    v->n_pend = 0;
    if (v->mode == VIEW_THINK && v->think_open && v->tty) fputs("\033[0m", stdout);
    if (v->mode == VIEW_TOOL) printf("<tool_call>%s", v->call ? v->call : "");
    v->think_open = 0;
    v->mode = VIEW_TEXT;
    v->trim = 0;
    fflush(stdout);
}

/* What a slot's events do here: stream the text to stdout, keep it (chat)
 * and count. */
typedef struct sink {
    kiln_detok *d;
    gen_stats *st;
    double t0, t_first;
    char *out; /* the reply, when kept */
    size_t out_len;
    int keep_text;
    int oom;
    int done;
    gen_reason why;
    char err[256];
    /* stop strings: text that may begin one is held back */
    const cli_opts *o;
    char held[1024];
    size_t n_held;
    int stopped;     /* a stop string ended the text */
    chat_view *view; /* kiln chat's display, or NULL: the text as it is */
} sink;

/* Text that goes out: to stdout, and kept for chat.  Returns -1 out of memory. */
static int write_text(sink *k, const char *txt, size_t len) {
    if (!len) return 0;
    if (k->view) {
        view_put(k->view, txt, len);
    } else {
        fwrite(txt, 1, len, stdout);
        fflush(stdout);
    }
    if (k->keep_text) {
        char *nb = realloc(k->out, k->out_len + len + 1);
        if (!nb) {
            k->oom = 1;
            return -1;
        }
        memcpy(nb + k->out_len, txt, len);
        k->out_len += len;
        nb[k->out_len] = 0;
        k->out = nb;
    }
    return 0;
}

/* Text through the stop strings (final: nothing follows).  Returns 1 when
 * one matched: the text before it went out, the rest never does. */
static int put_text(sink *k, const char *txt, size_t len, int final) {
    if (!k->o || !k->o->n_stop) return write_text(k, txt, len) ? 1 : 0;
    while (len || final) {
        /* the held text is shorter than the longest stop string, so this
         * always takes at least one byte */
        size_t take = sizeof k->held - k->n_held < len ? sizeof k->held - k->n_held : len;
        memcpy(k->held + k->n_held, txt, take);
        k->n_held += take;
        txt += take;
        len -= take;
        size_t cut = k->n_held, keep = 0;
        for (int i = 0; i < k->o->n_stop; i++) {
            const char *st = k->o->stop[i];
            size_t sl = strlen(st);
            const char *h = memmem(k->held, k->n_held, st, sl);
            if (h && (size_t)(h - k->held) < cut) cut = (size_t)(h - k->held);
            /* the longest end of the held text that begins this stop string */
            for (size_t n = sl - 1 < k->n_held ? sl - 1 : k->n_held; n > keep; n--)
                if (!memcmp(k->held + k->n_held - n, st, n)) {
                    keep = n;
                    break;
                }
        }
        if (cut < k->n_held) {
            write_text(k, k->held, cut);
            k->n_held = 0;
            k->stopped = 1;
            return 1;
        }
        size_t out = final && !len ? k->n_held : k->n_held - keep;
        if (write_text(k, k->held, out)) return 1;
        memmove(k->held, k->held + out, k->n_held - out);
        k->n_held -= out;
        if (final && !len) break;
    }
    return 0;
}

static int on_event(void *user, const gen_event *ev, const float *logits) {
    sink *k = user;
    if (ev->kind == GEN_EV_DONE) {
        k->done = 1;
        k->why = ev->reason;
        k->st->n_drafted += ev->n_drafted;
        k->st->n_accepted += ev->n_accepted;
        snprintf(k->err, sizeof k->err, "%s", ev->error ? ev->error : "");
        return 0;
    }
    if (k->st->n_gen == 0) k->t_first = base_now();
    k->st->n_gen++;
    if (k->stopped) return 1;
    size_t len;
    const char *txt = kiln_detok_push(k->d, ev->tok.id, &len);
    return put_text(k, txt, len, 0);
}

/* Runs one slot (p, on sequence 0) through the generation core until it
 * ends, streaming the text to stdout.  The prompt's time is until the
 * first token; Ctrl-C cancels at the next step.  Returns 0, or 1 after
 * printing an error. */
static int run_slot(gen_batch *b, kiln_model *m, gen_params *p, gen_stats *st, sink *k) {
    k->d = kiln_detok_new(m);
    k->st = st;
    if (!k->d) return cli_fail("out of memory");
    p->on_event = on_event;
    p->user = k;
    gen_slot *slot;
    kiln_status rs = gen_batch_add(b, p, 0, &slot);
    if (rs != KILN_OK) {
        kiln_detok_free(k->d);
        fprintf(stderr, "kiln: %s\n", kiln_status_str(rs));
        return 1;
    }
    k->t0 = base_now();
    int rc = 0;
    while (!k->done) {
        if (g_sigint && !st->interrupted) {
            st->interrupted = 1;
            gen_slot_cancel(slot);
        }
        if (gen_batch_step(b) != KILN_OK && !k->done) rc = 1;
    }
    size_t len;
    const char *tail = kiln_detok_flush(k->d, &len);
    if (!k->stopped) put_text(k, tail, len, 1);
    const double t_end = base_now();
    const double t_first = st->n_gen ? k->t_first : t_end;
    st->t_prompt += t_first - k->t0;
    st->t_gen += t_end - t_first;
    kiln_detok_free(k->d);
    k->d = NULL;
    if (k->why == GEN_FAILED) {
        fprintf(stderr, "kiln: %s\n", k->err);
        rc = 1;
    } else if (k->oom) {
        fprintf(stderr, "kiln: out of memory\n");
        rc = 1;
    }
    return rc;
}

static void print_timings(const gen_stats *st, const spec *sp) {
    fprintf(stderr, "\nkiln: prompt %d tokens in %.3f s (%.2f t/s), generated %d tokens in %.3f s (%.2f t/s)\n",
            st->n_prompt, st->t_prompt, st->t_prompt > 0 ? st->n_prompt / st->t_prompt : 0.0, st->n_gen, st->t_gen,
            st->t_gen > 0 ? st->n_gen / st->t_gen : 0.0);
    if (sp)
        fprintf(stderr, "kiln: speculative decoding (%s): %d tokens proposed, %d accepted (%.1f %%)\n",
                kiln_spec_type_str(spec_params(sp)->type), st->n_drafted, st->n_accepted,
                st->n_drafted ? 100.0 * st->n_accepted / st->n_drafted : 0.0);
}

/* The proposer o asks for (--spec), on b; *out stays NULL without one.
 * Returns 0, or 1 after printing the error. */
static int attach_spec(const cli_opts *o, kiln_model *m, kiln_context *c, gen_batch *b, spec **out) {
    *out = NULL;
    if (o->spec.type == KILN_SPEC_NONE) return 0;
    if (spec_new(&o->spec, m, c, out) != KILN_OK) return cli_fail("--spec");
    gen_batch_set_proposer(b, spec_proposer(*out));
    return 0;
}

/* A slot's speculation as sp sets it. */
static void spec_slot(gen_params *p, const spec *sp) {
    if (!sp) return;
    p->n_draft = spec_params(sp)->n_max;
    p->spec_fixed = spec_params(sp)->fixed;
}

static int32_t *tokenize_alloc(kiln_model *m, const char *text, int add_special, int parse_special, int *n) {
    size_t len = strlen(text);
    int cap = (int)len + 8;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return NULL;
    *n = kiln_tokenize(m, text, len, add_special, parse_special, ids, cap);
    if (*n > cap) {
        cap = *n;
        int32_t *nb = realloc(ids, (size_t)cap * sizeof *ids);
        if (!nb) {
            free(ids);
            return NULL;
        }
        ids = nb;
        *n = kiln_tokenize(m, text, len, add_special, parse_special, ids, cap);
    }
    if (*n < 0) {
        free(ids);
        return NULL;
    }
    return ids;
}

/* A store pack's defaults (an Ollama model's params and system prompt)
 * take the options the command line left alone: pack_begin before the
 * options are parsed, pack_end after.  kiln chat renders with the pack's
 * Go template (an Ollama model's) when it has one. */
/* Most images a chat holds. */
#define CHAT_MAX_IMAGES 16

/* Most bytes of an image file read. */
#define CLI_IMAGE_MAX ((size_t)64 << 20)

/* The whole file (malloc'd) and its length, or NULL. */
static uint8_t *read_image_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 16;
            uint8_t *nb = cap <= CLI_IMAGE_MAX ? realloc(buf, cap) : NULL;
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        const size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    const int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* The prompt with o's --image files (or imgs[0..n_img), when given) as
 * tokens and image rows into *vp; each file read whole.  Returns 1 after
 * printing the error. */
static int image_prompt(kiln_model *m, const char *text, int add_bos, const char *const *files, int n_files,
                        const kiln_image_input *imgs, int n_img, vision_prompt *vp) {
    kiln_image_input in[CLI_MAX_IMAGES] = {{0}};
    uint8_t *bytes[CLI_MAX_IMAGES] = {0};
    int rc = 0;
    for (int i = 0; i < n_files && !rc; i++) {
        size_t len = 0;
        bytes[i] = read_image_file(files[i], &len);
        if (!bytes[i]) {
            fprintf(stderr, "kiln: cannot read the image %s\n", files[i]);
            rc = 1;
        }
        in[i] = (kiln_image_input){bytes[i], len, 0, 0};
    }
    if (!rc && model_image_prompt(m, text, strlen(text), add_bos, 1, n_files ? in : imgs, n_files ? n_files : n_img,
                                  vp) != KILN_OK)
        rc = cli_fail("image");
    for (int i = 0; i < n_files; i++) free(bytes[i]);
    return rc;
}

static cli_opts pack_begin(cli_opts *o) {
    cli_opts base = *o;
    cli_pack_mark(o);
    return base;
}

static void pack_end(cli_opts *o, const cli_opts *base, cli_pack *pk, const char **system) {
    cli_pack_apply(o, base, pk);
    if (system && !*system) *system = pk->system;
}

/* --json-schema: the schema compiled, or NULL after printing why. */
static sample_schema *schema_of(const cli_opts *o, const char *cmd) {
    json_error_t je;
    json_t *j = json_loads(o->json_schema, JSON_DECODE_ANY, &je);
    if (!j) {
        fprintf(stderr, "kiln %s: --json-schema: not JSON: %s\n", cmd, je.text);
        return NULL;
    }
    char err[300] = "";
    sample_schema *sc = sample_schema_compile(j, err, sizeof err);
    json_decref(j);
    if (!sc) fprintf(stderr, "kiln %s: --json-schema: %s\n", cmd, err);
    return sc;
}

int cli_run(int argc, char **argv) {
    cli_opts o;
    cli_opts_init(&o);
    cli_opts base = pack_begin(&o);
    for (int i = 1; i < argc; i++) {
        int r = cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            if (cli_help("run", argv[i])) return 0;
            fprintf(stderr, "kiln run: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    cli_pack pk;
    pack_end(&o, &base, &pk, NULL);
    cli_pack_free(&pk);
    if (cli_opts_finish(&o, "run")) return 2;
    sample_schema *schema = NULL;
    if (o.json_schema && !(schema = schema_of(&o, "run"))) return 2;
    if (cli_prompt_from_stdin(&o)) {
        sample_schema_free(schema);
        fprintf(stderr, "kiln run: no prompt (use -p TEXT, -f FILE, or pipe it in)\n");
        return 2;
    }
    if (o.verbose) kiln_set_log(NULL, NULL, KILN_LOG_DEBUG);
    kiln_model *m;
    kiln_context *c;
    if (cli_load(&o, &m, &c, 1)) {
        sample_schema_free(schema);
        return 1;
    }
    int rc = 1;
    gen_batch *b = NULL;
    spec *sp = NULL;
    int n_prompt = 0;
    int32_t *ids = NULL;
    vision_prompt vp = {0};
    if (o.n_image > 0) { /* the images encoded, the prompt's special tokens parsed (as llama-mtmd-cli) */
        if (image_prompt(m, o.prompt, 1, o.image, o.n_image, NULL, 0, &vp)) goto done;
        ids = malloc((size_t)(vp.n_tok > 0 ? vp.n_tok : 1) * sizeof *ids);
        if (ids) memcpy(ids, vp.tok, (size_t)vp.n_tok * sizeof *ids);
        n_prompt = vp.n_tok;
    } else {
        ids = tokenize_alloc(m, o.prompt, 1, 0, &n_prompt);
    }
    if (!ids) {
        cli_fail("tokenize");
        goto done;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "kiln run: the prompt has no tokens\n");
        goto done;
    }
    int n_ctx = kiln_context_n_ctx(c);
    if (n_prompt + (o.n_predict > 0 ? o.n_predict : 0) > n_ctx) {
        fprintf(stderr,
                "kiln run: the prompt (%d tokens) plus %d tokens to generate exceeds the context of %d tokens\n",
                n_prompt, o.n_predict, n_ctx);
        goto done;
    }
    if (gen_batch_new(m, c, 0, &b) != KILN_OK) {
        cli_fail("out of memory");
        goto done;
    }
    if (attach_spec(&o, m, c, b, &sp)) goto done;
    gen_params p = gen_params_default();
    p.prompt = ids;
    p.n_prompt = n_prompt;
    p.embd = vp.embd;
    p.n_embd_rows = vp.n_rows;
    p.mpos = vp.mpos;
    p.n_predict = o.n_predict;
    p.sampler = o.sp;
    spec_slot(&p, sp);
    p.ignore_eos = o.ignore_eos;
    sample_sv sv;
    sample_constraint cons;
    if (schema) {
        sample_sv_init(&sv, schema);
        sample_json_constraint(&cons, &sv);
        p.constraint = &cons;
    }
    gen_stats st = {n_prompt, 0, 0, 0, 0, 0, 0};
    sink k;
    memset(&k, 0, sizeof k);
    k.o = &o;
    catch_sigint();
    if (run_slot(b, m, &p, &st, &k)) goto done;
    if (k.why == GEN_LENGTH && o.n_predict < 0)
        fprintf(stderr, "\nkiln: stopped: the context of %d tokens is full\n", n_ctx);
    print_timings(&st, sp);
    if (st.interrupted) fprintf(stderr, "kiln run: interrupted\n");
    rc = st.interrupted ? 130 : 0; /* 128 + SIGINT, as a shell reports it */
done:
    free(ids);
    vision_prompt_free(&vp);
    gen_batch_free(b);
    spec_free(sp);
    kiln_context_free(c);
    kiln_model_free(m);
    sample_schema_free(schema);
    return rc;
}

/* ---------------------------------------------------------------- chat */

/* The conversation is rendered whole each turn with the model's Jinja
 * template (tokenizer.chat_template); the tokens already in the KV cache
 * that match the new rendering's prefix are kept and only the rest is fed.
 * A model without a template is continued as plain text. */
typedef struct chat_state {
    kiln_model *m;
    kiln_context *c;
    chat_tmpl *tmpl; /* the GGUF's template, or */
    kgt *go;         /* the pack's Go template (either: has_tmpl) */
    json_t *messages;
    int32_t *held; /* the conversation's tokens as last fed (with a template: the
                           rendered prompt; without: every message and reply) */
    int n_held, cap_held;
    int n_kv; /* of those, held by the KV cache */
    char bos[64], eos[64];
    int think;       /* /set think 1, /set nothink 0, -1 the template's default */
    int opens_think; /* the rendered prompt ends inside a <think> block */
    /* images (/image, --image): the conversation's, in the order of its
     * <__media__> markers; the last n_pending go with the next message */
    uint8_t *img[CHAT_MAX_IMAGES];
    size_t img_len[CHAT_MAX_IMAGES];
    int n_img, n_pending;
    vision_prompt vp; /* the last rendering's tokens and image rows */
} chat_state;

/* Drops images: the first n (a turn cut from the front) or the last n. */
static void chat_drop_images(chat_state *st, int n, int from_front) {
    if (n > st->n_img) n = st->n_img;
    for (int i = 0; i < n; i++) free(st->img[from_front ? i : st->n_img - 1 - i]);
    if (from_front) {
        memmove(st->img, st->img + n, (size_t)(st->n_img - n) * sizeof st->img[0]);
        memmove(st->img_len, st->img_len + n, (size_t)(st->n_img - n) * sizeof st->img_len[0]);
    }
    st->n_img -= n;
    if (st->n_pending > st->n_img) st->n_pending = st->n_img;
}

/* The images message i of the conversation carries (its markers). */
static int chat_images_of(const chat_state *st, size_t i) {
    const char *c = json_string_value(json_object_get(json_array_get(st->messages, i), "content"));
    int n = 0;
    for (const char *s = c; s && (s = strstr(s, VISION_MARKER)); s += sizeof VISION_MARKER - 1) n++;
    return n;
}

/* /image PATH: one more image for the next message.  0, or -1 after
 * printing why not. */
static int chat_add_image(chat_state *st, const char *path, int has_tmpl) {
    if (!kiln_model_has_vision(st->m)) {
        fprintf(stderr, "kiln chat: this model does not take images (it has no projector; start with --mmproj FILE)\n");
        return -1;
    }
    if (!has_tmpl) {
        fprintf(stderr, "kiln chat: images need the model's chat template\n");
        return -1;
    }
    if (st->n_img == CHAT_MAX_IMAGES) {
        fprintf(stderr, "kiln chat: a conversation holds at most %d images (/clear starts over)\n", CHAT_MAX_IMAGES);
        return -1;
    }
    size_t len = 0;
    uint8_t *b = read_image_file(path, &len);
    if (!b) {
        fprintf(stderr, "kiln chat: cannot read the image %s\n", path);
        return -1;
    }
    vision_rgb probe;
    if (vision_decode(b, len, &probe) != KILN_OK) { /* refused now rather than at the next message */
        fprintf(stderr, "kiln chat: %s: %s\n", path, kiln_last_error());
        free(b);
        return -1;
    }
    vision_rgb_free(&probe);
    st->img[st->n_img] = b;
    st->img_len[st->n_img++] = len;
    st->n_pending++;
    return 0;
}

static void piece_text(kiln_model *m, int32_t id, char *buf, int cap) {
    buf[0] = 0;
    if (id < 0) return;
    int n = kiln_token_to_piece(m, id, buf, cap - 1, 1);
    buf[n >= 0 && n < cap ? n : 0] = 0;
}

static int sigint_seen(void *arg) {
    (void)arg;
    return g_sigint != 0;
}

/* Renders the conversation (with an open assistant turn) to tokens; NULL
 * after saying why on stderr. */
static int32_t *render_chat(chat_state *st, int *n) {
    char err[256] = "out of memory";
    char *text = NULL;
    const chat_opts ro = {.cancelled = sigint_seen}; /* Ctrl-C stops a long render */
    if (st->go) {
        if (chat_gotmpl_render_chat_opts(st->go, st->messages, NULL, st->think, &ro, &text))
            snprintf(err, sizeof err, "%s", kiln_last_error());
    } else {
        json_t *vars = json_pack("{s:O, s:b, s:s, s:s}", "messages", st->messages, "add_generation_prompt", 1,
                                 "bos_token", st->bos, "eos_token", st->eos);
        if (vars && st->think >= 0) json_object_set_new(vars, "enable_thinking", json_boolean(st->think));
        if (vars && chat_render_opts(st->tmpl, vars, &ro, &text)) snprintf(err, sizeof err, "%s", kiln_last_error());
        json_decref(vars);
    }
    if (!text) {
        fprintf(stderr, "kiln chat: the chat template failed: %s\n", err);
        return NULL;
    }
    /* a template that opens the reasoning itself: the reply begins inside it */
    size_t tl = strlen(text);
    while (tl && (text[tl - 1] == '\n' || text[tl - 1] == ' ')) tl--;
    st->opens_think = tl >= 7 && !memcmp(text + tl - 7, "<think>", 7);
    /* templates that write the BOS text themselves get no second BOS */
    int add_bos = !(st->bos[0] && strncmp(text, st->bos, strlen(st->bos)) == 0);
    int32_t *ids = NULL;
    vision_prompt_free(&st->vp);
    if (st->n_img > 0) { /* the conversation's images at their markers */
        kiln_image_input in[CHAT_MAX_IMAGES];
        for (int i = 0; i < st->n_img; i++) in[i] = (kiln_image_input){st->img[i], st->img_len[i], 0, 0};
        if (image_prompt(st->m, text, add_bos, NULL, 0, in, st->n_img, &st->vp) == 0 &&
            (ids = malloc((size_t)(st->vp.n_tok > 0 ? st->vp.n_tok : 1) * sizeof *ids))) {
            memcpy(ids, st->vp.tok, (size_t)st->vp.n_tok * sizeof *ids);
            *n = st->vp.n_tok;
        }
    } else {
        ids = tokenize_alloc(st->m, text, add_bos, 1, n);
    }
    if (!ids)
        fprintf(stderr, "kiln chat: the rendered conversation (%zu bytes) could not be tokenized\n", strlen(text));
    free(text);
    return ids;
}

static int hold(chat_state *st, const int32_t *ids, int n) {
    if (st->n_held + n > st->cap_held) {
        int cap = (st->n_held + n) * 2;
        int32_t *nh = realloc(st->held, (size_t)cap * sizeof *nh);
        if (!nh) return -1;
        st->held = nh;
        st->cap_held = cap;
    }
    memcpy(st->held + st->n_held, ids, (size_t)n * sizeof *ids);
    st->n_held += n;
    return 0;
}

/* One chat message from stdin into *buf (no trailing newline): a line of
 * any length, or the lines between two lines of just \"\"\".  Returns its
 * length (0 for an empty line), -1 at the end of input. */
static int read_message(char **buf, size_t *cap) {
    char *ln = NULL;
    size_t lcap = 0, len = 0;
    int multi = 0, rc = -1;
    fprintf(stderr, "> ");
    fflush(stderr);
    for (ssize_t k; (k = getline(&ln, &lcap, stdin)) >= 0;) {
        while (k && (ln[k - 1] == '\n' || ln[k - 1] == '\r')) ln[--k] = 0;
        if (!strcmp(ln, "\"\"\"")) {
            if (multi) {
                rc = 0;
                break;
            } /* the closing line */
            multi = 1;
            fprintf(stderr, ". ");
            fflush(stderr);
            continue;
        }
        const size_t need = len + (multi && len ? 1 : 0) + (size_t)k + 1;
        if (need > *cap) {
            char *nb = realloc(*buf, need * 2);
            if (!nb) break;
            *buf = nb;
            *cap = need * 2;
        }
        if (multi && len) (*buf)[len++] = '\n';
        memcpy(*buf + len, ln, (size_t)k + 1);
        len += (size_t)k;
        if (!multi) {
            rc = 0;
            break;
        }
        fprintf(stderr, ". ");
        fflush(stderr);
    }
    const int interrupted = rc < 0 && g_sigint;
    free(ln);
    if (interrupted) { /* Ctrl-C at the prompt: drop what was typed, ask again */
        g_sigint = 0;
        clearerr(stdin);
        fprintf(stderr, "\n(/bye or Ctrl-D ends the chat)\n");
        return 0;
    }
    if (rc < 0 && !(multi && len)) return -1; /* end of input (an open \"\"\" sends what it has) */
    return (int)len;
}

/* Sampling settings /set parameter can change, by Ollama's names. */
static int set_parameter(cli_opts *o, const char *name, const char *value) {
    char *end;
    const double v = strtod(value, &end);
    if (end == value || *end) return -1;
    kiln_sampler_params *p = &o->sp;
    if (!strcmp(name, "temperature"))
        p->temperature = (float)v;
    else if (!strcmp(name, "top_k"))
        p->top_k = (int32_t)v;
    else if (!strcmp(name, "top_p"))
        p->top_p = (float)v;
    else if (!strcmp(name, "min_p"))
        p->min_p = (float)v;
    else if (!strcmp(name, "repeat_penalty"))
        p->repeat_penalty = (float)v;
    else if (!strcmp(name, "repeat_last_n"))
        p->repeat_last_n = (int32_t)v;
    else if (!strcmp(name, "presence_penalty"))
        p->presence_penalty = (float)v;
    else if (!strcmp(name, "frequency_penalty"))
        p->frequency_penalty = (float)v;
    else if (!strcmp(name, "seed"))
        p->seed = (uint64_t)v;
    else if (!strcmp(name, "num_predict"))
        o->n_predict = (int)v;
    else
        return -1;
    return 0;
}

/* /set system TEXT and /set parameter NAME VALUE, as in Ollama's REPL.  A
 * new system prompt replaces the old one (the next turn re-renders the
 * conversation, so the cached prefix is reused only up to it); new sampling
 * settings apply from the next reply (each reply's sampler sees the whole
 * rendered conversation, so the penalties see the same history). */
static void chat_set(chat_state *st, cli_opts *o, int *has_system, char *args) {
    if (!strcmp(args, "think") || !strcmp(args, "nothink")) {
        st->think = args[0] == 't';
        fprintf(stderr, "kiln chat: thinking %s\n", st->think ? "on" : "off");
        return;
    }
    if (!strncmp(args, "system ", 7) && args[7]) {
        if (!st->tmpl && !st->go) {
            fprintf(stderr, "kiln chat: the model has no chat template, so there is no system prompt\n");
            return;
        }
        json_t *m = json_pack("{s:s, s:s}", "role", "system", "content", args + 7);
        if (*has_system)
            json_array_set_new(st->messages, 0, m);
        else
            json_array_insert_new(st->messages, 0, m);
        *has_system = 1;
        fprintf(stderr, "kiln chat: system prompt set\n");
        return;
    }
    char *name = !strncmp(args, "parameter ", 10) ? args + 10 : NULL;
    char *value = name ? strchr(name, ' ') : NULL;
    if (value) *value++ = 0;
    if (!value || set_parameter(o, name, value)) {
        fprintf(stderr, "kiln chat: /set system TEXT, /set think, /set nothink, or /set parameter NAME VALUE with NAME "
                        "one of temperature, "
                        "top_k, top_p, min_p, repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty, "
                        "seed, num_predict\n");
        return;
    }
    fprintf(stderr, "kiln chat: %s set to %s\n", name, value);
}

/* st->m's chat template: the pack's Go template (template_go, may be NULL),
 * else the GGUF's Jinja one, else none (text is continued). */
static void chat_templates(chat_state *st, const char *template_go) {
    chat_free(st->tmpl);
    chat_gotmpl_free(st->go);
    st->tmpl = NULL;
    st->go = NULL;
    const char *src = kiln_model_chat_template(st->m);
    if (template_go) {
        if (chat_gotmpl_compile(template_go, strlen(template_go), &st->go))
            fprintf(stderr, "kiln chat: the pack's Go template does not compile (%s); using the GGUF's\n",
                    kiln_last_error());
    }
    if (src && !st->go) {
        if (chat_compile(src, strlen(src), &st->tmpl))
            fprintf(stderr, "kiln chat: the model's chat template does not compile (%s); continuing text\n",
                    kiln_last_error());
    }
    piece_text(st->m, kiln_token_bos(st->m), st->bos, sizeof st->bos);
    piece_text(st->m, kiln_token_eos(st->m), st->eos, sizeof st->eos);
}

static const char *template_words(const chat_state *st) {
    return st->go     ? "the pack's template"
           : st->tmpl ? "the model's chat template"
                      : "no chat template: text is continued";
}

/* /load NAME: another model (a file or a store name) with the chat's
 * settings, as Ollama's /load; the conversation starts over (the system
 * prompt stays; the new pack's own is taken when none was set).  The old
 * model stays when the new one does not load. */
static void chat_load(chat_state *st, const cli_opts *o, cli_pack *pk, gen_batch **gb, spec **sp, const char *name,
                      int *has_system, char **owned_name) {
    cli_opts o2 = *o;
    char *nm = strdup(name);
    if (!nm) return;
    o2.model = nm;
    kiln_model *m2 = NULL;
    kiln_context *c2 = NULL;
    gen_batch *gb2 = NULL;
    if (cli_load(&o2, &m2, &c2, 1) || gen_batch_new(m2, c2, 0, &gb2) != KILN_OK) {
        fprintf(stderr, "kiln chat: /load %s failed; the chat goes on with the model it had\n", name);
        kiln_context_free(c2);
        kiln_model_free(m2);
        free(nm);
        return;
    }
    /* the new pack's template and system prompt; the chat keeps its own sampling settings */
    cli_opts scratch = o2;
    cli_pack_mark(&scratch);
    cli_pack npk;
    cli_pack_apply(&scratch, o, &npk);
    spec_free(*sp);
    *sp = NULL;
    gen_batch_free(*gb);
    kiln_context_free(st->c);
    kiln_model_free(st->m);
    st->m = m2;
    st->c = c2;
    *gb = gb2;
    if (attach_spec(&o2, st->m, st->c, *gb, sp))
        fprintf(stderr, "kiln chat: speculative decoding is off for %s\n", name);
    chat_templates(st, npk.template_go);
    cli_pack_free(pk);
    *pk = npk;
    while (json_array_size(st->messages) > (*has_system ? 1u : 0u))
        json_array_remove(st->messages, json_array_size(st->messages) - 1);
    if (!*has_system && pk->system && (st->tmpl || st->go)) {
        json_array_insert_new(st->messages, 0, json_pack("{s:s, s:s}", "role", "system", "content", pk->system));
        *has_system = 1;
    }
    st->n_held = st->n_kv = 0;
    free(*owned_name);
    *owned_name = nm;
    kiln_model_info info;
    kiln_model_get_info(st->m, &info);
    fprintf(stderr, "kiln chat: loaded %s: %s (%s); the conversation starts over\n", name,
            info.name[0] ? info.name : info.arch, template_words(st));
}

/* /save NAME: a new model in the store made of this one with the chat's
 * system prompt and sampling settings, as Ollama's /save (a model given as
 * a file is imported, linked, first).  kiln chat -m NAME starts from them. */
static void chat_save(const chat_state *st, const cli_opts *o, const char *model, const char *name) {
    const json_t *sys = json_array_size(st->messages) ? json_array_get(st->messages, 0) : NULL;
    const char *system = sys && !strcmp(json_string_value(json_object_get(sys, "role")), "system")
                             ? json_string_value(json_object_get(sys, "content"))
                             : NULL;
    const kiln_sampler_params *p = &o->sp;
    json_t *opts = json_pack("{s:f,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:i}", "temperature", (double)p->temperature, "top_k",
                             (int)p->top_k, "top_p", (double)p->top_p, "min_p", (double)p->min_p, "repeat_penalty",
                             (double)p->repeat_penalty, "repeat_last_n", (int)p->repeat_last_n, "presence_penalty",
                             (double)p->presence_penalty, "frequency_penalty", (double)p->frequency_penalty, "num_ctx",
                             (int)kiln_context_n_ctx(st->c));
    if (opts && o->n_predict > 0) json_object_set_new(opts, "num_predict", json_integer(o->n_predict));
    if (opts && o->n_stop) {
        json_t *stop = json_array();
        for (int i = 0; i < o->n_stop; i++) json_array_append_new(stop, json_string(o->stop[i]));
        json_object_set_new(opts, "stop", stop);
    }
    char *opts_txt = opts ? json_dumps(opts, JSON_COMPACT | JSON_REAL_PRECISION(7)) : NULL; /* floats as set */
    json_decref(opts);
    kiln_store *s = NULL;
    char id[65] = "";
    const char *src = model;
    struct stat sb;
    kiln_status rc = opts_txt ? kiln_store_open(NULL, &s) : KILN_ERR_NOMEM;
    if (!rc && stat(model, &sb) == 0) { /* a file: into the store first */
        rc = kiln_store_import(s, model, name, KILN_STORE_LINK, NULL, NULL, id);
        src = id;
    }
    char saved[65] = "";
    if (!rc) rc = kiln_store_save_as(s, src, name, system, opts_txt, saved);
    if (rc)
        fprintf(stderr, "kiln chat: /save %s: %s\n", name, kiln_last_error());
    else
        fprintf(stderr, "kiln chat: saved %s (%.12s): its system prompt and settings are this chat's\n", name, saved);
    kiln_store_close(s);
    free(opts_txt);
}

/* /show [info|parameters|system|template], as in Ollama's REPL. */
static void chat_show(const chat_state *st, const cli_opts *o, const char *model, const char *tmpl_text,
                      const char *what) {
    kiln_model_info info;
    kiln_model_get_info(st->m, &info);
    const kiln_sampler_params *p = &o->sp;
    const json_t *sys = json_array_size(st->messages) ? json_array_get(st->messages, 0) : NULL;
    const char *system = sys && !strcmp(json_string_value(json_object_get(sys, "role")), "system")
                             ? json_string_value(json_object_get(sys, "content"))
                             : NULL;
    if (!*what || !strcmp(what, "info")) {
        char params[32];
        base_fmt_count((double)info.n_params, params, sizeof params);
        printf("  Model\n    %-20s %s\n    %-20s %s\n    %-20s %s\n    %-20s %d\n    %-20s %d\n    %-20s %d\n"
               "    %-20s %s\n    %-20s %s\n",
               "name", model, "architecture", info.arch, "parameters", params, "context length", info.n_ctx_train,
               "context (this chat)", kiln_context_n_ctx(st->c), "embedding length", info.n_embd, "quantization",
               info.ftype, "template",
               st->go     ? "the pack's (Go)"
               : st->tmpl ? "the model's (Jinja)"
                          : "none: text is continued");
        printf("  Thinking\n    %s\n", st->think < 0 ? "the template's default" : st->think ? "on" : "off");
        printf("  System\n    %s\n", system ? system : "(none)");
        return;
    }
    if (!strcmp(what, "parameters")) {
        printf("temperature        %g\ntop_k              %d\ntop_p              %g\nmin_p              %g\n"
               "repeat_penalty     %g\nrepeat_last_n      %d\npresence_penalty   %g\nfrequency_penalty  %g\n"
               "seed               %llu\nnum_predict        %d\nnum_ctx            %d\n",
               p->temperature, p->top_k, p->top_p, p->min_p, p->repeat_penalty, p->repeat_last_n, p->presence_penalty,
               p->frequency_penalty, (unsigned long long)p->seed, o->n_predict, kiln_context_n_ctx(st->c));
        for (int i = 0; i < o->n_stop; i++) printf("stop               \"%s\"\n", o->stop[i]);
        return;
    }
    if (!strcmp(what, "system")) {
        printf("%s\n", system ? system : "No system message was specified for this model.");
        return;
    }
    if (!strcmp(what, "template")) {
        printf("%s\n", tmpl_text ? tmpl_text : "No template was specified for this model.");
        return;
    }
    fprintf(stderr, "kiln chat: /show info, /show parameters, /show system or /show template\n");
}

int cli_chat(int argc, char **argv) {
    cli_opts o;
    cli_opts_init(&o);
    const char *system = NULL;
    int hide_think = 0, think = -1;
    cli_opts base = pack_begin(&o);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--hidethinking")) {
            hide_think = 1;
            continue;
        }
        if (!strcmp(argv[i], "--think") || !strcmp(argv[i], "--think=true") || !strcmp(argv[i], "--nothink") ||
            !strcmp(argv[i], "--think=false")) {
            think = !strcmp(argv[i], "--think") || !strcmp(argv[i], "--think=true");
            continue;
        }
        if ((!strcmp(argv[i], "--system") || !strcmp(argv[i], "-sys") || !strcmp(argv[i], "--system-prompt")) &&
            i + 1 < argc) {
            system = argv[++i];
            continue;
        }
        int r = cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            if (cli_help("chat", argv[i])) return 0;
            fprintf(stderr, "kiln chat: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    cli_pack pk;
    pack_end(&o, &base, &pk, &system);
    sample_schema *schema = NULL;
    if (cli_opts_finish(&o, "chat") || (o.json_schema && !(schema = schema_of(&o, "chat")))) {
        cli_pack_free(&pk);
        return 2;
    }
    chat_state st;
    memset(&st, 0, sizeof st);
    st.think = think;
    chat_view view = {.tty = isatty(STDOUT_FILENO) && !getenv("NO_COLOR"), .hide_think = hide_think};
    if (cli_load(&o, &st.m, &st.c, 1)) {
        cli_pack_free(&pk);
        sample_schema_free(schema);
        return 1;
    }
    catch_sigint();
    kiln_model_info info;
    kiln_model_get_info(st.m, &info);
    chat_templates(&st, pk.template_go);
    int has_tmpl = st.tmpl || st.go;
    char *loaded = NULL;                /* the name /load gave, owned */
    for (int i = 0; i < o.n_image; i++) /* --image: with the first message */
        if (chat_add_image(&st, o.image[i], has_tmpl)) {
            chat_drop_images(&st, st.n_img, 0);
            cli_pack_free(&pk);
            sample_schema_free(schema);
            kiln_context_free(st.c);
            kiln_model_free(st.m);
            return 1;
        }
    st.messages = json_array();
    if (system) json_array_append_new(st.messages, json_pack("{s:s, s:s}", "role", "system", "content", system));
    int has_system = system != NULL;
    /* -p TEXT (or -f FILE): one message, answered with the model's template,
     * then the chat ends, as `ollama run MODEL "prompt"` does */
    const char *once = o.prompt;
    if (!once)
        fprintf(stderr, "kiln chat: %s (%s). /help for commands; /bye or Ctrl-D ends.\n",
                info.name[0] ? info.name : info.arch, template_words(&st));
    int rc = 1;
    char *line = NULL;
    size_t line_cap = 0;
    gen_batch *gb = NULL;
    spec *sp = NULL;
    if (gen_batch_new(st.m, st.c, 0, &gb) != KILN_OK) {
        cli_fail("out of memory");
        goto done;
    }
    if (attach_spec(&o, st.m, st.c, gb, &sp)) goto done;
    for (int turn = 0;; turn++) {
        int got;
        if (once) {
            if (turn) break;
            const size_t len = strlen(once);
            if (len + 1 > line_cap) {
                char *nb = realloc(line, len + 1);
                if (!nb) {
                    cli_fail("out of memory");
                    goto done;
                }
                line = nb;
                line_cap = len + 1;
            }
            memcpy(line, once, len + 1);
            got = (int)len;
        } else {
            got = read_message(&line, &line_cap);
        }
        if (got < 0) break; /* end of input */
        if (got == 0) continue;
        if (once) {
            /* the message as written, never a command */
        } else if (line[0] == '/' && line[1] == '/')
            memmove(line, line + 1, (size_t)got); /* //TEXT sends /TEXT */
        else if (line[0] == '/') {                /* a command, as in Ollama's REPL */
            if (!strcmp(line, "/bye") || !strcmp(line, "/exit")) break;
            if (!strcmp(line, "/clear")) { /* forget the turns, keep the system prompt */
                while (json_array_size(st.messages) > (has_system ? 1u : 0u))
                    json_array_remove(st.messages, json_array_size(st.messages) - 1);
                kiln_seq_truncate(st.c, 0, 0);
                st.n_held = st.n_kv = 0;
                chat_drop_images(&st, st.n_img, 0);
                fprintf(stderr, "kiln chat: conversation cleared\n");
                continue;
            }
            if (!strncmp(line, "/set ", 5)) {
                chat_set(&st, &o, &has_system, line + 5);
                continue;
            }
            if (!strncmp(line, "/save ", 6) && line[6]) {
                chat_save(&st, &o, loaded ? loaded : o.model, line + 6);
                continue;
            }
            if (!strncmp(line, "/load ", 6) && line[6]) {
                chat_load(&st, &o, &pk, &gb, &sp, line + 6, &has_system, &loaded);
                has_tmpl = st.tmpl || st.go;
                chat_drop_images(&st, st.n_img, 0);
                continue;
            }
            if (!strncmp(line, "/image ", 7) && line[7]) {
                if (!chat_add_image(&st, line + 7, has_tmpl))
                    fprintf(stderr, "kiln chat: the image goes with your next message\n");
                continue;
            }
            if (!strcmp(line, "/show") || !strncmp(line, "/show ", 6)) {
                chat_show(&st, &o, loaded ? loaded : o.model,
                          st.go     ? pk.template_go
                          : st.tmpl ? kiln_model_chat_template(st.m)
                                    : NULL,
                          line[5] ? line + 6 : "");
                fflush(stdout);
                continue;
            }
            if (strcmp(line, "/help") && strcmp(line, "/?")) fprintf(stderr, "kiln chat: unknown command '%s'\n", line);
            fprintf(stderr,
                    "  /clear      forget the conversation (the system prompt stays)\n"
                    "  /set system TEXT             set the system prompt\n"
                    "  /set parameter NAME VALUE    temperature, top_k, top_p, min_p, seed, num_predict, ...\n"
                    "  /set think, /set nothink     let the model reason before it answers, or not\n"
                    "  /show [info|parameters|system|template]   the model and this chat's settings\n"
                    "  /load MODEL  chat with another model (a file or a store name); starts over\n"
                    "  /image PATH  an image (PNG, JPEG, WebP) for your next message (a model with a projector)\n"
                    "  /save NAME   store this model with the chat's system prompt and settings as NAME\n"
                    "  /bye        end (also Ctrl-D)\n"
                    "  \"\"\"         alone on a line begins and ends a message of several lines\n"
                    "  //TEXT      sends /TEXT\n");
            continue;
        }
        /* the whole conversation as tokens: rendered by the template, or
         * the text so far with the new message after it */
        int n = 0;
        int32_t *ids;
        const int n_before = st.n_held;
        if (has_tmpl) {
            /* the pending images' markers first, as llama-mtmd-cli puts them */
            char *content = malloc(strlen(line) + (size_t)st.n_pending * (sizeof VISION_MARKER - 1) + 1);
            if (!content) goto done;
            content[0] = 0;
            for (int i = 0; i < st.n_pending; i++) strcat(content, VISION_MARKER);
            strcat(content, line);
            st.n_pending = 0;
            json_array_append_new(st.messages, json_pack("{s:s, s:s}", "role", "user", "content", content));
            free(content);
            ids = render_chat(&st, &n);
        } else {
            int k = 0;
            int32_t *msg = tokenize_alloc(st.m, line, st.n_held == 0, 0, &k);
            ids = msg && !hold(&st, msg, k) ? st.held : NULL;
            n = st.n_held;
            free(msg);
        }
        if (!ids) goto done;
        const int n_ctx = kiln_context_n_ctx(st.c);
        /* A conversation that outgrows the context loses its oldest turns
         * (the system prompt stays), as Ollama does, with room left for a
         * reply: -n's tokens, or a quarter of the context. */
        const int reserve = o.n_predict > 0 && o.n_predict < n_ctx / 2 ? o.n_predict : n_ctx / 4;
        if (n + reserve > n_ctx) {
            int dropped = 0;
            if (has_tmpl) {
                const size_t first = has_system ? 1 : 0;
                while (ids && n + reserve > n_ctx && json_array_size(st.messages) > first + 1) {
                    chat_drop_images(&st, chat_images_of(&st, first), 1);
                    json_array_remove(st.messages, first); /* a turn: the message and the replies after it */
                    while (json_array_size(st.messages) > first + 1 &&
                           strcmp(json_string_value(json_object_get(json_array_get(st.messages, first), "role")),
                                  "user")) {
                        chat_drop_images(&st, chat_images_of(&st, first), 1);
                        json_array_remove(st.messages, first);
                    }
                    dropped++;
                    free(ids);
                    ids = render_chat(&st, &n);
                }
                if (!ids) goto done;
            } else if (n_before > 0) { /* plain text: the oldest tokens go, the BOS stays */
                const int lead = kiln_token_bos(st.m) >= 0 && st.held[0] == kiln_token_bos(st.m) ? 1 : 0;
                const int want = n_ctx - reserve;
                const int cut = n - want > n_before - lead ? n_before - lead : n - want;
                if (cut > 0) {
                    memmove(st.held + lead, st.held + lead + cut, (size_t)(n - lead - cut) * sizeof *st.held);
                    st.n_held = n = n - cut;
                    dropped = cut;
                    kiln_seq_truncate(st.c, 0, 0);
                    st.n_kv = 0;
                }
            }
            if (dropped)
                fprintf(stderr,
                        "kiln chat: the conversation outgrew the context of %d tokens: dropped the oldest %d %s%s\n",
                        n_ctx, dropped, has_tmpl ? (dropped == 1 ? "turn" : "turns") : "tokens",
                        has_system && has_tmpl ? " (the system prompt stays)" : "");
        }
        if (n + 1 > n_ctx) { /* the message alone does not fit: not sent, the chat goes on */
            fprintf(stderr, "kiln chat: this message makes %d tokens, over the context of %d tokens; it was not sent\n",
                    n, n_ctx);
            if (has_tmpl) {
                chat_drop_images(&st, chat_images_of(&st, json_array_size(st.messages) - 1), 0);
                json_array_remove(st.messages, json_array_size(st.messages) - 1);
                free(ids);
            } else { /* back to before the message (or to nothing, once trimmed) */
                st.n_held = st.n_kv ? n_before : 0;
                if (!st.n_held) {
                    kiln_seq_truncate(st.c, 0, 0);
                    st.n_kv = 0;
                }
            }
            continue;
        }
        /* the cache keeps the prefix the new tokens share */
        int keep = 0;
        while (keep < st.n_kv && keep < n && st.held[keep] == ids[keep]) keep++;
        if (keep == n) keep--;                         /* always feed at least one token */
        keep = kiln_seq_truncate_point(st.c, 0, keep); /* a recurrent state resumes only at a snapshot */
        int budget = n_ctx - n - 1;
        gen_params p = gen_params_default();
        p.prompt = ids;
        p.n_prompt = n;
        p.embd = st.n_img ? st.vp.embd : NULL;
        p.n_embd_rows = st.n_img ? st.vp.n_rows : 0;
        p.mpos = st.n_img ? st.vp.mpos : NULL;
        p.n_past = keep;
        p.keep = 1;
        p.reuse = 1; /* keys the prompt's end, where the reply is cut back to */
        p.n_predict = o.n_predict < 0 || o.n_predict > budget ? budget : o.n_predict;
        p.sampler = o.sp;
        spec_slot(&p, sp);
        p.ignore_eos = o.ignore_eos;
        sample_sv sv;
        sample_constraint cons;
        if (schema) { /* each reply is one value */
            sample_sv_init(&sv, schema);
            sample_json_constraint(&cons, &sv);
            p.constraint = &cons;
        }
        gen_stats gs = {n - keep, 0, 0, 0, 0, 0, 0};
        sink k;
        memset(&k, 0, sizeof k);
        k.o = &o;
        k.keep_text = 1;
        k.view = &view;
        view.mode = has_tmpl && st.opens_think ? VIEW_THINK : VIEW_TEXT;
        view.trim = view.mode == VIEW_THINK;
        view.think_open = 0;
        server_gen hg;
        server_gen_init(&hg, st.m, 0);
        view.hg = hg.harmony && has_tmpl ? &hg : NULL;
        view.h_content.len = view.h_think.len = 0;
        hg.on_text = view_h_text;
        hg.on_tool = view_h_tool;
        hg.user = &view;
        int fr = run_slot(gb, st.m, &p, &gs, &k);
        view_finish(&view);
        const int harmony = view.hg != NULL;
        view.hg = NULL;
        server_gen_free(&hg);
        if (k.why == GEN_FAILED) st.n_kv = 0; /* the core emptied the sequence */
        if (fr || k.why == GEN_FAILED) {
            if (ids != st.held) free(ids);
            free(k.out);
            goto done;
        }
        if (gs.interrupted && gs.n_gen == 0) { /* Ctrl-C during the prompt: the message is not sent */
            keep = kiln_seq_truncate_point(st.c, 0, keep);
            kiln_seq_truncate(st.c, 0, keep);
            st.n_kv = keep;
            if (has_tmpl) {
                chat_drop_images(&st, chat_images_of(&st, json_array_size(st.messages) - 1), 0);
                json_array_remove(st.messages, json_array_size(st.messages) - 1);
            } else {
                st.n_held = n_before;
            }
            if (ids != st.held) free(ids);
            free(k.out);
            g_sigint = 0;
            fprintf(stderr, "\n");
            continue;
        }
        g_sigint = 0; /* Ctrl-C ended the reply early: what was shown stays in the conversation */
        printf("\n");
        /* the cache keeps the prompt; the reply's tokens come back with the
         * next turn's text (re-rendered by the template, or re-tokenized) */
        const int cut = kiln_seq_truncate_point(st.c, 0, n);
        kiln_seq_truncate(st.c, 0, cut);
        st.n_kv = cut;
        if (has_tmpl) {
            st.n_held = 0;
            int hr = hold(&st, ids, n);
            free(ids);
            if (hr) goto done;
            json_t *msg = json_pack("{s:s, s:s}", "role", "assistant", "content", k.out ? k.out : "");
            if (harmony) { /* the final text, and the analysis as thinking */
                json_object_set_new(msg, "content",
                                    server_jstr(view.h_content.p ? view.h_content.p : "", view.h_content.len));
                if (view.h_think.len)
                    json_object_set_new(msg, "thinking", server_jstr(view.h_think.p, view.h_think.len));
            }
            json_array_append_new(st.messages, msg);
        } else if (k.out_len) {
            int nr = 0;
            int32_t *r = tokenize_alloc(st.m, k.out, 0, 0, &nr);
            if (!r || hold(&st, r, nr)) {
                free(r);
                free(k.out);
                goto done;
            }
            free(r);
        }
        free(k.out);
    }
    rc = 0;
done:
    free(line);
    free(loaded);
    free(view.call);
    server_buf_free(&view.h_content);
    server_buf_free(&view.h_think);
    json_decref(st.messages);
    chat_free(st.tmpl);
    chat_gotmpl_free(st.go);
    cli_pack_free(&pk);
    sample_schema_free(schema);
    free(st.held);
    chat_drop_images(&st, st.n_img, 0);
    vision_prompt_free(&st.vp);
    gen_batch_free(gb);
    spec_free(sp);
    kiln_context_free(st.c);
    kiln_model_free(st.m);
    return rc;
}
