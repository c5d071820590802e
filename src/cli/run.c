/* kiln run and kiln chat: prompt in, streamed continuation out.  Only the
 * generated text goes to stdout; diagnostics and timings go to stderr. */
#include "cli.h"

#include "base/base.h"

#include "chat/template.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gen_stats {
    int n_prompt, n_gen;
    double t_prompt, t_gen;
    int interrupted; /* Ctrl-C stopped the generation */
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

#define FEED_INTERRUPTED 2

/* Feeds ids (appending to sequence 0) in chunks of the batch size; the
 * logits of the last id are left in the context.  Returns 0, 1 after an
 * error (printed) or FEED_INTERRUPTED when Ctrl-C came between chunks. */
static int feed(kiln_context *c, const int32_t *ids, int n, int n_batch) {
    for (int i = 0; i < n; i += n_batch) {
        if (g_sigint) return FEED_INTERRUPTED;
        int k = n - i < n_batch ? n - i : n_batch;
        kiln_batch b = {k, ids + i, NULL, NULL, NULL};
        if (kiln_decode(c, &b) != KILN_OK) return cli_fail("decode");
    }
    return 0;
}

/* Samples up to n_predict tokens after the prompt already fed; streams the
 * text to stdout and, when out is not NULL, appends it there. */
static int generate(kiln_model *m, kiln_context *c, kiln_sampler *s, int last_idx, int n_predict, gen_stats *st,
                    char **out, size_t *out_len) {
    kiln_detok *d = kiln_detok_new(m);
    if (!d) return cli_fail("out of memory");
    const float *logits = kiln_get_logits(c, last_idx);
    double t0 = kb_now();
    int rc = 0;
    for (int i = 0; n_predict < 0 || i < n_predict; i++) {
        if (g_sigint) {
            st->interrupted = 1;
            break;
        }
        int32_t id = kiln_sampler_sample(s, logits);
        kiln_sampler_accept(s, id);
        if (kiln_token_is_eog(m, id)) break;
        size_t len;
        const char *txt = kiln_detok_push(d, id, &len);
        fwrite(txt, 1, len, stdout);
        fflush(stdout);
        if (out && len) {
            char *nb = realloc(*out, *out_len + len + 1);
            if (nb) {
                memcpy(nb + *out_len, txt, len);
                *out_len += len;
                nb[*out_len] = 0;
                *out = nb;
            }
        }
        st->n_gen++;
        if (n_predict < 0 && kiln_seq_len(c, 0) >= kiln_context_n_ctx(c)) {
            fprintf(stderr, "\nkiln: stopped: the context of %d tokens is full\n", kiln_context_n_ctx(c));
            break;
        }
        if (n_predict >= 0 && i == n_predict - 1) break; /* no need to decode the last token */
        kiln_batch b = {1, &id, NULL, NULL, NULL};
        if (kiln_decode(c, &b) != KILN_OK) { rc = cli_fail("decode"); break; }
        logits = kiln_get_logits(c, 0);
    }
    size_t len;
    const char *tail = kiln_detok_flush(d, &len);
    fwrite(tail, 1, len, stdout);
    fflush(stdout);
    st->t_gen += kb_now() - t0;
    kiln_detok_free(d);
    return rc;
}

static void print_timings(const gen_stats *st) {
    fprintf(stderr, "\nkiln: prompt %d tokens in %.3f s (%.2f t/s), generated %d tokens in %.3f s (%.2f t/s)\n",
            st->n_prompt, st->t_prompt, st->t_prompt > 0 ? st->n_prompt / st->t_prompt : 0.0, st->n_gen, st->t_gen,
            st->t_gen > 0 ? st->n_gen / st->t_gen : 0.0);
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
        if (!nb) { free(ids); return NULL; }
        ids = nb;
        *n = kiln_tokenize(m, text, len, add_special, parse_special, ids, cap);
    }
    if (*n < 0) { free(ids); return NULL; }
    return ids;
}

int cmd_run(int argc, char **argv) {
    cli_opts o;
    cli_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        int r = cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            if (cli_help("run", argv[i])) return 0;
            fprintf(stderr, "kiln run: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (cli_prompt_from_stdin(&o)) {
        fprintf(stderr, "kiln run: no prompt (use -p TEXT, -f FILE, or pipe it in)\n");
        return 2;
    }
    if (o.verbose) kiln_set_log(NULL, NULL, KILN_LOG_DEBUG);
    kiln_model *m;
    kiln_context *c;
    if (cli_load(&o, &m, &c, 1)) return 1;
    int rc = 1;
    kiln_sampler *s = NULL;
    int n_prompt = 0;
    int32_t *ids = tokenize_alloc(m, o.prompt, 1, 0, &n_prompt);
    kiln_model_info info;
    kiln_model_get_info(m, &info);
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
        fprintf(stderr, "kiln run: the prompt (%d tokens) plus %d tokens to generate exceeds the context of %d tokens\n",
                n_prompt, o.n_predict, n_ctx);
        goto done;
    }
    if (kiln_sampler_new(&o.sp, info.n_vocab, &s) != KILN_OK) {
        cli_fail("sampler");
        goto done;
    }
    for (int i = 0; i < n_prompt; i++) kiln_sampler_accept(s, ids[i]);
    gen_stats st = {n_prompt, 0, 0, 0, 0};
    catch_sigint();
    double t0 = kb_now();
    const int fr = feed(c, ids, n_prompt, o.n_batch > 0 ? o.n_batch : 512);
    if (fr == FEED_INTERRUPTED) st.interrupted = 1;
    else if (fr) goto done;
    st.t_prompt = kb_now() - t0;
    int last = (n_prompt - 1) % (o.n_batch > 0 ? o.n_batch : 512);
    if (!st.interrupted && o.n_predict != 0 && generate(m, c, s, last, o.n_predict, &st, NULL, NULL)) goto done;
    print_timings(&st);
    if (st.interrupted) fprintf(stderr, "kiln run: interrupted\n");
    rc = st.interrupted ? 130 : 0; /* 128 + SIGINT, as a shell reports it */
done:
    free(ids);
    kiln_sampler_free(s);
    kiln_context_free(c);
    kiln_model_free(m);
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
    kct *tmpl;
    json_t *messages;
    int32_t *held;      /* tokens in the KV cache, in order */
    int n_held, cap_held;
    char bos[64], eos[64];
} chat_state;

static void piece_text(kiln_model *m, int32_t id, char *buf, int cap) {
    buf[0] = 0;
    if (id < 0) return;
    int n = kiln_token_to_piece(m, id, buf, cap - 1, 1);
    buf[n >= 0 && n < cap ? n : 0] = 0;
}

/* Renders the conversation (with an open assistant turn) to tokens. */
static int32_t *render_chat(chat_state *st, int *n) {
    json_t *vars = json_pack("{s:O, s:b, s:s, s:s}", "messages", st->messages, "add_generation_prompt", 1,
                             "bos_token", st->bos, "eos_token", st->eos);
    char err[256];
    char *text = vars ? kct_render(st->tmpl, vars, err, sizeof err) : NULL;
    json_decref(vars);
    if (!text) {
        fprintf(stderr, "kiln chat: the chat template failed: %s\n", err);
        return NULL;
    }
    /* templates that write the BOS text themselves get no second BOS */
    int add_bos = !(st->bos[0] && strncmp(text, st->bos, strlen(st->bos)) == 0);
    int32_t *ids = tokenize_alloc(st->m, text, add_bos, 1, n);
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
            if (multi) { rc = 0; break; } /* the closing line */
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
        if (!multi) { rc = 0; break; }
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
    if (!strcmp(name, "temperature")) p->temperature = (float)v;
    else if (!strcmp(name, "top_k")) p->top_k = (int32_t)v;
    else if (!strcmp(name, "top_p")) p->top_p = (float)v;
    else if (!strcmp(name, "min_p")) p->min_p = (float)v;
    else if (!strcmp(name, "repeat_penalty")) p->repeat_penalty = (float)v;
    else if (!strcmp(name, "repeat_last_n")) p->repeat_last_n = (int32_t)v;
    else if (!strcmp(name, "presence_penalty")) p->presence_penalty = (float)v;
    else if (!strcmp(name, "frequency_penalty")) p->frequency_penalty = (float)v;
    else if (!strcmp(name, "seed")) p->seed = (uint64_t)v;
    else if (!strcmp(name, "num_predict")) o->n_predict = (int)v;
    else return -1;
    return 0;
}

/* /set system TEXT and /set parameter NAME VALUE, as in Ollama's REPL.  A
 * new system prompt replaces the old one (the next turn re-renders the
 * conversation, so the cached prefix is reused only up to it); new sampling
 * settings take a new sampler, which is told the tokens in the cache so
 * the penalties see the same history. */
static void chat_set(chat_state *st, cli_opts *o, kiln_sampler **s, int n_vocab, int *has_system, char *args) {
    if (!strncmp(args, "system ", 7) && args[7]) {
        if (!st->tmpl) {
            fprintf(stderr, "kiln chat: the model has no chat template, so there is no system prompt\n");
            return;
        }
        json_t *m = json_pack("{s:s, s:s}", "role", "system", "content", args + 7);
        if (*has_system) json_array_set_new(st->messages, 0, m);
        else json_array_insert_new(st->messages, 0, m);
        *has_system = 1;
        fprintf(stderr, "kiln chat: system prompt set\n");
        return;
    }
    char *name = !strncmp(args, "parameter ", 10) ? args + 10 : NULL;
    char *value = name ? strchr(name, ' ') : NULL;
    if (value) *value++ = 0;
    if (!value || set_parameter(o, name, value)) {
        fprintf(stderr, "kiln chat: /set system TEXT, or /set parameter NAME VALUE with NAME one of temperature, "
                        "top_k, top_p, min_p, repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty, "
                        "seed, num_predict\n");
        return;
    }
    kiln_sampler *ns;
    if (kiln_sampler_new(&o->sp, n_vocab, &ns) != KILN_OK) {
        cli_fail("sampler");
        return;
    }
    for (int i = 0; i < st->n_held; i++) kiln_sampler_accept(ns, st->held[i]);
    kiln_sampler_free(*s);
    *s = ns;
    fprintf(stderr, "kiln chat: %s set to %s\n", name, value);
}

int cmd_chat(int argc, char **argv) {
    cli_opts o;
    cli_opts_init(&o);
    o.n_predict = -1;
    const char *system = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--system") && i + 1 < argc) {
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
    chat_state st;
    memset(&st, 0, sizeof st);
    if (cli_load(&o, &st.m, &st.c, 1)) return 1;
    catch_sigint();
    kiln_model_info info;
    kiln_model_get_info(st.m, &info);
    const char *src = kiln_model_chat_template(st.m);
    if (src) {
        char err[256];
        st.tmpl = kct_compile(src, strlen(src), err, sizeof err);
        if (!st.tmpl) fprintf(stderr, "kiln chat: the model's chat template does not compile (%s); continuing text\n", err);
    }
    piece_text(st.m, kiln_token_bos(st.m), st.bos, sizeof st.bos);
    piece_text(st.m, kiln_token_eos(st.m), st.eos, sizeof st.eos);
    st.messages = json_array();
    if (system) json_array_append_new(st.messages, json_pack("{s:s, s:s}", "role", "system", "content", system));
    int has_system = system != NULL;
    fprintf(stderr, "kiln chat: %s (%s). /help for commands; /bye or Ctrl-D ends.\n",
            info.name[0] ? info.name : info.arch, st.tmpl ? "the model's chat template" : "no chat template: text is continued");
    kiln_sampler *s = NULL;
    int rc = 1;
    const int nb = o.n_batch > 0 ? o.n_batch : 512;
    char *line = NULL;
    size_t line_cap = 0;
    if (kiln_sampler_new(&o.sp, info.n_vocab, &s) != KILN_OK) {
        cli_fail("sampler");
        goto done;
    }
    for (;;) {
        const int got = read_message(&line, &line_cap);
        if (got < 0) break; /* end of input */
        if (got == 0) continue;
        if (line[0] == '/' && line[1] == '/') memmove(line, line + 1, (size_t)got); /* //TEXT sends /TEXT */
        else if (line[0] == '/') { /* a command, as in Ollama's REPL */
            if (!strcmp(line, "/bye") || !strcmp(line, "/exit")) break;
            if (!strcmp(line, "/clear")) { /* forget the turns, keep the system prompt */
                while (json_array_size(st.messages) > (has_system ? 1u : 0u))
                    json_array_remove(st.messages, json_array_size(st.messages) - 1);
                kiln_seq_truncate(st.c, 0, 0);
                st.n_held = 0;
                kiln_sampler_reset(s);
                fprintf(stderr, "kiln chat: conversation cleared\n");
                continue;
            }
            if (!strncmp(line, "/set ", 5)) {
                chat_set(&st, &o, &s, info.n_vocab, &has_system, line + 5);
                continue;
            }
            if (strcmp(line, "/help") && strcmp(line, "/?"))
                fprintf(stderr, "kiln chat: unknown command '%s'\n", line);
            fprintf(stderr, "  /clear      forget the conversation (the system prompt stays)\n"
                            "  /set system TEXT             set the system prompt\n"
                            "  /set parameter NAME VALUE    temperature, top_k, top_p, min_p, seed, num_predict, ...\n"
                            "  /bye        end (also Ctrl-D)\n"
                            "  \"\"\"         alone on a line begins and ends a message of several lines\n"
                            "  //TEXT      sends /TEXT\n");
            continue;
        }
        int n = 0;
        int32_t *ids;
        if (st.tmpl) {
            json_array_append_new(st.messages, json_pack("{s:s, s:s}", "role", "user", "content", line));
            ids = render_chat(&st, &n);
        } else {
            ids = tokenize_alloc(st.m, line, st.n_held == 0, 0, &n);
        }
        if (!ids) goto done;
        /* keep the cached prefix that the new rendering shares */
        int keep = 0;
        if (st.tmpl) {
            while (keep < st.n_held && keep < n && st.held[keep] == ids[keep]) keep++;
            if (keep == n) keep--; /* always feed at least one token */
            kiln_seq_truncate(st.c, 0, keep);
            st.n_held = keep;
        }
        const int32_t *feed_ids = st.tmpl ? ids + keep : ids;
        int n_feed = st.tmpl ? n - keep : n;
        int n_ctx = kiln_context_n_ctx(st.c);
        if (kiln_seq_len(st.c, 0) + n_feed + 1 > n_ctx) {
            fprintf(stderr, "kiln chat: the conversation no longer fits the context of %d tokens\n", n_ctx);
            free(ids);
            goto done;
        }
        for (int i = 0; i < n_feed; i++) kiln_sampler_accept(s, feed_ids[i]);
        gen_stats gs = {n_feed, 0, 0, 0, 0};
        int fr = feed(st.c, feed_ids, n_feed, nb);
        int last = (n_feed - 1) % nb;
        if (fr == FEED_INTERRUPTED) { /* Ctrl-C during the prompt: the message is not sent */
            free(ids);
            kiln_seq_truncate(st.c, 0, st.n_held);
            if (st.tmpl) json_array_remove(st.messages, json_array_size(st.messages) - 1);
            g_sigint = 0;
            fprintf(stderr, "\n");
            continue;
        }
        fr = fr || hold(&st, feed_ids, n_feed);
        free(ids);
        if (fr) goto done;
        int budget = n_ctx - kiln_seq_len(st.c, 0) - 1;
        int np = o.n_predict < 0 || o.n_predict > budget ? budget : o.n_predict;
        char *reply = NULL;
        size_t reply_len = 0;
        int before = kiln_seq_len(st.c, 0);
        if (generate(st.m, st.c, s, last, np, &gs, &reply, &reply_len)) { free(reply); goto done; }
        g_sigint = 0; /* Ctrl-C ended the reply early: what was shown stays in the conversation */
        printf("\n");
        /* the generated tokens are in the cache too; the template's
         * rendering of the reply decides next turn what is reused */
        st.n_held = before; /* exact ids of the reply are not kept: re-rendered */
        kiln_seq_truncate(st.c, 0, before);
        if (st.tmpl)
            json_array_append_new(st.messages, json_pack("{s:s, s:s}", "role", "assistant", "content", reply ? reply : ""));
        else if (reply_len) {
            int k = 0;
            int32_t *r = tokenize_alloc(st.m, reply, 0, 0, &k);
            if (r && k > 0 && kiln_seq_len(st.c, 0) + k < n_ctx && !feed(st.c, r, k, nb)) hold(&st, r, k);
            free(r);
        }
        free(reply);
    }
    rc = 0;
done:
    free(line);
    json_decref(st.messages);
    kct_free(st.tmpl);
    free(st.held);
    kiln_sampler_free(s);
    kiln_context_free(st.c);
    kiln_model_free(st.m);
    return rc;
}
