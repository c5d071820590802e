/* kiln decide — typed decisions of a decision pack over a state, as JSON:
 *
 *   kiln decide -m PACK --state FILE --question JSON [--question JSON ...] [--measure]
 *
 * --state FILE reads the state (- for stdin; --state-text TEXT gives it
 * inline).  Each --question is a JSON object {"id", "type", "text",
 * "options"} or an array of them.  --measure prints the state's token
 * count and each question's budget without running the model. */
#include "cli/cli.h"
#include "cli/common.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_all(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 4096, n = 0, k;
    char *b = malloc(cap);
    while (b && (k = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (n + 1 == cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    if (f != stdin) fclose(f);
    if (b) b[n] = 0;
    *len = n;
    return b;
}

/* Appends the questions of one --question value (an object or an array)
 * to qs; the strings stay in the JSON, which the caller keeps. */
static int add_questions(json_t *v, kiln_decide_question **qs, int **starts, int *n, const char ***opts, int *n_opts) {
    const size_t count = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t i = 0; i < count; i++) {
        json_t *q = json_is_array(v) ? json_array_get(v, i) : v;
        json_t *type = json_object_get(q, "type"), *o = json_object_get(q, "options");
        if (!json_is_object(q) || !json_is_string(type) || (o && !json_is_array(o))) {
            fprintf(stderr, "kiln: --question: each question is an object with a \"type\" string "
                            "(and optionally \"id\", \"text\", \"options\": [strings])\n");
            return -1;
        }
        kiln_decide_question *nq = realloc(*qs, (size_t)(*n + 1) * sizeof *nq);
        if (nq) *qs = nq;
        int *ns = realloc(*starts, (size_t)(*n + 1) * sizeof *ns);
        if (ns) *starts = ns;
        if (!nq || !ns) return -1;
        ns[*n] = *n_opts;
        kiln_decide_question *d = &nq[(*n)++];
        memset(d, 0, sizeof *d);
        d->id = json_string_value(json_object_get(q, "id"));
        d->type = json_string_value(type);
        d->text = json_string_value(json_object_get(q, "text"));
        if (o) {
            const int no = (int)json_array_size(o);
            const char **nop = realloc(*opts, (size_t)(*n_opts + no + 1) * sizeof *nop);
            if (!nop) return -1;
            *opts = nop;
            for (int k = 0; k < no; k++) {
                const char *s = json_string_value(json_array_get(o, (size_t)k));
                if (!s) {
                    fprintf(stderr, "kiln: --question: options must be strings\n");
                    return -1;
                }
                nop[*n_opts + k] = s;
            }
            d->n_options = no; /* d->options is set once opts stops growing */
            *n_opts += no;
        }
    }
    return 0;
}

static json_t *str_array(const char *const *s, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_string(s[i]));
    return a;
}

int cli_decide(int argc, char **argv) {
    const char *model = NULL, *state_path = NULL, *state_text = NULL;
    int measure = 0, rc = 2, nq = 0, n_opts = 0;
    kiln_decide_question *qs = NULL;
    int *starts = NULL; /* each question's first option in opts */
    const char **opts = NULL;
    json_t *held = json_array(); /* the parsed --question values */
    char *state_buf = NULL;
    kiln_decider *d = NULL;
    kiln_decider_params p = kiln_decider_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int needs = !strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--state") ||
                          !strcmp(a, "--state-text") || !strcmp(a, "--question") || !strcmp(a, "-t");
        if (needs && i + 1 >= argc) {
            fprintf(stderr, "kiln: %s needs a value\n", a);
            goto out;
        }
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            model = argv[++i];
        else if (!strcmp(a, "--state"))
            state_path = argv[++i];
        else if (!strcmp(a, "--state-text"))
            state_text = argv[++i];
        else if (!strcmp(a, "-t"))
            p.n_threads = atoi(argv[++i]);
        else if (!strcmp(a, "--measure"))
            measure = 1;
        else if (!strcmp(a, "--question")) {
            json_error_t je;
            json_t *v = json_loads(argv[++i], 0, &je);
            if (!v) {
                fprintf(stderr, "kiln: --question: not JSON (%s)\n", je.text);
                goto out;
            }
            json_array_append_new(held, v);
            if (add_questions(v, &qs, &starts, &nq, &opts, &n_opts)) goto out;
        } else {
            if (cli_help("decide", a)) {
                rc = 0;
                goto out;
            }
            fprintf(stderr, "kiln: unknown argument '%s'\n", a);
            cli_usage("decide", stderr);
            goto out;
        }
    }
    if (!model || (!state_path == !state_text) || nq == 0) {
        cli_usage("decide", stderr);
        goto out;
    }
    for (int i = 0; i < nq; i++)
        if (qs[i].n_options) qs[i].options = opts + starts[i];
    size_t state_len = 0;
    if (state_path) {
        if (!(state_buf = read_all(state_path, &state_len))) {
            fprintf(stderr, "kiln: cannot read the state from %s\n", state_path);
            rc = 1;
            goto out;
        }
    } else {
        state_len = strlen(state_text);
    }
    const char *path;
    if (cli_model_path(model, 0, &path)) {
        rc = 1;
        goto out;
    }
    p.measure_only = measure;
    if (kiln_decider_new(path, &p, &d) != KILN_OK) {
        rc = cli_fail(model);
        goto out;
    }
    kiln_decide_request r = {state_buf ? state_buf : state_text, state_len, nq, qs};
    if (!state_len) r.state = ""; /* an empty state is a state of 0 tokens */
    json_t *root = json_object();
    json_object_set_new(root, "model", json_string(model));
    if (measure) {
        int32_t n_state = 0, *budgets = calloc((size_t)nq, sizeof *budgets);
        if (!budgets || kiln_decide_measure(d, &r, &n_state, budgets) != KILN_OK) {
            rc = cli_fail(budgets ? NULL : "out of memory");
            free(budgets);
            json_decref(root);
            goto out;
        }
        json_t *a = json_array();
        for (int i = 0; i < nq; i++)
            json_array_append_new(a, json_pack("{s:s?,s:s,s:i,s:b}", "id", qs[i].id, "type", qs[i].type, "budget",
                                               budgets[i], "truncates", n_state > budgets[i]));
        json_object_set_new(root, "state_tokens", json_integer(n_state));
        json_object_set_new(root, "questions", a);
        free(budgets);
    } else {
        kiln_decide_job *j = NULL;
        if (kiln_decide(d, &r, &j) != KILN_OK) {
            rc = cli_fail(NULL);
            json_decref(root);
            goto out;
        }
        const kiln_decisions *res = kiln_decide_result(j);
        json_t *a = json_array();
        for (int i = 0; i < res->n; i++) {
            const kiln_decision *dc = &res->d[i];
            json_t *e = json_object(), *pr = json_array();
            for (int k = 0; k < dc->n; k++) json_array_append_new(pr, json_real(dc->probs[k]));
            json_object_set_new(e, "id", json_string(dc->id));
            json_object_set_new(e, "type", json_string(dc->type));
            json_object_set_new(e, qs[i].n_options ? "options" : "labels", str_array(dc->labels, dc->n));
            json_object_set_new(e, "probabilities", pr);
            json_object_set_new(e, "best", json_string(dc->labels[dc->best]));
            json_object_set_new(e, "temperature", json_real(dc->temperature));
            json_object_set_new(e, "truncated", json_boolean(dc->truncated));
            json_object_set_new(e, "state_tokens_kept", json_integer(dc->state_tokens_kept));
            json_array_append_new(a, e);
        }
        json_object_set_new(root, "state_tokens", json_integer(res->state_tokens));
        json_object_set_new(root, "decisions", a);
        kiln_decide_job_free(j);
    }
    json_dumpf(root, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    fputc('\n', stdout);
    json_decref(root);
    rc = 0;
out:
    kiln_decider_free(d);
    json_decref(held);
    free(qs);
    free(starts);
    free(opts);
    free(state_buf);
    return rc;
}
