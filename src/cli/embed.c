/* kiln embed — L2-normalized embeddings of the given texts as JSON.  -m
 * takes a file or a store name (leased while the command runs); --title
 * gives the documents' title where the model's format has one
 * (EmbeddingGemma). */
#include "cli/cli.h"
#include "cli/common.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_embed(int argc, char **argv) {
    const char *model = NULL, *title = NULL;
    int kind = KILN_EMBED_DOCUMENT, dim = 0, truncate = 0;
    kiln_embedder_params p = kiln_embedder_default_params();
    const char **texts = calloc((size_t)argc, sizeof *texts);
    int n = 0;
    if (!texts) return cli_fail("out of memory");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int needs_value = !strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--dim") || !strcmp(a, "-t") ||
                          !strcmp(a, "--threads") || !strcmp(a, "--title");
        if (needs_value && i + 1 >= argc) {
            fprintf(stderr, "kiln: %s needs a value\n", a);
            free(texts);
            return 2;
        }
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            model = argv[++i];
        else if (!strcmp(a, "--query"))
            kind = KILN_EMBED_QUERY;
        else if (!strcmp(a, "--document"))
            kind = KILN_EMBED_DOCUMENT;
        else if (!strcmp(a, "--truncate"))
            truncate = 1;
        else if (!strcmp(a, "--dim"))
            dim = atoi(argv[++i]);
        else if (!strcmp(a, "--title"))
            title = argv[++i];
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            p.n_threads = atoi(argv[++i]);
        else if (a[0] == '-' && a[1] && strcmp(a, "--")) {
            free(texts);
            if (cli_help("embed", a)) return 0;
            fprintf(stderr, "kiln: unknown option '%s'\n", a);
            cli_usage("embed", stderr);
            return 2;
        } else if (!strcmp(a, "--")) {
            while (++i < argc) texts[n++] = argv[i];
        } else {
            texts[n++] = a;
        }
    }
    if (!model || n == 0) {
        cli_usage("embed", stderr);
        free(texts);
        return 2;
    }
    const char *path;
    if (cli_model_path(model, 0, &path)) {
        free(texts);
        return 1;
    }
    kiln_embedder *e;
    if (kiln_embedder_new(path, &p, &e) != KILN_OK) {
        free(texts);
        return cli_fail(model);
    }
    const char **titles = calloc((size_t)n, sizeof *titles);
    if (!titles) {
        free(texts);
        kiln_embedder_free(e);
        return cli_fail("out of memory");
    }
    for (int i = 0; i < n; i++) titles[i] = title;
    kiln_embed_request r = {n, texts, NULL, kind, dim, truncate, titles};
    kiln_embed_job *j;
    int rc = 0;
    if (kiln_embed(e, &r, &j) != KILN_OK) {
        rc = cli_fail(NULL);
    } else {
        const kiln_embeddings *out = kiln_embed_result(j);
        kiln_embedder_info info;
        kiln_embedder_get_info(e, &info);
        json_t *root = json_object(), *data = json_array(), *cut = json_array();
        json_object_set_new(root, "model", json_string(model));
        json_object_set_new(root, "arch", json_string(info.arch));
        json_object_set_new(root, "fingerprint", json_string(out->fingerprint));
        json_object_set_new(root, "kind", json_string(kind == KILN_EMBED_QUERY ? "query" : "document"));
        json_object_set_new(root, "dim", json_integer(out->dim));
        for (int32_t i = 0; i < out->n_truncated; i++) json_array_append_new(cut, json_integer(out->truncated[i]));
        json_object_set_new(root, "truncated", cut);
        for (int32_t i = 0; i < out->n; i++) {
            json_t *item = json_object(), *vec = json_array();
            for (int32_t k = 0; k < out->dim; k++)
                json_array_append_new(vec, json_real(out->vectors[(size_t)i * out->dim + k]));
            json_object_set_new(item, "index", json_integer(i));
            json_object_set_new(item, "n_tokens", json_integer(out->n_tokens[i]));
            json_object_set_new(item, "embedding", vec);
            json_array_append_new(data, item);
        }
        json_object_set_new(root, "data", data);
        json_dumpf(root, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
        fputc('\n', stdout);
        json_decref(root);
        kiln_embed_job_free(j);
    }
    kiln_embedder_free(e);
    free(titles);
    free(texts);
    return rc;
}
