/* kiln rerank — relevance scores of documents for a query as JSON, sorted
 * best first, in the shape of the /v1/rerank response (index,
 * relevance_score, the document with --documents).  -m takes a file or a
 * store name; documents come as arguments or, with -f FILE, one per line. */
#include "cli/cli.h"
#include "cli/common.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ranked {
    int32_t index;
    float score;
} ranked;

static int by_score(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Appends s to docs (n of cap, grown as needed); -1 when out of memory. */
static int push_doc(const char ***docs, int *n, int *cap, const char *s) {
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 64;
        const char **nd = realloc(*docs, (size_t)nc * sizeof *nd);
        if (!nd) return -1;
        *docs = nd;
        *cap = nc;
    }
    (*docs)[(*n)++] = s;
    return 0;
}

/* Appends the lines of path (without their newline; empty lines skipped)
 * to *docs; the text stays in *buf. */
static int read_lines(const char *path, char **buf, const char ***docs, int *n, int *cap) {
    size_t len;
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "kiln: cannot open %s\n", path);
        return -1;
    }
    size_t bcap = 1 << 16;
    char *b = malloc(bcap);
    len = 0;
    size_t k;
    while (b && (k = fread(b + len, 1, bcap - len - 1, f)) > 0) {
        len += k;
        if (len + 1 == bcap) {
            char *nb = realloc(b, bcap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            bcap *= 2;
        }
    }
    if (f != stdin) fclose(f);
    if (!b) {
        fprintf(stderr, "kiln: out of memory reading %s\n", path);
        return -1;
    }
    b[len] = 0;
    *buf = b;
    for (char *p = b; *p;) {
        char *e = strchr(p, '\n');
        if (e) *e = 0;
        size_t l = strlen(p);
        if (l && p[l - 1] == '\r') p[--l] = 0;
        if (l && push_doc(docs, n, cap, p)) return -1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

int cli_rerank(int argc, char **argv) {
    const char *model = NULL, *query = NULL;
    int top_n = -1, truncate = 1, with_docs = 0, n = 0, cap = argc;
    kiln_reranker_params p = kiln_reranker_default_params();
    const char **docs = calloc((size_t)argc + 1, sizeof *docs);
    char *file_buf = NULL;
    int rc = 2;
    if (!docs) return cli_fail("out of memory");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int needs = !strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--query") || !strcmp(a, "-q") ||
                    !strcmp(a, "--top-n") || !strcmp(a, "-t") || !strcmp(a, "--threads") || !strcmp(a, "-f");
        if (needs && i + 1 >= argc) {
            fprintf(stderr, "kiln: %s needs a value\n", a);
            goto out;
        }
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            model = argv[++i];
        else if (!strcmp(a, "--query") || !strcmp(a, "-q"))
            query = argv[++i];
        else if (!strcmp(a, "--top-n"))
            top_n = atoi(argv[++i]);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            p.n_threads = atoi(argv[++i]);
        else if (!strcmp(a, "--no-truncate"))
            truncate = 0;
        else if (!strcmp(a, "--documents"))
            with_docs = 1;
        else if (!strcmp(a, "-f")) {
            if (file_buf) {
                fprintf(stderr, "kiln: -f is given once\n");
                goto out;
            }
            if (read_lines(argv[++i], &file_buf, &docs, &n, &cap)) {
                rc = 1;
                goto out;
            }
        } else if (!strcmp(a, "--")) {
            while (++i < argc)
                if (push_doc(&docs, &n, &cap, argv[i])) {
                    rc = cli_fail("out of memory");
                    goto out;
                }
        } else if (a[0] == '-' && a[1]) {
            if (cli_help("rerank", a)) {
                rc = 0;
                goto out;
            }
            fprintf(stderr, "kiln: unknown option '%s'\n", a);
            cli_usage("rerank", stderr);
            goto out;
        } else if (push_doc(&docs, &n, &cap, a)) {
            rc = cli_fail("out of memory");
            goto out;
        }
    }
    if (!model || !query || n == 0) {
        cli_usage("rerank", stderr);
        goto out;
    }
    const char *path;
    if (cli_model_path(model, 0, &path)) {
        rc = 1;
        goto out;
    }
    kiln_reranker *r;
    if (kiln_reranker_new(path, &p, &r) != KILN_OK) {
        rc = cli_fail(model);
        goto out;
    }
    kiln_rerank_request q = {query, 0, n, docs, NULL, truncate};
    kiln_rerank_job *j;
    if (kiln_rerank(r, &q, &j) != KILN_OK) {
        rc = cli_fail(NULL);
    } else {
        const kiln_rerank_scores *s = kiln_rerank_result(j);
        ranked *order = malloc((size_t)n * sizeof *order);
        json_t *root = json_object(), *results = json_array(), *cut = json_array();
        int32_t total = 0;
        for (int32_t i = 0; i < s->n; i++) total += s->n_tokens[i];
        for (int32_t i = 0; order && i < n; i++) order[i] = (ranked){i, s->scores[i]};
        if (order) qsort(order, (size_t)n, sizeof *order, by_score);
        const int shown = top_n >= 0 && top_n < n ? top_n : n;
        for (int k = 0; order && k < shown; k++) {
            json_t *e = json_object();
            json_object_set_new(e, "index", json_integer(order[k].index));
            json_object_set_new(e, "relevance_score", json_real(order[k].score));
            if (with_docs) {
                json_t *d = json_object();
                json_object_set_new(d, "text", json_string(docs[order[k].index]));
                json_object_set_new(e, "document", d);
            }
            json_array_append_new(results, e);
        }
        for (int32_t i = 0; i < s->n_truncated; i++) json_array_append_new(cut, json_integer(s->truncated[i]));
        json_object_set_new(root, "model", json_string(model));
        json_object_set_new(root, "results", results);
        json_object_set_new(root, "truncated", cut);
        json_object_set_new(root, "usage", json_pack("{s:i,s:i}", "prompt_tokens", total, "total_tokens", total));
        json_dumpf(root, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
        fputc('\n', stdout);
        json_decref(root);
        free(order);
        rc = order ? 0 : cli_fail("out of memory");
        kiln_rerank_job_free(j);
    }
    kiln_reranker_free(r);
out:
    free(docs);
    free(file_buf);
    return rc;
}
