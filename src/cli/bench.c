/* kiln bench: prompt processing (pp) and generation (tg) speed, measured
 * like llama-bench: pp runs one batch of p tokens, tg runs n single-token
 * steps, pg (-pg P,N) runs the two one after the other and counts both; each
 * test starts from an empty context, or from one already holding d tokens
 * (-d, untimed; test "... @ dD"), and is repeated r times after one warm-up,
 * reported as mean ± standard deviation.
 * With -s S (S > 1), tg runs S streams through the generation core, as the
 * server's continuous batching does: after each stream's prompt (d + 1
 * tokens, untimed), n steps of one batch holding one token of each, each
 * sampled greedily from its logits; t/s is the aggregate (test "tgN xS").
 * With --spec TYPE (and its options, as for kiln run), each tg test also
 * runs as real greedy generation through the generation core after a
 * prompt (-f FILE's text, else the random tokens), once plain and once
 * speculating, alternated rep by rep so both see the same machine: rows
 * "tgN gen" and "tgN spec TYPE" (t/s of the N tokens after the first),
 * the latter with the acceptance rate and its ratio to the former.
 * --roofline adds, to each tg row, the read bandwidth measured just before
 * and after it (mean), the decode roofline it allows (streams x bandwidth /
 * the weight bytes of one step, kiln_model_info.step_bytes) and the share of
 * it reached.  KV cache reads are not counted, so at depth the share is of
 * the weights' roofline only. */
#include "cli/cli.h"
#include "cli/common.h"

#include "backend/cuda.h"
#include "base/base.h"
#include "gen/gen.h"
#include "spec/spec.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
    char test[48];
    int n_prompt, n_gen, n_streams, n_depth;
    double avg, sd;
    double read_bps; /* --roofline, tg rows: mean read bandwidth, bytes/s; 0 otherwise */
    double samples[64];
    int n_samples;
    int spec;      /* a speculative row: accept and ratio are set */
    double accept; /* accepted / proposed */
    double ratio;  /* t/s over the plain generation row's */
} bench_row;

/* The read-bandwidth probe of --roofline: n threads each stream their
 * slice of a buffer eight times a 32 MiB L3, the way decode streams the
 * weights; the best of PROBE_PASSES passes. */
enum { PROBE_BYTES = 256 << 20, PROBE_PASSES = 5 };

typedef struct probe_slice {
    const uint64_t *p;
    size_t n; /* words, a multiple of 8 */
    uint64_t sink;
} probe_slice;

static void *probe_read(void *ud) {
    probe_slice *s = ud;
    const uint64_t *p = s->p;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0; /* four chains: loads, not xor latency, set the pace */
    for (size_t i = 0; i < s->n; i += 8) {
        a0 ^= p[i] ^ p[i + 4];
        a1 ^= p[i + 1] ^ p[i + 5];
        a2 ^= p[i + 2] ^ p[i + 6];
        a3 ^= p[i + 3] ^ p[i + 7];
    }
    s->sink = a0 ^ a1 ^ a2 ^ a3; /* keeps the loads */
    return NULL;
}

/* Bytes per second read by n_threads threads over buf (PROBE_BYTES, already
 * written so every page is backed); 0 if a thread cannot start. */
static double probe_bandwidth(const uint64_t *buf, int n_threads) {
    enum { MAX_T = 64 };
    if (n_threads < 1) n_threads = 1;
    if (n_threads > MAX_T) n_threads = MAX_T;
    const size_t words = PROBE_BYTES / sizeof(uint64_t), per = words / (size_t)n_threads & ~(size_t)7;
    probe_slice sl[MAX_T];
    pthread_t th[MAX_T];
    double best = 0;
    for (int pass = 0; pass < PROBE_PASSES; pass++) {
        const double t0 = base_now();
        int started = 0;
        for (; started < n_threads; started++) {
            sl[started] = (probe_slice){buf + (size_t)started * per, per, 0};
            if (pthread_create(&th[started], NULL, probe_read, &sl[started])) break;
        }
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
        if (started < n_threads) return 0;
        const double bps = (double)(per * sizeof(uint64_t)) * n_threads / (base_now() - t0);
        if (bps > best) best = bps;
    }
    return best;
}

/* Empties sequence s and fills it with depth tokens (untimed); 0 or -1. */
static int fill_depth(kiln_context *c, const int32_t *toks, int s, int depth) {
    kiln_seq_truncate(c, s, 0);
    enum { CHUNK = 512 };
    int32_t seq[CHUNK];
    for (int i = 0; i < CHUNK; i++) seq[i] = s;
    for (int i = 0; i < depth; i += CHUNK) {
        const int k = depth - i < CHUNK ? depth - i : CHUNK;
        kiln_batch b = {k, toks + i, NULL, seq, NULL};
        if (kiln_decode(c, &b) != KILN_OK) return -1;
    }
    return 0;
}

/* A stream of run_streams: pauses once its first token is out, so every
 * stream starts the timed steps together. */
typedef struct stream {
    gen_slot *slot;
    int first, done;
} stream;

static int stream_event(void *user, const gen_event *ev, const float *logits) {
    stream *st = user;
    if (ev->kind == GEN_EV_DONE)
        st->done = 1;
    else if (!st->first) {
        st->first = 1;
        gen_slot_pause(st->slot, 1);
    }
    return 0;
}

/* One timed run of n_gen steps of the generation core over n_seq streams
 * at once (each step one token of each, sampled greedily from its logits,
 * as the server's continuous batching runs them), each after depth + 1
 * prompt tokens fed untimed; seconds or a negative value. */
static double run_streams(gen_batch *gb, const int32_t *toks, int n_tok, int n_seq, int n_gen, int depth) {
    stream st[64];
    memset(st, 0, sizeof st);
    for (int s = 0; s < n_seq; s++) {
        gen_params p = gen_params_default();
        int32_t *pr = malloc((size_t)(depth + 1) * sizeof *pr);
        if (!pr) return -1;
        memcpy(pr, toks, (size_t)depth * sizeof *pr);
        pr[depth] = toks[(depth + 17 * s) % n_tok]; /* the streams differ */
        p.prompt = pr;
        p.n_prompt = depth + 1;
        p.n_predict = n_gen + 1; /* the first token ends the untimed prompt */
        p.sampler.temperature = 0;
        p.ignore_eos = 1;
        p.on_event = stream_event;
        p.user = &st[s];
        kiln_status rs = gen_batch_add(gb, &p, s, &st[s].slot);
        free(pr);
        if (rs != KILN_OK) return -1;
    }
    int all = 0;
    while (!all) {
        if (gen_batch_step(gb) != KILN_OK) return -1;
        all = 1;
        for (int s = 0; s < n_seq; s++) all &= st[s].first || st[s].done;
    }
    for (int s = 0; s < n_seq; s++)
        if (!st[s].done) gen_slot_pause(st[s].slot, 0);
    double t0 = base_now();
    while (gen_batch_n_active(gb) > 0)
        if (gen_batch_step(gb) != KILN_OK) return -1;
    return base_now() - t0;
}

/* A generation of run_gen: the time of its first token and of its end. */
typedef struct gen_timing {
    double t_first, t_end;
    int n, done;
    int32_t n_drafted, n_accepted;
} gen_timing;

static int gen_timing_event(void *user, const gen_event *ev, const float *logits) {
    gen_timing *g = user;
    (void)logits;
    if (ev->kind == GEN_EV_DONE) {
        g->done = 1;
        g->t_end = ev->t;
        g->n_drafted = ev->n_drafted;
        g->n_accepted = ev->n_accepted;
    } else if (g->n++ == 0) {
        g->t_first = ev->t;
    }
    return 0;
}

/* Greedy generation of n_gen tokens after the prompt (whose first token's
 * time is not counted), speculating when n_draft > 0; seconds, or a
 * negative value on failure. */
static double run_gen(gen_batch *gb, const int32_t *prompt, int n_prompt, int n_gen, int n_draft, int fixed,
                      gen_timing *g) {
    memset(g, 0, sizeof *g);
    gen_params p = gen_params_default();
    p.prompt = prompt;
    p.n_prompt = n_prompt;
    p.n_predict = n_gen + 1;
    p.sampler.temperature = 0;
    p.ignore_eos = 1;
    p.n_draft = n_draft;
    p.spec_fixed = fixed;
    p.on_event = gen_timing_event;
    p.user = g;
    if (gen_batch_add(gb, &p, 0, NULL) != KILN_OK) return -1;
    while (gen_batch_n_active(gb) > 0)
        if (gen_batch_step(gb) != KILN_OK) return -1;
    return g->n == n_gen + 1 ? g->t_end - g->t_first : -1;
}

/* One timed run after depth cached tokens; returns seconds or a negative
 * value on failure. */
static double run_once(kiln_context *c, const int32_t *toks, int n_prompt, int n_gen, int depth) {
    if (fill_depth(c, toks, 0, depth)) return -1;
    const int32_t *t = toks + depth;
    double t0 = base_now();
    if (n_prompt > 0) {
        kiln_batch b = {n_prompt, t, NULL, NULL, NULL};
        if (kiln_decode(c, &b) != KILN_OK) return -1;
    }
    for (int i = 0; i < n_gen; i++) {
        kiln_batch b = {1, &t[n_prompt + i], NULL, NULL, NULL};
        if (kiln_decode(c, &b) != KILN_OK) return -1;
    }
    return base_now() - t0;
}

/* The rows of --spec for a tg test of ng tokens: plain generation and
 * speculative, alternated rep by rep.  1 when both were filled. */
static int spec_rows(gen_batch *gb, const spec *spx, const int32_t *prompt, int n_prompt, const int32_t *toks,
                     int depth, int ng, int reps, bench_row *out) {
    if (!prompt) { /* the random tokens: depth of them and one more */
        prompt = toks;
        n_prompt = depth + 1;
    }
    const kiln_spec_params *sp = spec_params(spx);
    bench_row *pr = &out[0], *sr = &out[1];
    memset(out, 0, 2 * sizeof *out);
    snprintf(pr->test, sizeof pr->test, "tg%d gen", ng);
    snprintf(sr->test, sizeof sr->test, "tg%d spec %s", ng, kiln_spec_type_str(sp->type));
    for (int k = 0; k < 2; k++) {
        out[k].n_gen = ng;
        out[k].n_streams = 1;
        out[k].n_depth = n_prompt;
    }
    gen_timing g;
    /* a warm-up of each */
    if (run_gen(gb, prompt, n_prompt, ng, 0, 0, &g) < 0 ||
        run_gen(gb, prompt, n_prompt, ng, sp->n_max, sp->fixed, &g) < 0)
        return 0;
    int64_t drafted = 0, accepted = 0;
    double sum[2] = {0, 0}, sq[2] = {0, 0};
    for (int k = 0; k < reps; k++)
        for (int w = 0; w < 2; w++) {
            const double sec = run_gen(gb, prompt, n_prompt, ng, w ? sp->n_max : 0, sp->fixed, &g);
            if (sec <= 0) return 0;
            const double ts = ng / sec;
            out[w].samples[out[w].n_samples++] = ts;
            sum[w] += ts;
            sq[w] += ts * ts;
            if (w) {
                drafted += g.n_drafted;
                accepted += g.n_accepted;
            }
        }
    for (int w = 0; w < 2; w++) {
        const int n = out[w].n_samples;
        out[w].avg = sum[w] / n;
        out[w].sd = n > 1 ? sqrt(fmax(0.0, (sq[w] - sum[w] * sum[w] / n) / (n - 1))) : 0.0;
    }
    sr->spec = 1;
    sr->accept = drafted ? (double)accepted / (double)drafted : 0;
    sr->ratio = pr->avg > 0 ? sr->avg / pr->avg : 0;
    return 1;
}

/* The decode roofline of a tg row: every step reads the step's weight
 * bytes once and yields one token per stream; tokens/s. */
static double roofline_ts(const bench_row *r, const kiln_model_info *info) {
    return info->step_bytes ? r->n_streams * r->read_bps / (double)info->step_bytes : 0;
}

/* One test to run: prompt and generated tokens, streams, depth. */
typedef struct bench_test {
    int np, ng, ns, depth;
} bench_test;

int cli_bench(int argc, char **argv) {
    const char *model = NULL, *out_fmt = "md";
    int pp[MAX_LIST] = {512}, tg[MAX_LIST] = {128}, n_pp = 1, n_tg = 1;
    int pg_p[MAX_LIST], pg_n[MAX_LIST], n_pg = 0;
    int depths[MAX_LIST] = {0}, n_depths = 1;
    int threads = 0, reps = 5, kv_type = KILN_KV_F16, roofline = 0;
    int streams[MAX_LIST] = {1}, n_streams = 1;
    kiln_spec_params sp = kiln_spec_default_params();
    const char *prompt_file = NULL;
    int device = KILN_ENGINE_BACKEND_AUTO, gpu_layers = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        const int sr = cli_parse_spec(&sp, argc, argv, &i);
        if (sr < 0) return 2;
        if (sr > 0) continue;
        const int dr = cli_parse_device(argc, argv, &i, &device, &gpu_layers);
        if (dr < 0) return 2;
        if (dr > 0) continue;
        if (!strcmp(a, "-m") && v) {
            model = v;
            i++;
        } else if (!strcmp(a, "-f") && v) {
            prompt_file = v;
            i++;
        } else if (!strcmp(a, "-p") && v) {
            if ((n_pp = parse_list(v, pp)) < 0) goto bad;
            i++;
        } else if (!strcmp(a, "-n") && v) {
            if ((n_tg = parse_list(v, tg)) < 0) goto bad;
            i++;
        } else if (!strcmp(a, "-pg") && v) { /* P,N: one test; repeat -pg for more */
            int two[MAX_LIST];
            if (n_pg == MAX_LIST || parse_list(v, two) != 2 || two[0] + two[1] == 0) goto bad;
            pg_p[n_pg] = two[0];
            pg_n[n_pg++] = two[1];
            i++;
        } else if ((!strcmp(a, "-d") || !strcmp(a, "--n-depth")) && v) {
            if ((n_depths = parse_list(v, depths)) < 1) goto bad;
            i++;
        } else if (!strcmp(a, "-t") && v) {
            threads = atoi(v);
            i++;
        } else if (!strcmp(a, "-r") && v) {
            reps = atoi(v);
            i++;
        } else if (!strcmp(a, "-o") && v) {
            out_fmt = v;
            i++;
        } else if ((!strcmp(a, "-s") || !strcmp(a, "--streams")) && v) {
            if ((n_streams = parse_list(v, streams)) < 0) goto bad;
            i++;
        } else if (!strcmp(a, "--kv-f32"))
            kv_type = KILN_KV_F32;
        else if (!strcmp(a, "--cache-type") && v) {
            if ((kv_type = cli_kv_type(v)) < 0) goto bad;
            i++;
        } else if (!strcmp(a, "--roofline"))
            roofline = 1;
        else if (cli_help("bench", a))
            return 0;
        else
            goto bad;
    }
    int max_streams = 1;
    for (int i = 0; i < n_streams; i++) {
        if (streams[i] < 1 || streams[i] > 64) goto bad;
        if (streams[i] > max_streams) max_streams = streams[i];
    }
    if (!model || reps < 1 || reps > 64 || (strcmp(out_fmt, "md") && strcmp(out_fmt, "json"))) goto bad;

    /* the tests, depth by depth as llama-bench orders them: pp, tg (per
     * stream count), pg */
    enum { MAX_TESTS = MAX_LIST * (MAX_LIST + MAX_LIST * MAX_LIST + MAX_LIST) };
    bench_test tests[MAX_TESTS];
    int n_tests = 0;
    for (int di = 0; di < n_depths; di++) {
        for (int i = 0; i < n_pp; i++)
            if (pp[i] > 0) tests[n_tests++] = (bench_test){pp[i], 0, 1, depths[di]};
        for (int i = 0; i < n_tg; i++)
            for (int k = 0; k < n_streams && tg[i] > 0; k++)
                tests[n_tests++] = (bench_test){0, tg[i], streams[k], depths[di]};
        for (int i = 0; i < n_pg; i++) tests[n_tests++] = (bench_test){pg_p[i], pg_n[i], 1, depths[di]};
    }

    /* the context the tests need, for the GPU's memory check at load (the
     * one made below is this, capped by the model's length) */
    kiln_context_params fit = kiln_context_default_params();
    fit.n_ctx = 1;
    for (int i = 0; i < n_tests; i++) {
        const int need = tests[i].depth + tests[i].np + tests[i].ng + 1 + GEN_DRAFT_MAX;
        if (need > fit.n_ctx) fit.n_ctx = need;
    }
    fit.n_seq_max = max_streams;
    fit.kv_type = kv_type;
    kiln_model *m;
    if (cli_model_path(model, 0, &model)) return 1;
    kiln_model_params mp = kiln_model_default_params();
    mp.backend = device;
    mp.gpu_layers = gpu_layers;
    mp.ctx = &fit;
    if (kiln_model_load(model, &mp, &m) != KILN_OK) return cli_fail(NULL);
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    /* --spec: the prompt of the generation rows */
    int32_t *sprompt = NULL;
    int n_sprompt = 0;
    if (sp.type != KILN_SPEC_NONE && prompt_file) {
        size_t len = 0;
        FILE *pf = fopen(prompt_file, "rb");
        char *text = NULL;
        if (pf) {
            fseek(pf, 0, SEEK_END);
            long sz = ftell(pf);
            rewind(pf);
            text = sz >= 0 ? malloc((size_t)sz + 1) : NULL;
            if (text) {
                len = fread(text, 1, (size_t)sz, pf);
                text[len] = 0;
            }
            fclose(pf);
        }
        if (!text) {
            fprintf(stderr, "kiln bench: cannot read %s\n", prompt_file);
            kiln_model_free(m);
            return 1;
        }
        n_sprompt = kiln_tokenize(m, text, len, 1, 0, NULL, 0);
        sprompt = n_sprompt > 0 ? malloc((size_t)n_sprompt * sizeof *sprompt) : NULL;
        if (sprompt) kiln_tokenize(m, text, len, 1, 0, sprompt, n_sprompt);
        free(text);
        if (!sprompt) {
            fprintf(stderr, "kiln bench: %s has no tokens\n", prompt_file);
            kiln_model_free(m);
            return 1;
        }
    }
    /* per sequence: the longest depth + prompt + generation; per batch: the
     * longest prompt, a depth-filling chunk, or one token per stream */
    int max_tokens = 1, max_batch = max_streams;
    for (int i = 0; i < n_tests; i++) {
        const bench_test *t = &tests[i];
        int need = t->depth + t->np + t->ng + (t->ns > 1); /* streams: one more prompt token */
        if (sp.type != KILN_SPEC_NONE && t->ng && t->ns == 1) {
            const int g = (sprompt ? n_sprompt : t->depth + 1) + t->ng + 1 + GEN_DRAFT_MAX;
            if (g > need) need = g;
            if (sprompt && n_sprompt > max_batch) max_batch = n_sprompt < 512 ? n_sprompt : 512;
        }
        if (need > max_tokens) max_tokens = need;
        if (t->np > max_batch) max_batch = t->np;
        if (t->depth > 0 && max_batch < 512) max_batch = t->depth < 512 ? t->depth : 512;
    }
    /* a verify step carries the decode token and every proposal at once */
    if (sp.type != KILN_SPEC_NONE && max_batch < GEN_DRAFT_MAX + 1) max_batch = GEN_DRAFT_MAX + 1;
    kiln_context_params cp = kiln_context_default_params();
    cp.n_threads = threads;
    cp.n_ctx = max_tokens < info.n_ctx_train ? max_tokens : info.n_ctx_train;
    cp.n_batch = max_batch < cp.n_ctx ? max_batch : cp.n_ctx;
    if (cp.n_batch < max_streams) cp.n_batch = max_streams;
    cp.n_seq_max = max_streams;
    cp.kv_type = kv_type;
    cp.mtp = sp.type == KILN_SPEC_MTP;
    kiln_context *c;
    if (kiln_context_new(m, &cp, &c) != KILN_OK) {
        cli_fail(model);
        kiln_model_free(m);
        return 1;
    }
    gen_batch *gb = NULL;
    spec *spx = NULL;
    if (gen_batch_new(m, c, 0, &gb) != KILN_OK) {
        cli_fail("out of memory");
        kiln_context_free(c);
        kiln_model_free(m);
        return 1;
    }
    if (sp.type != KILN_SPEC_NONE) {
        if (spec_new(&sp, m, c, &spx) != KILN_OK) {
            cli_fail("--spec");
            gen_batch_free(gb);
            kiln_context_free(c);
            kiln_model_free(m);
            free(sprompt);
            return 1;
        }
        gen_batch_set_proposer(gb, spec_proposer(spx));
    }
    /* random token ids, fixed seed: speed does not depend on the text */
    int32_t *toks = malloc((size_t)max_tokens * sizeof *toks);
    uint64_t x = 0x5eed;
    for (int i = 0; i < max_tokens && toks; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((x >> 33) % (uint64_t)info.n_vocab);
    }
    bench_row *rows = calloc((size_t)n_tests * 3 + 1, sizeof *rows);
    int n_rows = 0, rc = 0;
    const int nthreads = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t *probe = NULL;
    if (roofline) {
        void *mem = mmap(NULL, PROBE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) {
            fprintf(stderr, "kiln bench: no memory for the bandwidth probe (%d MiB)\n", PROBE_BYTES >> 20);
            rc = 1;
            n_tests = 0;
        } else {
            madvise(mem, PROBE_BYTES, MADV_HUGEPAGE); /* as the weights are */
            memset(mem, 1, PROBE_BYTES);              /* untouched pages would all read the zero page */
            probe = mem;
        }
    }
    for (int ti = 0; ti < n_tests && toks && rows; ti++) {
        const bench_test *t = &tests[ti];
        const int np = t->np, ng = t->ng, ns = t->ns, depth = t->depth;
        if (depth + np + ng + (ns > 1) > cp.n_ctx) {
            fprintf(stderr, "kiln bench: %d tokens exceed the model's context of %d\n", depth + np + ng + (ns > 1),
                    cp.n_ctx);
            rc = 1;
            continue;
        }
        bench_row *r = &rows[n_rows++];
        memset(r, 0, sizeof *r);
        if (np && ng)
            snprintf(r->test, sizeof r->test, "pp%d+tg%d", np, ng);
        else
            snprintf(r->test, sizeof r->test, "%s%d", np ? "pp" : "tg", np ? np : ng);
        if (ns > 1) snprintf(r->test + strlen(r->test), sizeof r->test - strlen(r->test), " x%d", ns);
        if (depth) snprintf(r->test + strlen(r->test), sizeof r->test - strlen(r->test), " @ d%d", depth);
        r->n_prompt = np;
        r->n_gen = ng;
        r->n_streams = ns;
        r->n_depth = depth;
        /* the first run is a warm-up */
        if ((ns > 1 ? run_streams(gb, toks, max_tokens, ns, ng, depth) : run_once(c, toks, np, ng, depth)) < 0) {
            rc = cli_fail("decode");
            n_rows--;
            continue;
        }
        const int probed = probe && np == 0;
        const double bw0 = probed ? probe_bandwidth(probe, nthreads) : 0;
        double sum = 0, sq = 0;
        for (int k = 0; k < reps; k++) {
            double sec = ns > 1 ? run_streams(gb, toks, max_tokens, ns, ng, depth) : run_once(c, toks, np, ng, depth);
            if (sec <= 0) {
                rc = cli_fail("decode");
                break;
            }
            double ts = (double)(np + ng) * ns / sec;
            r->samples[r->n_samples++] = ts;
            sum += ts;
            sq += ts * ts;
        }
        if (r->n_samples == 0) {
            n_rows--;
            continue;
        }
        if (probed) {
            const double bw1 = probe_bandwidth(probe, nthreads);
            r->read_bps = bw0 > 0 && bw1 > 0 ? (bw0 + bw1) / 2 : 0;
            if (!strcmp(out_fmt, "md"))
                fprintf(stderr, "kiln bench: read bandwidth %.1f GB/s before %s, %.1f after\n", bw0 / 1e9, r->test,
                        bw1 / 1e9);
        }
        r->avg = sum / r->n_samples;
        r->sd = r->n_samples > 1 ? sqrt(fmax(0.0, (sq - sum * sum / r->n_samples) / (r->n_samples - 1))) : 0.0;
        if (!strcmp(out_fmt, "md")) fprintf(stderr, "kiln bench: %s done\n", r->test);
        if (spx && ng && !np && ns == 1 && spec_rows(gb, spx, sprompt, n_sprompt, toks, depth, ng, reps, &rows[n_rows]))
            n_rows += 2;
        else if (spx && ng && !np && ns == 1)
            rc = cli_fail("generation");
    }
    if (!rows) rc = cli_fail("out of memory");
    char path[160];
    const char *kv_name = cli_kv_name(kv_type);
    /* the cache type shows in the backend column when it is not the default */
    const int on_gpu = !strcmp(info.backend, "cuda");
    char gpu[96] = "";
    size_t gfree, gtotal;
    if (on_gpu && backend_cuda_mem(&gfree, &gtotal, gpu, sizeof gpu)) snprintf(gpu, sizeof gpu, "GPU");
    char split[48] = ""; /* a model split between the GPU and the CPU */
    if (on_gpu && info.gpu_layers < info.n_layer)
        snprintf(split, sizeof split, ", %d/%d layers", info.gpu_layers, info.n_layer);
    snprintf(path, sizeof path, "%s%s%s%s%s", on_gpu ? gpu : kiln_cpu_path(), split,
             info.repacked_bytes ? ", repack" : "", kv_type != KILN_KV_F16 ? ", kv " : "",
             kv_type != KILN_KV_F16 ? kv_name : "");
    if (!strcmp(out_fmt, "json")) {
        printf("[\n");
        for (int i = 0; i < n_rows; i++) {
            bench_row *r = &rows[i];
            printf("  {\"model_type\": \"%s %s\", \"model_size\": %llu, \"model_n_params\": %llu, \"backend\": \"%s\", "
                   "\"%s\": \"%s\", "
                   "\"type_k\": \"%s\", \"type_v\": \"%s\", \"n_threads\": %d, \"test\": \"%s\", \"n_prompt\": %d, "
                   "\"n_gen\": %d, \"n_streams\": %d, "
                   "\"n_depth\": %d, \"n_gpu_layers\": %d, \"model_step_bytes\": %llu, \"avg_ts\": %.6f, "
                   "\"stddev_ts\": %.6f, \"samples_ts\": [",
                   info.arch, info.ftype, (unsigned long long)info.n_bytes, (unsigned long long)info.n_params,
                   info.backend, on_gpu ? "gpu_name" : "cpu_path", path, kv_name, kv_name, nthreads, r->test,
                   r->n_prompt, r->n_gen, r->n_streams, r->n_depth, info.gpu_layers,
                   (unsigned long long)info.step_bytes, r->avg, r->sd);
            for (int k = 0; k < r->n_samples; k++) printf(k ? ", %.6f" : "%.6f", r->samples[k]);
            printf("]");
            if (r->spec) printf(", \"spec_accept\": %.6f, \"spec_speedup\": %.6f", r->accept, r->ratio);
            if (r->read_bps > 0) {
                const double top = roofline_ts(r, &info);
                printf(", \"read_gbs\": %.6f, \"roofline_ts\": %.6f, \"roofline_share\": %.6f", r->read_bps / 1e9, top,
                       r->avg / top);
            } else if (roofline) {
                printf(", \"read_gbs\": null, \"roofline_ts\": null, \"roofline_share\": null");
            }
            printf("}%s\n", i + 1 < n_rows ? "," : "");
        }
        printf("]\n");
    } else {
        printf("| model | size | params | backend | threads | test | t/s |%s%s\n",
               roofline ? " read GB/s | roofline t/s | share |" : "", spx ? " speculation |" : "");
        printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |%s%s\n", roofline ? " ---: | ---: | ---: |" : "",
               spx ? " --- |" : "");
        for (int i = 0; i < n_rows; i++) {
            const bench_row *r = &rows[i];
            printf("| %s %s | %.2f MiB | %.2f M | %s (%s) | %d | %s | %.2f ± %.2f |", info.arch, info.ftype,
                   (double)info.n_bytes / (1024.0 * 1024.0), (double)info.n_params / 1e6, on_gpu ? "CUDA" : "CPU", path,
                   nthreads, r->test, r->avg, r->sd);
            if (r->read_bps > 0) {
                const double top = roofline_ts(r, &info);
                printf(" %.1f | %.2f | %.0f %% |", r->read_bps / 1e9, top, 100.0 * r->avg / top);
            } else if (roofline)
                printf(" - | - | - |");
            if (r->spec)
                printf(" %.1f %% accepted, %.2fx tg gen |", 100.0 * r->accept, r->ratio);
            else if (spx)
                printf(" - |");
            printf("\n");
        }
    }
    free(rows);
    free(toks);
    free(sprompt);
    if (probe) munmap(probe, PROBE_BYTES);
    gen_batch_free(gb);
    spec_free(spx);
    kiln_context_free(c);
    kiln_model_free(m);
    return rc;
bad:
    cli_usage("bench", stderr);
    return 2;
}
