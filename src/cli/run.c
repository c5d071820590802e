/* kiln run and kiln chat: prompt in, streamed continuation out.  Only the
 * generated text goes to stdout; diagnostics and timings go to stderr. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct gen_stats {
    int n_prompt, n_gen;
    double t_prompt, t_gen;
} gen_stats;

/* Feeds ids (appending to sequence 0) in chunks of the batch size; the
 * logits of the last id are left in the context. */
static int feed(kiln_context *c, const int32_t *ids, int n, int n_batch) {
    for (int i = 0; i < n; i += n_batch) {
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
    double t0 = now_s();
    int rc = 0;
    for (int i = 0; n_predict < 0 || i < n_predict; i++) {
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
    st->t_gen += now_s() - t0;
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
            fprintf(stderr, "kiln run: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!o.prompt) {
        fprintf(stderr, "kiln run: no prompt (use -p TEXT)\n");
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
    gen_stats st = {n_prompt, 0, 0, 0};
    double t0 = now_s();
    if (feed(c, ids, n_prompt, o.n_batch > 0 ? o.n_batch : 512)) goto done;
    st.t_prompt = now_s() - t0;
    int last = (n_prompt - 1) % (o.n_batch > 0 ? o.n_batch : 512);
    if (o.n_predict != 0 && generate(m, c, s, last, o.n_predict, &st, NULL, NULL)) goto done;
    print_timings(&st);
    rc = 0;
done:
    free(ids);
    kiln_sampler_free(s);
    kiln_context_free(c);
    kiln_model_free(m);
    return rc;
}

/* ---------------------------------------------------------------- chat */

/* The built-in chat formats kiln knows without a Jinja interpreter.  The
 * model's GGUF template is inspected only to pick one of these. */
typedef struct chat_fmt {
    const char *name;
    const char *user_pre, *user_post; /* around the user's text */
    const char *asst_pre;             /* opens the reply */
    const char *turn_end;             /* appended after the reply */
} chat_fmt;

static const chat_fmt k_formats[] = {
    {"chatml", "<|im_start|>user\n", "<|im_end|>\n", "<|im_start|>assistant\n", "<|im_end|>\n"},
    {"llama3", "<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|>",
     "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"},
    {"llama2", "[INST] ", " [/INST]", "", "</s>"},
    {"completion", "", "", "", ""},
};

static const chat_fmt *pick_format(const char *tmpl) {
    if (!tmpl) return &k_formats[3];
    if (strstr(tmpl, "<|im_start|>")) return &k_formats[0];
    if (strstr(tmpl, "<|start_header_id|>")) return &k_formats[1];
    if (strstr(tmpl, "[INST]")) return &k_formats[2];
    return &k_formats[3];
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
            fprintf(stderr, "kiln chat: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    kiln_model *m;
    kiln_context *c;
    if (cli_load(&o, &m, &c, 1)) return 1;
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    const chat_fmt *fmt = pick_format(kiln_model_chat_template(m));
    fprintf(stderr, "kiln chat: %s (%s format%s). Empty line or Ctrl-D ends.\n", info.name[0] ? info.name : info.arch,
            fmt->name, fmt == &k_formats[3] ? ": the model has no chat template, text is continued" : "");
    kiln_sampler *s = NULL;
    int rc = 1;
    if (kiln_sampler_new(&o.sp, info.n_vocab, &s) != KILN_OK) {
        cli_fail("sampler");
        goto done;
    }
    int first = 1;
    char line[8192];
    for (;;) {
        fprintf(stderr, "> ");
        fflush(stderr);
        if (!fgets(line, sizeof line, stdin)) break;
        size_t ll = strlen(line);
        while (ll && (line[ll - 1] == '\n' || line[ll - 1] == '\r')) line[--ll] = 0;
        if (!ll) break;
        size_t cap = ll + 512 + (system ? strlen(system) : 0);
        char *turn = malloc(cap);
        if (!turn) break;
        turn[0] = 0;
        if (first && system && fmt == &k_formats[0])
            snprintf(turn, cap, "<|im_start|>system\n%s<|im_end|>\n", system);
        size_t tl = strlen(turn);
        snprintf(turn + tl, cap - tl, "%s%s%s%s", fmt->user_pre, line, fmt->user_post, fmt->asst_pre);
        int n = 0;
        int32_t *ids = tokenize_alloc(m, turn, first, 1, &n);
        free(turn);
        first = 0;
        if (!ids) { cli_fail("tokenize"); goto done; }
        int n_ctx = kiln_context_n_ctx(c);
        if (kiln_seq_len(c, 0) + n + 1 > n_ctx) {
            fprintf(stderr, "kiln chat: the conversation no longer fits the context of %d tokens\n", n_ctx);
            free(ids);
            goto done;
        }
        for (int i = 0; i < n; i++) kiln_sampler_accept(s, ids[i]);
        gen_stats st = {n, 0, 0, 0};
        int fr = feed(c, ids, n, o.n_batch > 0 ? o.n_batch : 512);
        int last = (n - 1) % (o.n_batch > 0 ? o.n_batch : 512);
        free(ids);
        if (fr) goto done;
        int budget = n_ctx - kiln_seq_len(c, 0) - 1;
        int np = o.n_predict < 0 || o.n_predict > budget ? budget : o.n_predict;
        if (generate(m, c, s, last, np, &st, NULL, NULL)) goto done;
        printf("\n");
        /* close the turn so the next one starts from a well-formed history */
        if (fmt->turn_end[0]) {
            int k = 0;
            int32_t *end = tokenize_alloc(m, fmt->turn_end, 0, 1, &k);
            if (end && k > 0 && kiln_seq_len(c, 0) + k < n_ctx) feed(c, end, k, o.n_batch > 0 ? o.n_batch : 512);
            free(end);
        }
    }
    rc = 0;
done:
    kiln_sampler_free(s);
    kiln_context_free(c);
    kiln_model_free(m);
    return rc;
}
