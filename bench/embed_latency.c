/*
 * Query latency while a long document request runs, through the engine's
 * request gate (the embedding family makes queries urgent, the rerank
 * family takes an urgent flag, and both let a long request yield between
 * forward runs).
 *
 *   build/bench/kiln-embed-latency [--rerank] [--fifo] MODEL.gguf [N_DOCS=1000] [N_QUERIES=30]
 *
 * A background thread embeds (--rerank: scores against one query) N_DOCS
 * document chunks of about 100 words in one request; meanwhile the main
 * thread sends N_QUERIES short queries (--rerank: urgent one-document
 * reranks), one every 50 ms, and times each from call to result.  Prints
 * the median and maximum query latency, the document request's duration,
 * and, for comparison, a query's latency on an idle engine.  --fifo sends
 * the queries without urgency (embeddings: as documents; reranks: urgent
 * 0), so they wait in arrival order: the same run without the gate's
 * priority.
 */
#include "kiln.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int g_rerank, g_fifo;

typedef struct doc_job {
    kiln_engine *e;
    int n;
    char **texts;
    double t0, t1;
    kiln_status st;
    volatile int done;
} doc_job;

static void *doc_thread(void *arg) {
    doc_job *d = arg;
    if (g_rerank) {
        kiln_rerank_request q = {
            "what do the fox and the dog do by the river?", 0, d->n, (const char *const *)d->texts, NULL, 1};
        kiln_rerank_job *j = NULL;
        d->t0 = now_ms();
        d->st = kiln_engine_rerank(d->e, &q, 0, NULL, &j);
        d->t1 = now_ms();
        kiln_rerank_job_free(j);
        d->done = 1;
        return NULL;
    }
    kiln_embed_request r;
    memset(&r, 0, sizeof r);
    r.n = d->n;
    r.texts = (const char *const *)d->texts;
    r.kind = KILN_EMBED_DOCUMENT;
    r.allow_truncate = 1;
    kiln_embed_job *j = NULL;
    d->t0 = now_ms();
    d->st = kiln_engine_embed(d->e, &r, NULL, &j);
    d->t1 = now_ms();
    kiln_embed_job_free(j);
    d->done = 1;
    return NULL;
}

static double query_once(kiln_engine *e, int i) {
    char text[128];
    snprintf(text, sizeof text, "what did the fox do on day %d?", i);
    const char *texts[1] = {text};
    if (g_rerank) {
        const char *doc[1] = {"the lazy dog sleeps by the river while the quick brown fox jumps over the stone"};
        kiln_rerank_request q = {text, 0, 1, doc, NULL, 1};
        kiln_rerank_job *j = NULL;
        double t0 = now_ms();
        kiln_status st = kiln_engine_rerank(e, &q, !g_fifo, NULL, &j);
        double dt = now_ms() - t0;
        kiln_rerank_job_free(j);
        return st == KILN_OK ? dt : -1.0;
    }
    kiln_embed_request r;
    memset(&r, 0, sizeof r);
    r.n = 1;
    r.texts = texts;
    r.kind = g_fifo ? KILN_EMBED_DOCUMENT : KILN_EMBED_QUERY;
    kiln_embed_job *j = NULL;
    double t0 = now_ms();
    kiln_status st = kiln_engine_embed(e, &r, NULL, &j);
    double dt = now_ms() - t0;
    kiln_embed_job_free(j);
    return st == KILN_OK ? dt : -1.0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    while (argc > 1 && (!strcmp(argv[1], "--rerank") || !strcmp(argv[1], "--fifo"))) {
        if (!strcmp(argv[1], "--rerank"))
            g_rerank = 1;
        else
            g_fifo = 1;
        argv++;
        argc--;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: %s [--rerank] [--fifo] MODEL.gguf [N_DOCS] [N_QUERIES]\n", argv[0]);
        return 2;
    }
    int n_docs = argc > 2 ? atoi(argv[2]) : 1000, n_q = argc > 3 ? atoi(argv[3]) : 30;
    if (n_docs < 1 || n_q < 1 || n_q > 1000) return 2;
    kiln_engine *e;
    if (kiln_engine_create(g_rerank ? KILN_ENGINE_RERANK : KILN_ENGINE_EMBEDDING, KILN_ENGINE_BACKEND_AUTO, &e) !=
            KILN_OK ||
        kiln_engine_start(e) != KILN_OK || kiln_engine_load(e, argv[1], NULL) != KILN_OK ||
        kiln_engine_wait_idle(e, 60000) != KILN_OK) {
        fprintf(stderr, "engine: %s\n", kiln_last_error());
        return 1;
    }
    static const char *words[] = {"the",   "quick", "brown",  "fox",    "jumps",  "over", "lazy",  "dog",
                                  "river", "stone", "market", "winter", "garden", "lamp", "story", "kiln"};
    char **texts = malloc((size_t)n_docs * sizeof *texts);
    uint64_t x = 1;
    for (int i = 0; i < n_docs; i++) {
        texts[i] = malloc(1024);
        size_t o = 0;
        for (int w = 0; w < 100; w++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            o += (size_t)snprintf(texts[i] + o, 1024 - o, "%s ", words[(x >> 33) % 16]);
        }
    }
    double idle[5];
    for (int i = 0; i < 5; i++) idle[i] = query_once(e, i);
    qsort(idle, 5, sizeof idle[0], cmp_d);

    doc_job d = {e, n_docs, texts, 0, 0, KILN_OK, 0};
    pthread_t th;
    pthread_create(&th, NULL, doc_thread, &d);
    usleep(200000); /* let the document request take the gate */
    double *lat = malloc((size_t)n_q * sizeof *lat);
    int got = 0;
    for (int i = 0; i < n_q && !d.done; i++) {
        double t = query_once(e, i);
        if (t >= 0) lat[got++] = t;
        usleep(50000);
    }
    int overlapped = !d.done;
    pthread_join(th, NULL);
    qsort(lat, (size_t)got, sizeof lat[0], cmp_d);
    printf("model %s, %d documents of 100 words, %s%s%s\n", argv[1], n_docs, kiln_cpu_path(),
           g_rerank ? ", rerank" : "", g_fifo ? ", queries not urgent (--fifo)" : "");
    printf("%s request: %.1f s (%s)\n", g_rerank ? "rerank" : "document", (d.t1 - d.t0) / 1e3, kiln_status_str(d.st));
    printf("idle query latency: median %.2f ms\n", idle[2]);
    if (got)
        printf("query latency during the %s request (%d queries%s): median %.2f ms, max %.2f ms\n",
               g_rerank ? "rerank" : "document", got, overlapped ? "" : ", some after it ended", lat[got / 2],
               lat[got - 1]);
    for (int i = 0; i < n_docs; i++) free(texts[i]);
    free(texts);
    free(lat);
    kiln_engine_destroy(e, NULL);
    kiln_engine_free(e);
    return 0;
}
