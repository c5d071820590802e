/* kiln pull / import / ls / rm / verify / gc / cp, and show --remote.  The
 * store root comes from --store (main.c turns it into KILN_STORE) or the
 * default; model.c resolves a store name where a command takes a model. */
#include "cli/cli.h"
#include "cli/common.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static volatile int g_cancel; /* set by SIGINT; the library polls it */

static void on_sigint(int sig) {
    (void)sig;
    g_cancel = 1;
}

static void catch_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static int open_store(kiln_store **s) {
    if (kiln_store_open(NULL, s) != KILN_OK) return cli_fail("store");
    return 0;
}

static void human(uint64_t b, char *buf, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 4) v /= 1024, i++;
    snprintf(buf, cap, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

/* ---- progress: a live bar on a terminal, plain lines otherwise, JSON
 * lines with --json ---- */

typedef struct show_ctx {
    int json, tty;
    const char *verb; /* how "start" reads: "downloading", or an import's "copying" ... */
    double last_line; /* plain mode: time of the last progress line */
    int bar_open;     /* tty: a bar is drawn without its newline */
} show_ctx;

static void end_bar(show_ctx *c) {
    if (c->bar_open) fputc('\n', stderr);
    c->bar_open = 0;
}

static void on_progress(const kiln_store_progress *p, void *user) {
    show_ctx *c = user;
    if (c->json) {
        char buf[2048];
        kiln_store_progress_json(p, buf, sizeof buf);
        printf("%s\n", buf);
        fflush(stdout);
        return;
    }
    char done[32], total[32], rate[32], eta[32] = "";
    human(p->done, done, sizeof done);
    human(p->total, total, sizeof total);
    human((uint64_t)p->rate, rate, sizeof rate);
    if (p->eta >= 0) snprintf(eta, sizeof eta, " ETA %d:%02d", (int)p->eta / 60, (int)p->eta % 60);
    /* no rate before one is measured (a hash of a local file has none) */
    char rate_s[48] = "";
    if (p->rate > 0) snprintf(rate_s, sizeof rate_s, "%s%s/s", c->tty ? " " : ", ", rate);
    const char *art = p->artifact ? p->artifact : "";
    if (!strcmp(p->event, "progress") || !strcmp(p->event, "verify")) {
        int pct = p->total ? (int)(100.0 * (double)p->done / (double)p->total) : -1;
        if (c->tty) {
            char bar[31];
            int fill = pct < 0 ? 0 : pct * 30 / 100;
            for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
            bar[30] = 0;
            fprintf(stderr, "\r\033[K%s%s [%s] %3d%% %s/%s%s%s", p->event[0] == 'v' ? "verify " : "", art, bar,
                    pct < 0 ? 0 : pct, done, p->total ? total : "?", rate_s, eta);
            if (p->count > 1) fprintf(stderr, " (%d/%d)", p->index + 1, p->count);
            c->bar_open = 1;
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            double now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
            if (now - c->last_line < 2.0) return;
            c->last_line = now;
            fprintf(stderr, "%s %s: %s of %s%s%s\n", p->event, art, done, p->total ? total : "?", rate_s, eta);
        }
        return;
    }
    end_bar(c);
    if (!strcmp(p->event, "published")) {
        if (!c->verb) fprintf(stderr, "installed %.12s\n", p->message ? p->message : ""); /* an import says it after */
    } else if (!strcmp(p->event, "resume"))
        fprintf(stderr, "resuming %s at %s\n", art, done);
    else if (!strcmp(p->event, "start"))
        fprintf(stderr, "%s %s%s%s\n", c->verb ? c->verb : "downloading", art, p->total ? ", " : "",
                p->total ? total : "");
    else if (!strcmp(p->event, "done"))
        fprintf(stderr, "%s: complete (%s)%s%s\n", art, done, p->message ? ", " : "", p->message ? p->message : "");
    else
        fprintf(stderr, "%s%s%s%s%s\n", p->event, *art ? " " : "", art, p->message ? ": " : "",
                p->message ? p->message : "");
}

static void init_show(show_ctx *c, int json) {
    memset(c, 0, sizeof *c);
    c->json = json;
    c->tty = isatty(2);
}

/* ---- commands ---- */

static int source_exit(void);

int cli_pull(int argc, char **argv) {
    const char *url = NULL, *name = NULL, *sha = NULL, *token = NULL, *mirror = NULL;
    const char *headers[16];
    int n_headers = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--name") && i + 1 < argc)
            name = argv[++i];
        else if (!strcmp(a, "--sha256") && i + 1 < argc)
            sha = argv[++i];
        else if (!strcmp(a, "--header") && i + 1 < argc && n_headers < 16)
            headers[n_headers++] = argv[++i];
        else if (!strcmp(a, "--token") && i + 1 < argc)
            token = argv[++i];
        else if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "--url") && i + 1 < argc)
            mirror = argv[++i];
        else if (a[0] != '-' && !url)
            url = a;
        else if (cli_help("pull", a))
            return 0;
        else {
            fprintf(stderr, "kiln pull: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (!url) {
        cli_usage("pull", stderr);
        return 2;
    }
    kiln_store *s;
    if (open_store(&s)) return 1;
    catch_sigint();
    show_ctx sc;
    init_show(&sc, json);
    kiln_store_pull_params pp = {.headers = n_headers ? headers : NULL,
                                 .n_headers = n_headers,
                                 .progress = on_progress,
                                 .user = &sc,
                                 .cancel = &g_cancel,
                                 .token = token};
    char id[65];
    /* a built-in name (whisper:base.en) comes from the hub, or from --url */
    kiln_status st = kiln_builtin_find(url) ? kiln_builtin_pull(s, url, mirror, &pp, id)
                                            : kiln_store_pull(s, url, name, sha, &pp, id);
    end_bar(&sc);
    kiln_store_close(s);
    if (st != KILN_OK) {
        cli_fail("pull");
        return source_exit();
    }
    return 0;
}

int cli_import(int argc, char **argv) {
    const char *path = NULL, *name = NULL;
    int mode = KILN_STORE_COPY, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--name") && i + 1 < argc)
            name = argv[++i];
        else if (!strcmp(a, "--copy"))
            mode = KILN_STORE_COPY;
        else if (!strcmp(a, "--move"))
            mode = KILN_STORE_MOVE;
        else if (!strcmp(a, "--link"))
            mode = KILN_STORE_LINK;
        else if (!strcmp(a, "--json"))
            json = 1;
        else if (a[0] != '-' && !path)
            path = a;
        else if (cli_help("import", a))
            return 0;
        else {
            fprintf(stderr, "kiln import: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (!path) {
        cli_usage("import", stderr);
        return 2;
    }
    kiln_store *s;
    if (open_store(&s)) return 1;
    show_ctx sc;
    init_show(&sc, json);
    sc.verb = mode == KILN_STORE_LINK ? "hashing" : mode == KILN_STORE_MOVE ? "moving" : "copying";
    char id[65];
    kiln_status st = kiln_store_import(s, path, name, mode, on_progress, &sc, id);
    end_bar(&sc);
    if (st == KILN_OK && !json) {
        /* the name it was installed under (a bare name gains ":latest"), and the short id */
        char *txt = NULL;
        json_t *inf = kiln_store_info(s, name ? name : id, &txt) == KILN_OK ? json_loads(txt, 0, NULL) : NULL;
        kiln_store_free_string(txt);
        const char *shown = json_string_value(json_object_get(inf, "name"));
        json_t *names = json_object_get(inf, "names");
        if ((!shown || !*shown) && json_array_size(names) == 1) shown = json_string_value(json_array_get(names, 0));
        if (shown && *shown)
            fprintf(stderr, "imported %s (%.12s)\n", shown, id);
        else
            fprintf(stderr, "imported %.12s\n", id);
        json_decref(inf);
    }
    kiln_store_close(s);
    return st != KILN_OK ? cli_fail("import") : 0;
}

/* "2 hours ago", as ollama ls words the time a model was modified. */
static void ago(json_int_t t, char *buf, size_t cap) {
    const double d = difftime(time(NULL), (time_t)t);
    const long n = (long)d;
    if (t <= 0)
        snprintf(buf, cap, "-");
    else if (d < 1)
        snprintf(buf, cap, "Less than a second ago");
    else if (d < 60)
        snprintf(buf, cap, "%ld second%s ago", n, n == 1 ? "" : "s");
    else if (d < 120)
        snprintf(buf, cap, "About a minute ago");
    else if (d < 3600)
        snprintf(buf, cap, "%ld minutes ago", n / 60);
    else if (d < 7200)
        snprintf(buf, cap, "About an hour ago");
    else if (d < 2 * 86400)
        snprintf(buf, cap, "%ld hours ago", n / 3600);
    else if (d < 14 * 86400)
        snprintf(buf, cap, "%ld days ago", n / 86400);
    else if (d < 60 * 86400)
        snprintf(buf, cap, "%ld weeks ago", n / (7 * 86400));
    else if (d < 730 * 86400)
        snprintf(buf, cap, "%ld months ago", n / (30 * 86400));
    else
        snprintf(buf, cap, "%ld years ago", n / (365 * 86400));
}

int cli_ls(int argc, char **argv) {
    int json = argc > 1 && !strcmp(argv[1], "--json");
    if (argc > 1 + json) {
        cli_usage("ls", stderr);
        return 2;
    }
    kiln_store *s;
    if (open_store(&s)) return 1;
    char *txt = NULL;
    kiln_status st = kiln_store_list(s, &txt);
    kiln_store_close(s);
    if (st != KILN_OK) return cli_fail("ls");
    if (json) {
        printf("%s\n", txt);
        kiln_store_free_string(txt);
        return 0;
    }
    json_t *list = json_loads(txt, 0, NULL);
    kiln_store_free_string(txt);
    printf("%-32s %-12s %10s  %-22s %-8s %-8s %-7s %s\n", "NAME", "ID", "SIZE", "MODIFIED", "ARCH", "QUANT", "MODE",
           "STATE");
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        char size[32], when[48];
        const char *name = json_string_value(json_object_get(e, "name"));
        human((uint64_t)json_integer_value(json_object_get(e, "size")), size, sizeof size);
        ago(json_integer_value(json_object_get(e, "modified")), when, sizeof when);
        printf("%-32s %-12.12s %10s  %-22s %-8s %-8s %-7s %s\n", name && *name ? name : "-",
               json_string_value(json_object_get(e, "id")), size, when, json_string_value(json_object_get(e, "arch")),
               json_string_value(json_object_get(e, "quantization")), json_string_value(json_object_get(e, "mode")),
               json_string_value(json_object_get(e, "state")));
    }
    json_decref(list);
    return 0;
}

static void print_removed(const char *name, void *user) {
    (void)user;
    printf("removed %s\n", name);
}

int cli_rm(int argc, char **argv) {
    int force = 0, n_refs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--force") || !strcmp(argv[i], "-f"))
            force = 1;
        else if (cli_help("rm", argv[i]))
            return 0;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "kiln rm: unknown option %s\n", argv[i]);
            return 2;
        } else
            n_refs++;
    }
    if (!n_refs) {
        cli_usage("rm", stderr);
        return 2;
    }
    kiln_store *s;
    if (open_store(&s)) return 1;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') continue;
        kiln_status st = kiln_store_remove_names(s, argv[i], force, print_removed, NULL);
        if (st == KILN_OK) continue;
        int several = st == KILN_ERR_STATE && strstr(kiln_last_error(), " names (");
        rc = cli_fail("rm");
        if (several) fprintf(stderr, "kiln: rm: pass --force to remove every name of that id\n");
    }
    kiln_store_close(s);
    return rc;
}

int cli_verify(int argc, char **argv) {
    if (argc != 2) {
        cli_usage("verify", stderr);
        return 2;
    }
    kiln_store *s;
    if (open_store(&s)) return 1;
    show_ctx sc;
    init_show(&sc, 0);
    kiln_status st = kiln_store_verify(s, argv[1], on_progress, &sc);
    end_bar(&sc);
    kiln_store_close(s);
    if (st != KILN_OK) return cli_fail("verify");
    printf("%s: ok\n", argv[1]);
    return 0;
}

static void gc_line(const char *path, uint64_t bytes, void *user) {
    (void)user;
    char b[32];
    human(bytes, b, sizeof b);
    printf("removed %s (%s)\n", path, b);
}

int cli_gc(int argc, char **argv) {
    (void)argv;
    if (argc != 1) {
        cli_usage("gc", stderr);
        return 2;
    }
    kiln_store *s;
    if (open_store(&s)) return 1;
    uint64_t n = 0, bytes = 0;
    kiln_status st = kiln_store_gc(s, gc_line, NULL, &n, &bytes);
    kiln_store_close(s);
    if (st != KILN_OK) return cli_fail("gc");
    char b[32];
    human(bytes, b, sizeof b);
    printf("gc: removed %llu item%s, %s\n", (unsigned long long)n, n == 1 ? "" : "s", b);
    return 0;
}

int cli_cp(int argc, char **argv) {
    const char *src = NULL, *dst = NULL;
    int force = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--force") || !strcmp(a, "-f"))
            force = 1;
        else if (a[0] != '-' && !src)
            src = a;
        else if (a[0] != '-' && !dst)
            dst = a;
        else if (cli_help("cp", a))
            return 0;
        else {
            cli_usage("cp", stderr);
            return 2;
        }
    }
    if (!src || !dst) {
        cli_usage("cp", stderr);
        return 2;
    }
    kiln_store *s;
    if (open_store(&s)) return 1;
    kiln_status st = kiln_store_copy(s, src, dst, force);
    kiln_store_close(s);
    if (st != KILN_OK) return cli_fail("cp");
    printf("copied %s to %s\n", src, dst);
    return 0;
}

/* the exit code for a failed pull or inspection: 1 failed here, 3 needs
 * credentials or access, 4 not found, 5 try again later */
static int source_exit(void) {
    kiln_store_source_result r = kiln_store_last_source_result();
    return r == KILN_SOURCE_AUTH_REQUIRED || r == KILN_SOURCE_GATED || r == KILN_SOURCE_DENIED ? 3
           : r == KILN_SOURCE_NOT_FOUND                                                        ? 4
           : r == KILN_SOURCE_TRANSIENT                                                        ? 5
                                                                                               : 1;
}

int cli_show_remote(const char *ref, const char *token, int json) {
    kiln_store_pull_params pp = {.token = token};
    char *txt = NULL;
    if (kiln_store_inspect(ref, &pp, &txt) != KILN_OK) {
        cli_fail("show --remote");
        return source_exit();
    }
    if (json) {
        printf("%s\n", txt);
        kiln_store_free_string(txt);
        return 0;
    }
    json_t *j = json_loads(txt, 0, NULL);
    kiln_store_free_string(txt);
    json_t *src = json_object_get(j, "source");
    const char *commit = json_string_value(json_object_get(src, "commit"));
    const char *mdigest = json_string_value(json_object_get(src, "manifest"));
    printf("remote:    %s", ref);
    if (commit) printf(" (commit %.12s)", commit);
    if (mdigest) printf(" (manifest %.19s)", mdigest);
    printf("\n");
    json_t *files = json_object_get(j, "files");
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f) {
        char size[32] = "?";
        if (json_is_integer(json_object_get(f, "length")))
            human((uint64_t)json_integer_value(json_object_get(f, "length")), size, sizeof size);
        const char *sha = json_string_value(json_object_get(f, "sha256"));
        printf("file:      %-40s %-7s %10s  %s%.16s%s\n", json_string_value(json_object_get(f, "path")),
               json_string_value(json_object_get(f, "role")), size, sha ? "sha256 " : "no published SHA-256",
               sha ? sha : "", sha ? "..." : "");
    }
    char total[32] = "?", params[32];
    if (json_is_integer(json_object_get(j, "size")))
        human((uint64_t)json_integer_value(json_object_get(j, "size")), total, sizeof total);
    double np = (double)json_integer_value(json_object_get(j, "parameters"));
    snprintf(params, sizeof params, np >= 1e9 ? "%.2f B" : "%.2f M", np >= 1e9 ? np / 1e9 : np / 1e6);
    const char *name = json_string_value(json_object_get(j, "model_name"));
    printf("size:      %s%s\n", total,
           json_is_true(json_object_get(j, "metadata_verified")) ? "" : " (lengths or hashes unpublished)");
    printf("arch:      %s%s%s%s, %lld layers, embedding %lld, context %lld\n",
           json_string_value(json_object_get(j, "arch")), name ? " (\"" : "", name ? name : "", name ? "\")" : "",
           (long long)json_integer_value(json_object_get(j, "layers")),
           (long long)json_integer_value(json_object_get(j, "embedding_length")),
           (long long)json_integer_value(json_object_get(j, "context_length")));
    long long split = json_integer_value(json_object_get(j, "split_count"));
    printf("weights:   %s, %s parameters in %lld tensors%s\n", json_string_value(json_object_get(j, "quantization")),
           params, (long long)json_integer_value(json_object_get(j, "tensors")),
           split > 1 ? " (the first of the split files)" : "");
    char read[32];
    human((uint64_t)json_integer_value(json_object_get(j, "header_bytes_read")), read, sizeof read);
    printf("read:      %s of the header in %lld range request%s; no weights\n", read,
           (long long)json_integer_value(json_object_get(j, "range_requests")),
           json_integer_value(json_object_get(j, "range_requests")) == 1 ? "" : "s");
    printf("runnable:  %s: %s\n", json_is_true(json_object_get(j, "runnable")) ? "yes" : "no",
           json_string_value(json_object_get(j, "runnable_reason")));
    json_decref(j);
    return 0;
}
