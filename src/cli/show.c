/* kiln show and kiln tokenize. */
#include "cli/cli.h"
#include "cli/common.h"

#include "gguf/gguf.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_value(const gguf_kv *kv) {
    if (kv->type == GGUF_STRING) {
        uint64_t n;
        memcpy(&n, kv->data, 8);
        const char *s = (const char *)kv->data + 8;
        int shown = n > 80 ? 80 : (int)n;
        putchar('"');
        for (int i = 0; i < shown; i++) putchar(s[i] == '\n' ? ' ' : s[i]);
        printf(n > 80 ? "\"... (%llu bytes)" : "\"", (unsigned long long)n);
        return;
    }
    if (kv->type == GGUF_ARRAY) {
        printf("[%s × %llu]", gguf_vtype_name(kv->arr_type), (unsigned long long)kv->n);
        return;
    }
    gguf_kv one = *kv;
    one.type = GGUF_ARRAY;
    one.arr_type = kv->type;
    one.n = 1;
    if (kv->type == GGUF_F32 || kv->type == GGUF_F64)
        printf("%g", gguf_arr_float(&one, 0));
    else if (kv->type == GGUF_BOOL)
        printf("%s", gguf_arr_int(&one, 0) ? "true" : "false");
    else
        printf("%lld", (long long)gguf_arr_int(&one, 0));
}

int cli_show(int argc, char **argv) {
    const char *path = NULL, *token = NULL;
    int tensors = 1, remote = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(argv[i], "--no-tensors"))
            tensors = 0;
        else if (!strcmp(argv[i], "--remote"))
            remote = 1;
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--token") && i + 1 < argc)
            token = argv[++i];
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else if (cli_help("show", argv[i]))
            return 0;
        else {
            fprintf(stderr, "kiln show: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "kiln show: no model given\n");
        return 2;
    }
    if (remote) return cli_show_remote(path, token, json);
    if (cli_model_path(path, 1, &path)) return 1;
    if (cli_is_checkpoint(path)) return cli_show_checkpoint(path, tensors);
    if (kiln_is_whisper_file(path)) return cli_show_whisper(path, tensors);
    gguf_file *f;
    if (gguf_open(path, &f)) {
        fprintf(stderr, "kiln: %s\n", kiln_last_error());
        return 1;
    }
    printf("file:      %s (GGUF v%u, %d shard%s, %.2f MiB)\n", path, gguf_version(f), gguf_n_shards(f),
           gguf_n_shards(f) > 1 ? "s" : "", (double)gguf_file_size(f) / (1024.0 * 1024.0));
    uint64_t n_params = 0, n_bytes = 0;
    int type_count[QUANT_TYPE_COUNT] = {0};
    for (int i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        n_bytes += t->nbytes;
        if (t->type < QUANT_TYPE_COUNT) type_count[t->type]++;
    }
    printf("params:    %llu (%.2f M), %.2f MiB of tensor data, %.2f bits per weight\n", (unsigned long long)n_params,
           (double)n_params / 1e6, (double)n_bytes / (1024.0 * 1024.0),
           n_params ? 8.0 * (double)n_bytes / (double)n_params : 0.0);
    printf("types:    ");
    for (int t = 0; t < QUANT_TYPE_COUNT; t++)
        if (type_count[t]) printf(" %d × %s", type_count[t], quant_get(t)->name);
    printf("\n\nmetadata (%d keys):\n", gguf_n_kv(f));
    for (int i = 0; i < gguf_n_kv(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        printf("  %-44s %-4s ", kv->key, gguf_vtype_name(kv->type));
        print_value(kv);
        putchar('\n');
    }
    if (tensors) {
        printf("\ntensors (%d):\n", gguf_n_tensors(f));
        for (int i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            char shape[96];
            int o = snprintf(shape, sizeof shape, "[");
            for (uint32_t d = 0; d < t->n_dims; d++)
                o += snprintf(shape + o, sizeof shape - (size_t)o, d ? ", %lld" : "%lld", (long long)t->ne[d]);
            snprintf(shape + o, sizeof shape - (size_t)o, "]");
            printf("  %-36s %-8s %-22s %10.3f KiB\n", t->name, quant_get((int)t->type)->name, shape,
                   (double)t->nbytes / 1024.0);
        }
    }
    /* the experts, from the {arch}.expert_* keys (0: not a mixture of experts) */
    char arch[64], key[128];
    gguf_get_cstr(f, "general.architecture", arch, sizeof arch, "");
    snprintf(key, sizeof key, "%s.expert_count", arch);
    const int64_t n_expert = gguf_get_int(f, key, 0);
    snprintf(key, sizeof key, "%s.expert_used_count", arch);
    const int64_t n_used = gguf_get_int(f, key, 0);
    snprintf(key, sizeof key, "%s.expert_feed_forward_length", arch);
    const int64_t f_exp = gguf_get_int(f, key, 0);
    snprintf(key, sizeof key, "%s.expert_shared_feed_forward_length", arch);
    const int64_t f_sh = gguf_get_int(f, key, 0);
    gguf_close(f);
    /* a full load confirms kiln can run it, and says why not otherwise */
    kiln_model *m;
    if (kiln_model_load(path, NULL, &m) != KILN_OK) {
        printf("\nrunnable:  no: %s\n", kiln_last_error());
        return 0;
    }
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    printf("\nrunnable:  yes: %s, %d layers, n_embd %d, %d heads (%d KV), n_ff %d, vocab %d, context %d, %s\n",
           info.arch, info.n_layer, info.n_embd, info.n_head, info.n_head_kv, info.n_ff, info.n_vocab, info.n_ctx_train,
           info.ftype);
    /* where kiln run would put it (--device auto): the load above chose */
    if (!strcmp(info.backend, "cuda") && info.gpu_layers < info.n_layer)
        printf("device:    CUDA (%d of %d layers, %.1f MiB of weights on the GPU; the rest on the CPU)\n",
               info.gpu_layers, info.n_layer, (double)info.device_bytes / (1024.0 * 1024.0));
    else if (!strcmp(info.backend, "cuda"))
        printf("device:    CUDA (%.1f MiB of weights on the GPU)\n", (double)info.device_bytes / (1024.0 * 1024.0));
    else
        printf("device:    CPU (%s)\n", kiln_cpu_path());
    if (info.kv_bytes_per_token) {
        /* what one sequence holds; beside it, a model of the same shapes
         * whose every layer kept K and V */
        const double ctx = 32768, mib = 1024.0 * 1024.0;
        const uint64_t all =
            info.n_attn_layer ? info.kv_bytes_per_token / (uint64_t)info.n_attn_layer * (uint64_t)info.n_layer : 0;
        printf("memory:    KV cache (F16) %llu bytes per token in %d of %d layers: %.1f MiB at a 32k context",
               (unsigned long long)info.kv_bytes_per_token, info.n_attn_layer, info.n_layer,
               (double)info.kv_bytes_per_token * ctx / mib);
        if (info.n_attn_layer < info.n_layer)
            printf(" (every layer attention: %.1f MiB); recurrent state %.2f MiB per sequence", (double)all * ctx / mib,
                   (double)info.state_bytes / mib);
        printf("\n");
    }
    if (n_expert > 0) {
        printf("experts:   %lld, %lld used per token, width %lld", (long long)n_expert, (long long)n_used,
               (long long)f_exp);
        if (f_sh > 0) printf(", shared expert width %lld", (long long)f_sh);
        printf("\n");
    }
    if (info.active_bytes < info.step_bytes)
        printf("%s a decode step reads %.2f MiB of the %.2f MiB of weights (the used experts only)\n",
               n_expert > 0 ? "          " : "experts:  ", (double)info.active_bytes / (1024.0 * 1024.0),
               (double)info.step_bytes / (1024.0 * 1024.0));
    kiln_model_free(m);
    return 0;
}

static void json_str(const char *s, int n) {
    putchar('"');
    for (int i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch == '\n')
            printf("\\n");
        else if (ch == '\t')
            printf("\\t");
        else if (ch == '\r')
            printf("\\r");
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

int cli_tokenize(int argc, char **argv) {
    cli_opts o;
    cli_opts_init(&o);
    int no_bos = 0, special = 0, ids_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-bos")) {
            no_bos = 1;
            continue;
        }
        if (!strcmp(argv[i], "--parse-special")) {
            special = 1;
            continue;
        }
        if (!strcmp(argv[i], "--ids")) {
            ids_only = 1;
            continue;
        }
        int r = cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            if (cli_help("tokenize", argv[i])) return 0;
            fprintf(stderr, "kiln tokenize: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!o.model || cli_prompt_from_stdin(&o)) {
        cli_usage("tokenize", stderr);
        return 2;
    }
    kiln_model *m;
    const char *path;
    if (cli_model_path(o.model, 0, &path)) return 1;
    kiln_model_params mp = kiln_model_default_params();
    mp.backend = KILN_ENGINE_BACKEND_CPU; /* the tokenizer alone */
    mp.repack = 0;
    if (kiln_model_load(path, &mp, &m) != KILN_OK) return cli_fail(NULL);
    size_t len = strlen(o.prompt);
    int cap = (int)len + 8;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int n = ids ? kiln_tokenize(m, o.prompt, len, !no_bos, special, ids, cap) : -1;
    if (n < 0 || n > cap) {
        free(ids);
        kiln_model_free(m);
        return cli_fail("tokenize");
    }
    char piece[512];
    if (o.json) {
        printf("[");
        for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
        printf("]\n");
    } else if (ids_only) {
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    } else {
        for (int i = 0; i < n; i++) {
            int k = kiln_token_to_piece(m, ids[i], piece, sizeof piece, 1);
            printf("%6d -> ", ids[i]);
            json_str(piece, k > (int)sizeof piece ? 0 : k);
            putchar('\n');
        }
    }
    free(ids);
    kiln_model_free(m);
    return 0;
}
