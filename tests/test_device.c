/* The choice of device, on the mock GPU (tests/cuda_mock.cpp, named by
 * KILN_CUDA_DRIVER; KILN_CUDA_MOCK_MEM_MIB sets its size): the model load's
 * AUTO puts a model the CUDA backend takes on the GPU and falls back to the
 * CPU with one warning when it refuses one (a family without kernels, a
 * KV cache type it cannot keep, too little free device
 * memory), where an explicit CUDA fails with that reason; the engine runs
 * its model where the load put it and says so; -ngl N splits the layers
 * and -ngl auto fits as many as the device holds; and the command line
 * (kiln run/bench/show with --device and -ngl) prints the same greedy text
 * on the GPU as on the CPU.  Without the mock it is skipped (77). */
#include "kiln.h"
#include "server/server.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define STORIES "../models/stories260K.gguf"
/* a family the CUDA backend has no kernels for (GELU, sliding windows) */
#define REFUSED "data/arch/gemma3-f32.gguf"

static const char *bin;
static char g_dir[] = "/tmp/kiln-device-XXXXXX";

/* the warnings of the latest loads */
static char warned[4096];
static int n_warned;

static void on_log(int level, const char *msg, void *user) {
    (void)user;
    if (level > KILN_LOG_WARN) return;
    n_warned++;
    snprintf(warned, sizeof warned, "%s", msg);
}

static kiln_status load(const char *path, int backend, int gpu_layers, const kiln_context_params *cp, kiln_model **m) {
    kiln_model_params mp = kiln_model_default_params();
    mp.backend = backend;
    mp.gpu_layers = gpu_layers;
    mp.ctx = cp;
    n_warned = 0;
    warned[0] = 0;
    *m = NULL;
    return kiln_model_load(path, &mp, m);
}

static const char *backend_of(const kiln_model *m) {
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    return info.backend;
}

/* AUTO: loads on CPU with one warning that contains `why`; CUDA: fails
 * with it */
static void refused(const char *what, const char *path, int gpu_layers, const kiln_context_params *cp,
                    const char *why) {
    kiln_model *m;
    CHECKF(load(path, KILN_ENGINE_BACKEND_AUTO, gpu_layers, cp, &m) == KILN_OK, "%s: %s", what, kiln_last_error());
    CHECKF(m && !strcmp(backend_of(m), "cpu"), "%s: auto did not fall back to the CPU", what);
    CHECKF(n_warned == 1 && strstr(warned, why) && strstr(warned, "on the CPU"), "%s: %d warnings, last '%s'", what,
           n_warned, warned);
    printf("%-26s auto: %s\n", what, warned);
    kiln_model_free(m);
    CHECKF(load(path, KILN_ENGINE_BACKEND_CUDA, gpu_layers, cp, &m) == KILN_ERR_UNSUPPORTED && !m, "%s", what);
    CHECKF(strstr(kiln_last_error(), why) != NULL, "%s: cuda: %s", what, kiln_last_error());
}

static void test_load(void) {
    kiln_model *m;
    CHECK(load(STORIES, KILN_ENGINE_BACKEND_AUTO, 0, NULL, &m) == KILN_OK && m);
    CHECKF(m && !strcmp(backend_of(m), "cuda") && n_warned == 0, "auto: %s, %d warnings", m ? backend_of(m) : "-",
           n_warned);
    kiln_model_info info;
    if (m) kiln_model_get_info(m, &info);
    CHECK(m && info.device_bytes > 0 && info.repacked_bytes == 0);
    kiln_model_free(m);
    CHECK(load(STORIES, KILN_ENGINE_BACKEND_CPU, 0, NULL, &m) == KILN_OK && m && !strcmp(backend_of(m), "cpu"));
    kiln_model_free(m);
    /* every layer (stories has 5): the GPU */
    CHECK(load(STORIES, KILN_ENGINE_BACKEND_CUDA, 99, NULL, &m) == KILN_OK && m && !strcmp(backend_of(m), "cuda"));
    kiln_model_free(m);
    /* KILN_DEVICE turns AUTO into its backend */
    setenv("KILN_DEVICE", "cpu", 1);
    CHECK(load(STORIES, KILN_ENGINE_BACKEND_AUTO, 0, NULL, &m) == KILN_OK && m && !strcmp(backend_of(m), "cpu"));
    kiln_model_free(m);
    unsetenv("KILN_DEVICE");

    refused("family", REFUSED, 0, NULL, "the CUDA backend has no kernels for the gemma");
    kiln_context_params cp = kiln_context_default_params();
    cp.kv_type = KILN_KV_F32;
    refused("F32 KV cache", STORIES, 0, &cp, "only an F16 or Q8_0 KV cache");
    /* a 48 MiB device: the activations' headroom alone does not fit */
    setenv("KILN_CUDA_MOCK_MEM_MIB", "48", 1);
    refused("small device", STORIES, 0, NULL, "not enough GPU memory");
    unsetenv("KILN_CUDA_MOCK_MEM_MIB");
    /* a context too long for the device: its KV cache counts at load */
    cp = kiln_context_default_params();
    cp.n_ctx = 1 << 20;
    cp.n_seq_max = 64;
    refused("context past the device", STORIES, 0, &cp, "KV cache");
}

/* -ngl auto (and AUTO where not every layer fits): as many layers as the
 * device's free memory holds after their KV cache and the activations.
 * A context of 2^14 tokens x 64 sequences gives stories260K's layers
 * 256 MiB of F16 cache each; a device of 64 MiB of headroom, a few MiB of
 * activations and 2.5 layers' cache fits 2 of them. */
static void test_auto_layers(void) {
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = 1 << 14;
    cp.n_seq_max = 64;
    kiln_model *m;
    CHECK(load(STORIES, KILN_ENGINE_BACKEND_CPU, 0, &cp, &m) == KILN_OK && m);
    kiln_model_info info;
    if (m) kiln_model_get_info(m, &info);
    kiln_model_free(m);
    if (!m) return;
    const uint64_t layer = info.kv_bytes_per_token / (uint64_t)info.n_attn_layer * (uint64_t)cp.n_ctx * 64;
    const uint64_t mem = (64ull << 20) + (16ull << 20) + layer * 5 / 2;
    char mib[32];
    snprintf(mib, sizeof mib, "%llu", (unsigned long long)(mem >> 20));
    setenv("KILN_CUDA_MOCK_MEM_MIB", mib, 1);
    const int how[3][2] = {{KILN_ENGINE_BACKEND_CUDA, KILN_GPU_LAYERS_AUTO},
                           {KILN_ENGINE_BACKEND_AUTO, KILN_GPU_LAYERS_AUTO},
                           {KILN_ENGINE_BACKEND_AUTO, 0}};
    for (int k = 0; k < 3; k++) {
        CHECKF(load(STORIES, how[k][0], how[k][1], &cp, &m) == KILN_OK && m, "auto layers %d: %s", k,
               kiln_last_error());
        if (!m) continue;
        kiln_model_get_info(m, &info);
        CHECKF(!strcmp(info.backend, "cuda") && info.gpu_layers == 2 && n_warned == 0,
               "auto layers %d: %s with %d layers, %d warnings", k, info.backend, info.gpu_layers, n_warned);
        printf("-ngl auto on a %s MiB device: %d of %d layers on the GPU (%llu bytes of weights)\n", mib,
               info.gpu_layers, info.n_layer, (unsigned long long)info.device_bytes);
        kiln_model_free(m);
    }
    /* all layers asked for: refused as before */
    CHECK(load(STORIES, KILN_ENGINE_BACKEND_CUDA, 0, &cp, &m) == KILN_ERR_UNSUPPORTED && !m);
    CHECKF(strstr(kiln_last_error(), "not enough GPU memory"), "%s", kiln_last_error());
    unsetenv("KILN_CUDA_MOCK_MEM_MIB");
}

/* A decoder's embeddings (the final normalized hidden states, pooled) on
 * the GPU: those of the CPU, to rounding. */
static void test_embed(void) {
    const char *texts[] = {"w048 7tuijk dsdfhu", "a second text"};
    float *v[2] = {NULL, NULL};
    int dim = 0;
    for (int b = 0; b < 2; b++) {
        kiln_model *m;
        CHECK(load("data/fixtures/qwen3.gguf", b ? KILN_ENGINE_BACKEND_CUDA : KILN_ENGINE_BACKEND_CPU, 0, NULL, &m) ==
              KILN_OK);
        kiln_embedder *e = NULL;
        kiln_embedder_params p = kiln_embedder_default_params();
        p.max_tokens = 64;
        CHECKF(m && kiln_embedder_new_from_model(m, &p, &e) == KILN_OK, "%s", kiln_last_error());
        kiln_embed_request r;
        memset(&r, 0, sizeof r);
        r.n = 2;
        r.texts = texts;
        r.kind = KILN_EMBED_DOCUMENT;
        kiln_embed_job *j = NULL;
        CHECKF(e && kiln_embed(e, &r, &j) == KILN_OK, "%s", kiln_last_error());
        const kiln_embeddings *out = j ? kiln_embed_result(j) : NULL;
        if (out && out->dim > 0) {
            dim = out->dim;
            v[b] = malloc((size_t)dim * 2 * sizeof(float));
            memcpy(v[b], out->vectors, (size_t)dim * 2 * sizeof(float));
        }
        kiln_embed_job_free(j);
        kiln_embedder_free(e);
        kiln_model_free(m);
    }
    CHECK(v[0] && v[1]);
    if (v[0] && v[1]) {
        const double d = t_max_diff(v[0], v[1], 2 * dim);
        printf("embeddings on the GPU: max diff %.2e from the CPU's (%d dims)\n", d, dim);
        CHECKF(d < 5e-3, "embeddings differ by %g", d);
    }
    free(v[0]);
    free(v[1]);
}

/* ---- the engine ---- */

typedef struct text {
    char s[4096];
    size_t n;
} text;

static int on_token(const char *piece, size_t len, int32_t token, void *user) {
    (void)token;
    text *t = user;
    if (t->n + len < sizeof t->s) {
        memcpy(t->s + t->n, piece, len);
        t->n += len;
        t->s[t->n] = 0;
    }
    return 0;
}

/* Loads path on an engine of backend be, generates 24 greedy tokens after
 * prompt into out; the backend the engine reports. */
static int engine_text(const char *path, kiln_engine_backend be, const char *prompt, text *out) {
    memset(out, 0, sizeof *out);
    kiln_engine *e = NULL;
    int used = -1;
    CHECK(kiln_engine_create(KILN_ENGINE_LLM, be, &e) == KILN_OK);
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = 128;
    cp.n_seq_max = 2;
    cp.n_threads = 1;
    if (!e) return used;
    CHECK(kiln_engine_set_context_params(e, &cp) == KILN_OK);
    CHECK(kiln_engine_start(e) == KILN_OK);
    CHECK(kiln_engine_load(e, path, NULL) == KILN_OK);
    CHECKF(kiln_engine_wait_idle(e, -1) == KILN_OK, "%s", kiln_last_error());
    kiln_engine_generate_request rq;
    memset(&rq, 0, sizeof rq);
    rq.prompt = prompt;
    rq.n_predict = 24;
    rq.sampler = kiln_sampler_default_params();
    rq.sampler.temperature = 0;
    rq.on_token = on_token;
    rq.user = out;
    CHECKF(kiln_engine_generate(e, &rq, NULL) == KILN_OK, "%s", kiln_last_error());
    kiln_engine_observation o;
    CHECK(kiln_engine_observe(e, &o) == KILN_OK);
    used = o.backend;
    kiln_engine_free(e);
    return used;
}

static void test_engine(void) {
    text cpu, gpu, fb;
    CHECK(engine_text(STORIES, KILN_ENGINE_BACKEND_CPU, "Tom had a red", &cpu) == KILN_ENGINE_BACKEND_CPU);
    CHECK(engine_text(STORIES, KILN_ENGINE_BACKEND_AUTO, "Tom had a red", &gpu) == KILN_ENGINE_BACKEND_CUDA);
    printf("engine, cpu:  '%s'\nengine, auto: '%s'\n", cpu.s, gpu.s);
    CHECKF(cpu.n > 0 && !strcmp(cpu.s, gpu.s), "the engine's text differs between the CPU and the GPU");
    n_warned = 0;
    CHECK(engine_text(REFUSED, KILN_ENGINE_BACKEND_AUTO, "The train left", &fb) == KILN_ENGINE_BACKEND_CPU);
    CHECKF(n_warned == 1 && strstr(warned, "gemma"), "engine fallback: %d warnings, last '%s'", n_warned, warned);
    CHECK(fb.n > 0);
    /* explicit CUDA: the load fails with the reason */
    kiln_engine *e = NULL;
    CHECK(kiln_engine_create(KILN_ENGINE_LLM, KILN_ENGINE_BACKEND_CUDA, &e) == KILN_OK);
    if (e) {
        CHECK(kiln_engine_start(e) == KILN_OK);
        kiln_engine_load(e, REFUSED, NULL);
        CHECK(kiln_engine_wait_idle(e, -1) == KILN_ERR_UNSUPPORTED);
        CHECKF(strstr(kiln_last_error(), "no kernels for the gemma"), "%s", kiln_last_error());
        kiln_engine_free(e);
    }
}

/* ---- the command line ---- */

static int run(const char *env, const char *args, char **out, char **err) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s '%s' %s", env, bin, args);
    return t_run_capture(cmd, g_dir, out, err);
}

static void test_cli(void) {
    char *o1, *e1, *o2, *e2;
    /* 24 tokens of stories260K (the 25th is a near tie that the GPU's F32
     * attention sums and the CPU's F16 ones break differently) and the
     * F32/F16 fixtures */
    const char *gen = "run -m " STORIES " -p 'Tom had a red' -n 24 --temp 0 -v";
    const char *cases[] = {gen, "run -m data/fixtures/llama.gguf -p 'w048 7tuijk dsdfhu' -n 16 --temp 0 -v",
                           "run -m data/fixtures/qwen3.gguf -p 'w048 7tuijk dsdfhu' -n 16 --temp 0 -v"};
    char args[512];
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "%s --device cpu", cases[i]);
        int rc1 = run("", args, &o1, &e1);
        snprintf(args, sizeof args, "%s --device cuda", cases[i]);
        int rc2 = run("", args, &o2, &e2);
        CHECK(rc1 == 0 && rc2 == 0);
        CHECKF(o1 && o2 && *o1 && !strcmp(o1, o2), "cpu '%s'\ncuda '%s'", o1 ? o1 : "", o2 ? o2 : "");
        CHECKF(e1 && strstr(e1, ", CPU ("), "%s", e1 ? e1 : "");
        CHECKF(e2 && strstr(e2, ", CUDA ("), "%s", e2 ? e2 : "");
        printf("kiln %.40s... --device cuda: '%s'\n", cases[i], o2 ? o2 : "");
        free(o1), free(e1), free(o2), free(e2);
    }
    /* auto and -ngl 0 */
    snprintf(args, sizeof args, "%s -ngl 0", gen);
    CHECK(run("", args, &o1, &e1) == 0 && e1 && strstr(e1, ", CPU ("));
    free(o1), free(e1);
    snprintf(args, sizeof args, "%s --device auto -ngl all", gen);
    CHECK(run("", args, &o1, &e1) == 0 && e1 && strstr(e1, ", CUDA ("));
    free(o1), free(e1);
    CHECK(run("KILN_DEVICE=cpu", gen, &o1, &e1) == 0 && e1 && strstr(e1, ", CPU ("));
    free(o1), free(e1);
    /* a family CUDA refuses: auto falls back with one line, cuda fails */
    const char *ref = "run -m " REFUSED " -p 'The train left' -n 4 --temp 0";
    CHECK(run("", ref, &o1, &e1) == 0 && o1 && *o1);
    CHECKF(e1 && strstr(e1, "on the CPU, not the GPU") && strstr(e1, "gemma"), "%s", e1 ? e1 : "");
    printf("kiln run (auto, gemma3): %s", e1 ? e1 : "");
    free(o1), free(e1);
    snprintf(args, sizeof args, "%s --device cuda", ref);
    CHECK(run("", args, &o1, &e1) != 0 && e1 && strstr(e1, "no kernels for the gemma"));
    free(o1), free(e1);
    /* a device too small: auto falls back, cuda fails */
    CHECK(run("KILN_CUDA_MOCK_MEM_MIB=48", gen, &o1, &e1) == 0 && e1 && strstr(e1, "not enough GPU memory") &&
          strstr(e1, ", CPU ("));
    free(o1), free(e1);
    snprintf(args, sizeof args, "%s --device cuda", gen);
    CHECK(run("KILN_CUDA_MOCK_MEM_MIB=48", args, &o1, &e1) != 0 && e1 && strstr(e1, "not enough GPU memory"));
    free(o1), free(e1);
    /* a split: the last 2 of stories' 5 layers on the GPU, the same text */
    snprintf(args, sizeof args, "%s --device cpu", gen);
    CHECK(run("", args, &o1, &e1) == 0);
    snprintf(args, sizeof args, "%s --device cuda -ngl 2", gen);
    CHECK(run("", args, &o2, &e2) == 0);
    CHECKF(o1 && o2 && *o1 && !strcmp(o1, o2), "cpu '%s'\n-ngl 2 '%s'", o1 ? o1 : "", o2 ? o2 : "");
    CHECKF(e2 && strstr(e2, ", CUDA (2 of 5 layers"), "%s", e2 ? e2 : "");
    free(o1), free(e1), free(o2), free(e2);
    CHECK(run("", "bench -m " STORIES " -p 16 -n 4 -r 1 -ngl 3 -o json", &o1, &e1) == 0);
    CHECKF(o1 && strstr(o1, "\"n_gpu_layers\": 3") && strstr(o1, "3/5 layers"), "%s", o1 ? o1 : "");
    free(o1), free(e1);
    CHECK(run("", "run -m " STORIES " -p x --device tpu", &o1, &e1) == 2 && e1 && strstr(e1, "not auto, cpu or cuda"));
    free(o1), free(e1);
    /* bench and show name the device */
    CHECK(run("", "bench -m " STORIES " -p 16 -n 4 -r 1 --device cuda", &o1, &e1) == 0);
    CHECKF(o1 && strstr(o1, "| CUDA (kiln mock device"), "%s", o1 ? o1 : "");
    free(o1), free(e1);
    CHECK(run("", "bench -m " STORIES " -p 16 -n 4 -r 1 -o json", &o1, &e1) == 0);
    CHECKF(o1 && strstr(o1, "\"backend\": \"cuda\""), "%s", o1 ? o1 : "");
    free(o1), free(e1);
    CHECK(run("", "show " STORIES " --no-tensors", &o1, &e1) == 0 && o1 && strstr(o1, "device:    CUDA"));
    free(o1), free(e1);
}

/* ---- the server ---- */

/* GET path from 127.0.0.1:port: the whole response into out */
static void http_get(int port, const char *path, char *out, size_t cap) {
    out[0] = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&to, sizeof to)) {
        if (fd >= 0) close(fd);
        return;
    }
    char req[256];
    const int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    size_t got = 0;
    if (write(fd, req, (size_t)n) == n)
        for (ssize_t r; got + 1 < cap && (r = read(fd, out + got, cap - 1 - got)) > 0;) got += (size_t)r;
    out[got] = 0;
    close(fd);
}

/* kiln serve's generating model on the GPU: /api/ps and /props say so,
 * and kiln ps shows 100% GPU */
/* gpu_layers: -ngl (0: all; 2: a split, reported as the GPU's share) */
static void test_server(int gpu_layers) {
    const char *models[] = {STORIES};
    server_config cfg = server_config_default();
    cfg.gpu_layers = gpu_layers;
    cfg.port = 0;
    cfg.models = models;
    cfg.n_models = 1;
    cfg.n_ctx = 64;
    cfg.parallel = 2;
    cfg.n_threads = 1;
    cfg.store_root = g_dir;
    server_server *srv = NULL;
    CHECK(server_server_start(&cfg, &srv) == KILN_OK);
    if (!srv) return;
    char msg[512];
    CHECKF(server_server_wait_loaded(srv, msg, sizeof msg) == KILN_OK, "%s", msg);
    const int port = server_server_port(srv);
    static char resp[65536];
    http_get(port, "/api/ps", resp, sizeof resp);
    CHECKF(strstr(resp, "\"backend\": \"cuda\"") || strstr(resp, "\"backend\":\"cuda\""), "%s", resp);
    const char *v = strstr(resp, "\"size_vram\""), *sz = strstr(resp, "\"size\"");
    CHECKF(v && atoll(strchr(v, ':') + 1) > 0, "size_vram: %s", resp);
    /* split: the GPU's 2 of 5 layers and their KV cache, under the file's size */
    CHECKF(!gpu_layers || (v && sz && atoll(strchr(v, ':') + 1) < atoll(strchr(sz, ':') + 1)), "size_vram: %s", resp);
    http_get(port, "/props", resp, sizeof resp);
    CHECKF(strstr(resp, "\"backend\": \"cuda\"") || strstr(resp, "\"backend\":\"cuda\""), "%s", resp);
    char args[128], *o, *e;
    snprintf(args, sizeof args, "ps --host 127.0.0.1:%d", port);
    CHECK(run("", args, &o, &e) == 0 && o && strstr(o, gpu_layers ? "% CPU/GPU" : "100% GPU"));
    printf("kiln ps: %s", o ? o : "");
    free(o), free(e);
    server_server_drain(srv, 1);
    server_server_free(srv);
}

int main(void) {
    kiln_set_log(on_log, NULL, KILN_LOG_WARN);
    kiln_model *m = NULL;
    if (load(STORIES, KILN_ENGINE_BACKEND_CUDA, 0, NULL, &m) == KILN_ERR_UNSUPPORTED &&
        strstr(kiln_last_error(), "no CUDA backend")) {
        printf("skipped: %s\n", kiln_last_error());
        return 77;
    }
    kiln_model_free(m);
    bin = getenv("KILN_BIN");
    CHECKF(bin && mkdtemp(g_dir), "KILN_BIN is not set, or no scratch directory");
    if (!bin) return t_done();
    test_load();
    test_auto_layers();
    test_embed();
    test_engine();
    test_cli();
    test_server(0);
    test_server(2);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return t_done();
}
