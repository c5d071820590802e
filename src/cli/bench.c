/* kiln bench: prompt processing (pp) and generation (tg) speed, measured
 * like llama-bench: pp runs one batch of p tokens from an empty context, tg
 * runs n single-token steps from an empty context; each test is repeated r
 * times after one warm-up and reported as mean ± standard deviation.
 * With -s S (S > 1), tg runs S sequences side by side the way the server's
 * continuous batching does: n steps of one batch holding one token of each
 * sequence, logits for all of them; t/s is the aggregate (test "tgN xS"). */
#include "cli.h"

#include "base/base.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LIST 8

static int parse_list(const char *s, int *out) {
    int n = 0;
    while (*s && n < MAX_LIST) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

typedef struct bench_row {
    char test[32];
    int n_prompt, n_gen, n_streams;
    double avg, sd;
    double samples[64];
    int n_samples;
} bench_row;

/* One timed run of n_gen steps over n_seq sequences at once (one token of
 * each per step, every token's logits); seconds or a negative value. */
static double run_streams(kiln_context *c, const int32_t *toks, int n_tok, int n_seq, int n_gen) {
    int32_t tok[64], seq[64];
    int8_t want[64];
    for (int s = 0; s < n_seq; s++) kiln_seq_truncate(c, s, 0);
    double t0 = kb_now();
    for (int i = 0; i < n_gen; i++) {
        for (int s = 0; s < n_seq; s++) {
            tok[s] = toks[(i + 17 * s) % n_tok]; /* the streams differ */
            seq[s] = s;
            want[s] = 1;
        }
        kiln_batch b = {n_seq, tok, NULL, seq, want};
        if (kiln_decode(c, &b) != KILN_OK) return -1;
    }
    return kb_now() - t0;
}

/* One timed run; returns seconds or a negative value on failure. */
static double run_once(kiln_context *c, const int32_t *toks, int n_prompt, int n_gen) {
    kiln_seq_truncate(c, 0, 0);
    double t0 = kb_now();
    if (n_prompt > 0) {
        kiln_batch b = {n_prompt, toks, NULL, NULL, NULL};
        if (kiln_decode(c, &b) != KILN_OK) return -1;
    }
    for (int i = 0; i < n_gen; i++) {
        kiln_batch b = {1, &toks[i], NULL, NULL, NULL};
        if (kiln_decode(c, &b) != KILN_OK) return -1;
    }
    return kb_now() - t0;
}

int cmd_bench(int argc, char **argv) {
    const char *model = NULL, *out_fmt = "md";
    int pp[MAX_LIST] = {512}, tg[MAX_LIST] = {128}, n_pp = 1, n_tg = 1;
    int threads = 0, reps = 5, kv_f32 = 0;
    int streams[MAX_LIST] = {1}, n_streams = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && v) { model = v; i++; }
        else if (!strcmp(a, "-p") && v) { if ((n_pp = parse_list(v, pp)) < 0) goto bad; i++; }
        else if (!strcmp(a, "-n") && v) { if ((n_tg = parse_list(v, tg)) < 0) goto bad; i++; }
        else if (!strcmp(a, "-t") && v) { threads = atoi(v); i++; }
        else if (!strcmp(a, "-r") && v) { reps = atoi(v); i++; }
        else if (!strcmp(a, "-o") && v) { out_fmt = v; i++; }
        else if ((!strcmp(a, "-s") || !strcmp(a, "--streams")) && v) {
            if ((n_streams = parse_list(v, streams)) < 0) goto bad;
            i++;
        }
        else if (!strcmp(a, "--kv-f32")) kv_f32 = 1;
        else goto bad;
    }
    int max_streams = 1;
    for (int i = 0; i < n_streams; i++) {
        if (streams[i] < 1 || streams[i] > 64) goto bad;
        if (streams[i] > max_streams) max_streams = streams[i];
    }
    if (!model || reps < 1 || reps > 64 || (strcmp(out_fmt, "md") && strcmp(out_fmt, "json"))) goto bad;

    kiln_model *m;
    if (cli_model_path(model, 0, &model)) return 1;
    if (kiln_model_load(model, NULL, &m) != KILN_OK) return cli_fail(NULL);
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    int max_tokens = 1;
    for (int i = 0; i < n_pp; i++) max_tokens = pp[i] > max_tokens ? pp[i] : max_tokens;
    for (int i = 0; i < n_tg; i++) max_tokens = tg[i] > max_tokens ? tg[i] : max_tokens;
    kiln_context_params cp = kiln_context_default_params();
    cp.n_threads = threads;
    cp.n_ctx = max_tokens < info.n_ctx_train ? max_tokens : info.n_ctx_train;
    cp.n_batch = cp.n_ctx > max_streams ? cp.n_ctx : max_streams;
    cp.n_seq_max = max_streams;
    cp.kv_type = kv_f32 ? KILN_KV_F32 : KILN_KV_F16;
    kiln_context *c;
    if (kiln_context_new(m, &cp, &c) != KILN_OK) {
        cli_fail(model);
        kiln_model_free(m);
        return 1;
    }
    /* random token ids, fixed seed: speed does not depend on the text */
    int32_t *toks = malloc((size_t)max_tokens * sizeof *toks);
    uint64_t x = 0x5eed;
    for (int i = 0; i < max_tokens && toks; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((x >> 33) % (uint64_t)info.n_vocab);
    }
    bench_row rows[MAX_LIST + MAX_LIST * MAX_LIST];
    int n_rows = 0, rc = 0;
    for (int kind = 0; kind < 2 && toks; kind++) {
        int n_list = kind == 0 ? n_pp : n_tg * n_streams;
        for (int li = 0; li < n_list; li++) {
            int np = kind == 0 ? pp[li] : 0, ng = kind == 0 ? 0 : tg[li / n_streams];
            const int ns = kind == 0 ? 1 : streams[li % n_streams];
            if (np + ng == 0) continue;
            if (np > cp.n_ctx || ng > cp.n_ctx) {
                fprintf(stderr, "kiln bench: %d tokens exceed the model's context of %d\n", np + ng, cp.n_ctx);
                rc = 1;
                continue;
            }
            bench_row *r = &rows[n_rows++];
            memset(r, 0, sizeof *r);
            snprintf(r->test, sizeof r->test, "%s%d", kind == 0 ? "pp" : "tg", kind == 0 ? np : ng);
            if (ns > 1) snprintf(r->test + strlen(r->test), sizeof r->test - strlen(r->test), " x%d", ns);
            r->n_prompt = np;
            r->n_gen = ng;
            r->n_streams = ns;
            /* the first run is a warm-up */
            if ((ns > 1 ? run_streams(c, toks, max_tokens, ns, ng) : run_once(c, toks, np, ng)) < 0) {
                rc = cli_fail("decode");
                n_rows--;
                continue;
            }
            double sum = 0, sq = 0;
            for (int k = 0; k < reps; k++) {
                double t = ns > 1 ? run_streams(c, toks, max_tokens, ns, ng) : run_once(c, toks, np, ng);
                if (t <= 0) { rc = cli_fail("decode"); break; }
                double ts = (double)(np + ng) * ns / t;
                r->samples[r->n_samples++] = ts;
                sum += ts;
                sq += ts * ts;
            }
            if (r->n_samples == 0) { n_rows--; continue; }
            r->avg = sum / r->n_samples;
            r->sd = r->n_samples > 1 ? sqrt(fmax(0.0, (sq - sum * sum / r->n_samples) / (r->n_samples - 1))) : 0.0;
            if (!strcmp(out_fmt, "md")) fprintf(stderr, "kiln bench: %s done\n", r->test);
        }
    }
    char path[64];
    snprintf(path, sizeof path, "%s%s", kiln_cpu_path(), info.repacked_bytes ? ", repack" : "");
    int nthreads = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (!strcmp(out_fmt, "json")) {
        printf("[\n");
        for (int i = 0; i < n_rows; i++) {
            bench_row *r = &rows[i];
            printf("  {\"model_type\": \"%s %s\", \"model_size\": %llu, \"model_n_params\": %llu, \"cpu_path\": \"%s\", "
                   "\"n_threads\": %d, \"test\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, \"n_streams\": %d, \"avg_ts\": %.6f, "
                   "\"stddev_ts\": %.6f, \"samples_ts\": [",
                   info.arch, info.ftype, (unsigned long long)info.n_bytes, (unsigned long long)info.n_params, path,
                   nthreads, r->test, r->n_prompt, r->n_gen, r->n_streams, r->avg, r->sd);
            for (int k = 0; k < r->n_samples; k++) printf(k ? ", %.6f" : "%.6f", r->samples[k]);
            printf("]}%s\n", i + 1 < n_rows ? "," : "");
        }
        printf("]\n");
    } else {
        printf("| model | size | params | backend | threads | test | t/s |\n");
        printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
        for (int i = 0; i < n_rows; i++)
            printf("| %s %s | %.2f MiB | %.2f M | CPU (%s) | %d | %s | %.2f ± %.2f |\n", info.arch, info.ftype,
                   (double)info.n_bytes / (1024.0 * 1024.0), (double)info.n_params / 1e6, path, nthreads,
                   rows[i].test, rows[i].avg, rows[i].sd);
    }
    free(toks);
    kiln_context_free(c);
    kiln_model_free(m);
    return rc;
bad:
    fprintf(stderr, "usage: kiln bench -m MODEL [-p 512[,..]] [-n 128[,..]] [-s 1[,4,8..]] [-t N] [-r 5] [-o md|json] "
                    "[--kv-f32]\n");
    return 2;
}
