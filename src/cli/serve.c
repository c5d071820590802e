/* kiln serve: the HTTP server (src/server).  Runs until SIGTERM or SIGINT,
 * then drains: no new connections, running requests get --grace seconds to
 * finish, the rest are cancelled, and the process exits 0. */
#include "cli/cli.h"
#include "cli/common.h"

#include "server/server.h"
#include "store/store.h"

#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int want_num(int argc, char **argv, int *i, double *out) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "kiln serve: %s needs a value\n", argv[*i]);
        return -1;
    }
    char *end;
    *out = strtod(argv[*i + 1], &end);
    if (end == argv[*i + 1] || *end) {
        fprintf(stderr, "kiln serve: %s: '%s' is not a number\n", argv[*i], argv[*i + 1]);
        return -1;
    }
    (*i)++;
    return 0;
}

/* "5m", "30s", "1h", "-1", "300" -> seconds */
static int parse_dur(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s) return -1;
    if (!strcmp(end, "h"))
        v *= 3600;
    else if (!strcmp(end, "m"))
        v *= 60;
    else if (*end && strcmp(end, "s"))
        return -1;
    *out = v;
    return 0;
}

/* A line of kiln serve on stderr, as text or (--log-format json) as a JSON
 * object like the server's own lines. */
static void say(int json, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int json, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    server_log_line(json, msg);
    fflush(stderr);
}

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: kiln serve [-m MODEL|NAME ...] [options]\n"
            "  -m MODEL|NAME     a GGUF file or a store name (repeatable; loaded at start)\n"
            "  --host ADDR       bind address, IPv4 or IPv6 (default 127.0.0.1); bound to loopback, only\n"
            "                    requests whose Host is a loopback name or the address itself are served\n"
            "  --port P          port (default %d; 0 = any free port, printed at start)\n"
            "  --store DIR       model store root (default $KILN_STORE or ~/.local/share/kiln)\n"
            "  -np, --parallel N sequences decoded together per model: the slots (default 4)\n"
            "  -c N              context tokens per sequence (default: the model's up to 4096, capped by memory)\n"
            "  -b N              most tokens per forward step (default 512)\n"
            "  -t N              threads (default: all CPUs)\n"
            "  --kv-budget MIB   KV cache memory per model (default: -c x --parallel)\n"
            "  --cache-type T    KV cache type: f16 (default), f32 or q8_0 (--kv-f32 = f32)\n"
            "  --device D        auto (default: a generating model goes to the GPU when one is usable and\n"
            "                    takes it, else the CPU), cpu or cuda (a load fails when the GPU cannot run\n"
            "                    the model); -ngl 0 = cpu, -ngl N = a model's last N layers on the GPU,\n"
            "                    -ngl auto = as many as fit; KILN_DEVICE sets the default\n"
            "  --mmproj FILE     the image projector (llama.cpp's mmproj GGUF) of the one -m model; a pulled\n"
            "                    model's own projector is found without it\n"
            "  --image PACK      serve an image pack (a directory, or a name in the store) at\n"
            "                    POST /v1/images/generations (256x256, b64_json)\n"
            "  --api-key KEY     require 'Authorization: Bearer KEY' (not on /health and the chat page's\n"
            "                    files); also $KILN_API_KEY\n"
            "  --cors-origins L  browser origins allowed besides loopback ones and the server's own:\n"
            "                    comma-separated, '*' globs ('*' alone = any); also $KILN_ORIGINS\n"
            "  --keep-alive DUR  idle time before a model unloads (default 5m; -1 = never); a request's\n"
            "                    keep_alive (Ollama) applies after that request only\n"
            "  --max-loaded N    models resident at once (default: as many as fit in 3/4 of RAM); the\n"
            "                    least recently used idle one unloads first\n"
            "  --max-body BYTES  request body limit (default 8 MiB; with a vision projector, --mmproj or\n"
            "                    one beside a -m model, or no -m: 4/3 --max-image-bytes + 1 MiB, so an\n"
            "                    image of the image limit fits as base64)\n"
            "  --max-image-bytes BYTES  one request's images, decoded, in all (default 20 MiB; over: 413)\n"
            "  --allow-image-urls  fetch http(s) image URLs that requests name (20 s, within\n"
            "                    --max-image-bytes); without it only data: URLs and base64 are taken\n"
            "  --max-conn-per-ip N\n"
            "                    open connections from one client address (default 32; at most half\n"
            "                    of the 512 in all)\n"
            "  --header-timeout S\n"
            "                    seconds a connection has to send a request's head (default 10)\n"
            "  --max-audio-seconds S  longest audio one transcription request decodes (default 7200;\n"
            "                    longer gets 413); each second held is 64 KB at 16 kHz\n"
            "  --template-steps N  evaluation steps one chat template render may take (default 4000000)\n"
            "  --log-format F    text (default) or json: one line per request (method, path, status,\n"
            "                    model, tokens, ms) and per model event on stderr\n"
            "  --max-queue N     waiting requests per model before 429 (default 64)\n"
            "  --reasoning-budget N  tokens a thinking model may reason before its </think> is written for\n"
            "                    it, when a request names no budget (default -1: no limit; 0: no thinking)\n"
            "  --repeat-guard N  end a reply whose last N or more tokens repeat one stretch of 1..64 tokens\n"
            "                    (done reason \"repetition\"; default 256; 0: off)\n"
            "  --grace S         seconds to finish running requests on SIGTERM (default 10)\n"
            "  --spec TYPE       speculative decoding for every request of a generating model: ngram\n"
            "                    or draft, with --spec-n N, -md/--draft-model M, --spec-fixed,\n"
            "                    --spec-ngram-min N, --spec-ngram-max N, --spec-p-min P as for kiln run\n",
            SERVER_DEFAULT_PORT);
}

/* Whether a served model may take images: a --mmproj, a -m model (a file,
 * or a name in the store) whose pack holds a projector, or the store's
 * models on demand (a pulled vision model brings its projector). */
static int vision_possible(const server_config *cfg) {
    if (cfg->mmproj || cfg->n_models == 0) return 1;
    char companion[4096];
    int found = 0;
    kiln_store *st = NULL;
    for (int i = 0; i < cfg->n_models && !found; i++) {
        struct stat ms;
        if (stat(cfg->models[i], &ms) == 0) {
            found = strchr(cfg->models[i], '/') &&
                    store_pack_companion(cfg->models[i], "mmproj", companion, sizeof companion);
            continue;
        }
        kiln_store_lease *l = NULL;
        if ((st || kiln_store_open(cfg->store_root, &st) == KILN_OK) &&
            kiln_store_resolve(st, cfg->models[i], &l) == KILN_OK)
            found = store_pack_companion(kiln_store_lease_path(l), "mmproj", companion, sizeof companion);
        kiln_store_release(l);
    }
    kiln_store_close(st);
    return found;
}

/* The body limit that holds images of max_image bytes as base64 (4 digits
 * per 3 bytes) plus 1 MiB for the rest of the request; never below base. */
static size_t body_for_images(size_t base, size_t max_image) {
    const size_t need = (max_image / 3 + 1) * 4 + ((size_t)1 << 20);
    return need > base ? need : base;
}

int cli_serve(int argc, char **argv) {
    server_config cfg = server_config_default();
    const char **models = calloc((size_t)argc, sizeof *models);
    if (!models) return 1;
    int n_models = 0;
    double grace = 10, v;
    int sr, body_set = 0;
    cfg.api_key = getenv("KILN_API_KEY");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has)
            models[n_models++] = argv[++i];
        else if (!strcmp(a, "--host") && has)
            cfg.host = argv[++i];
        else if (!strcmp(a, "--store") && has)
            cfg.store_root = argv[++i];
        else if (!strcmp(a, "--api-key") && has)
            cfg.api_key = argv[++i];
        else if (!strcmp(a, "--mmproj") && has)
            cfg.mmproj = argv[++i];
        else if (!strcmp(a, "--image") && has)
            cfg.image_pack = argv[++i];
        else if (!strcmp(a, "--cors-origins") && has)
            cfg.cors_origins = argv[++i];
        else if (!strcmp(a, "--keep-alive") && has) {
            if (parse_dur(argv[++i], &cfg.keep_alive)) {
                fprintf(stderr, "kiln serve: --keep-alive: '%s' is not a duration\n", argv[i]);
                free(models);
                return 2;
            }
        } else if (!strcmp(a, "--log-format") && has) {
            const char *f = argv[++i];
            if (strcmp(f, "text") && strcmp(f, "json")) {
                fprintf(stderr, "kiln serve: --log-format: '%s' is not text or json\n", f);
                free(models);
                return 2;
            }
            cfg.log_json = !strcmp(f, "json");
        } else if (!strcmp(a, "--allow-image-urls")) {
            cfg.allow_image_urls = 1;
        } else if (!strcmp(a, "--kv-f32"))
            cfg.kv_type = KILN_KV_F32;
        else if (!strcmp(a, "--cache-type") && has) {
            if ((cfg.kv_type = cli_kv_type(argv[++i])) < 0) {
                fprintf(stderr, "kiln serve: --cache-type: '%s' is not f16, f32 or q8_0\n", argv[i]);
                free(models);
                return 2;
            }
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage(stdout);
            free(models);
            return 0;
        } else if ((sr = cli_parse_device(argc, argv, &i, &cfg.backend, &cfg.gpu_layers)) != 0) {
            if (sr < 0) {
                free(models);
                return 2;
            }
        } else if ((sr = cli_parse_spec(&cfg.spec, argc, argv, &i)) != 0) {
            if (sr < 0) {
                free(models);
                return 2;
            }
        } else {
            const char *numeric[] = {"--port",
                                     "--parallel",
                                     "-c",
                                     "-b",
                                     "-t",
                                     "--kv-budget",
                                     "--max-body",
                                     "--max-queue",
                                     "--grace",
                                     "--ctx-size",
                                     "--threads",
                                     "--max-loaded",
                                     "-np",
                                     "--reasoning-budget",
                                     "--repeat-guard",
                                     "--max-conn-per-ip",
                                     "--header-timeout",
                                     "--max-audio-seconds",
                                     "--template-steps",
                                     "--max-image-bytes"};
            int k = -1;
            for (int j = 0; j < (int)(sizeof numeric / sizeof numeric[0]); j++)
                if (!strcmp(a, numeric[j])) k = j;
            if (k < 0) {
                fprintf(stderr, "kiln serve: unknown option '%s'\n", a);
                serve_usage(stderr);
                free(models);
                return 2;
            }
            if (want_num(argc, argv, &i, &v)) {
                free(models);
                return 2;
            }
            switch (k) {
            case 0: cfg.port = (int)v; break;
            case 1:
            case 12: cfg.parallel = (int)v; break;
            case 2:
            case 9: cfg.n_ctx = (int)v; break;
            case 3: cfg.n_batch = (int)v; break;
            case 4:
            case 10: cfg.n_threads = (int)v; break;
            case 5: cfg.kv_budget = (uint64_t)(v * 1048576.0); break;
            case 6:
                cfg.max_body = (size_t)v;
                body_set = 1;
                break;
            case 7: cfg.max_queue = (int)v; break;
            case 8: grace = v; break;
            case 11: cfg.max_loaded = (int)v; break;
            case 13: cfg.reasoning_budget = v < 0 ? -1 : v > 1 << 30 ? (1 << 30) + 1 : (int32_t)v; break;
            case 14: cfg.repeat_guard = v < 0 ? -1 : v > 1 << 30 ? (1 << 30) + 1 : (int32_t)v; break;
            case 15: cfg.max_conn_per_ip = (int)v; break;
            case 16: cfg.header_timeout = v; break;
            case 17:
                if (!(v > 0)) {
                    fprintf(stderr, "kiln serve: --max-audio-seconds must be above 0\n");
                    free(models);
                    return 2;
                }
                cfg.max_audio_seconds = v;
                break;
            case 18:
                if (!(v >= 1 && v <= 1e15)) {
                    fprintf(stderr, "kiln serve: --template-steps must be 1..10^15\n");
                    free(models);
                    return 2;
                }
                cfg.template_steps = (uint64_t)v;
                break;
            case 19:
                if (!(v >= 1 && v <= 1e12)) {
                    fprintf(stderr, "kiln serve: --max-image-bytes must be 1..10^12\n");
                    free(models);
                    return 2;
                }
                cfg.max_image_bytes = (size_t)v;
                break;
            }
        }
    }
    if (cfg.repeat_guard < 0 || cfg.reasoning_budget > 1 << 30 || cfg.repeat_guard > 1 << 30) {
        fprintf(stderr, "kiln serve: --repeat-guard must be 0 (off) or more, --reasoning-budget -1..2^30\n");
        free(models);
        return 2;
    }
    if (cfg.max_conn_per_ip < 1 || cfg.max_conn_per_ip > cfg.max_connections / 2 || !(cfg.header_timeout > 0)) {
        fprintf(stderr, "kiln serve: --max-conn-per-ip must be 1..%d and --header-timeout above 0\n",
                cfg.max_connections / 2);
        free(models);
        return 2;
    }
    if (cfg.parallel < 1 || cfg.parallel > 64 || cfg.port < 0 || cfg.port > 65535) {
        fprintf(stderr, "kiln serve: --parallel must be 1..64 and --port 0..65535\n");
        free(models);
        return 2;
    }
    cfg.models = models;
    cfg.n_models = n_models;
    if (cfg.mmproj && n_models != 1) {
        fprintf(stderr, "kiln serve: --mmproj goes with exactly one -m model (%d given)\n", n_models);
        free(models);
        return 2;
    }
    if (!body_set && vision_possible(&cfg)) cfg.max_body = body_for_images(cfg.max_body, cfg.max_image_bytes);
    /* --image takes a pack's directory or the name of one in the store; the
     * lease keeps the pack from removal while it is served */
    kiln_store_lease *image_lease = NULL;
    struct stat ist;
    if (cfg.image_pack && stat(cfg.image_pack, &ist) != 0) {
        kiln_store *st = NULL;
        if (kiln_store_open(cfg.store_root, &st) != KILN_OK ||
            kiln_store_resolve(st, cfg.image_pack, &image_lease) != KILN_OK) {
            fprintf(stderr, "kiln serve: --image %s: no such pack, and not one in the store (%s)\n", cfg.image_pack,
                    kiln_last_error());
            kiln_store_close(st);
            free(models);
            return 1;
        }
        kiln_store_close(st);
        cfg.image_pack = kiln_store_lease_path(image_lease);
    }
    /* signals are taken synchronously by this thread; every other thread
     * (started below) inherits the blocked mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    server_server *s;
    if (server_server_start(&cfg, &s) != KILN_OK) {
        kiln_store_release(image_lease);
        free(models);
        return 1;
    }
    int v6 = strchr(cfg.host, ':') && cfg.host[0] != '[';
    say(cfg.log_json, "listening on http://%s%s%s:%d", v6 ? "[" : "", cfg.host, v6 ? "]" : "", server_server_port(s));
    /* a -m model that does not load ends the server at once, with why */
    char why[512];
    if (server_server_wait_loaded(s, why, sizeof why) != KILN_OK) {
        say(cfg.log_json, "%s", why);
        server_server_free(s);
        free(models);
        return 1;
    }
    int sig = 0;
    while (sigwait(&set, &sig) == EINTR) {}
    say(cfg.log_json, "signal %d", sig);
    server_server_drain(s, grace); /* says "draining" once /health answers 503 */
    server_server_free(s);
    kiln_store_release(image_lease);
    free(models);
    say(cfg.log_json, "stopped");
    return 0;
}
