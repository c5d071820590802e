/* kiln image (text to image) and kiln show for checkpoint files. */
#include "cli/cli.h"
#include "cli/common.h"

#include "base/base.h"
#include "ckpt/ckpt.h"
#include "image/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cli_is_checkpoint(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char b[9] = {0};
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    if (n >= 4 && !memcmp(b, "GGUF", 4)) return 0;
    if (n >= 4 && !memcmp(b, "PK\x03\x04", 4)) return 1;
    return n == 9 && b[8] == '{'; /* safetensors: a length, then the JSON header */
}

int cli_show_checkpoint(const char *path, int tensors) {
    ckpt_file *f;
    if (ckpt_open(path, &f)) {
        fprintf(stderr, "kiln: %s\n", kiln_last_error());
        return 1;
    }
    uint64_t n_params = 0, n_bytes = 0;
    int type_count[CKPT_DTYPE_COUNT] = {0};
    for (int i = 0; i < ckpt_n_tensors(f); i++) {
        const ckpt_tensor *t = ckpt_tensor_at(f, i);
        n_params += (uint64_t)t->numel;
        n_bytes += t->nbytes;
        type_count[t->dtype]++;
    }
    printf("file:      %s (%s, %.2f MiB)\n", path, ckpt_format_name(ckpt_format(f)),
           (double)ckpt_file_size(f) / (1024.0 * 1024.0));
    printf("params:    %llu (%.2f M), %.2f MiB of tensor data\n", (unsigned long long)n_params, (double)n_params / 1e6,
           (double)n_bytes / (1024.0 * 1024.0));
    printf("types:    ");
    for (int t = 0; t < CKPT_DTYPE_COUNT; t++)
        if (type_count[t]) printf(" %d × %s", type_count[t], ckpt_dtype_name(t));
    printf("\n");
    if (tensors) {
        printf("\ntensors (%d):\n", ckpt_n_tensors(f));
        for (int i = 0; i < ckpt_n_tensors(f); i++) {
            const ckpt_tensor *t = ckpt_tensor_at(f, i);
            char shape[128];
            int o = snprintf(shape, sizeof shape, "[");
            for (int d = 0; d < t->n_dims && o < (int)sizeof shape; d++)
                o += snprintf(shape + o, sizeof shape - (size_t)o, d ? ", %lld" : "%lld", (long long)t->shape[d]);
            if (o < (int)sizeof shape) snprintf(shape + o, sizeof shape - (size_t)o, "]");
            printf("  %-48s %-5s %-22s %10.3f KiB\n", t->name, ckpt_dtype_name(t->dtype), shape,
                   (double)t->nbytes / 1024.0);
        }
    }
    ckpt_close(f);
    return 0;
}

/* ---- kiln image ---- */

typedef struct bar {
    int tty;
    double t0, t_step, t_decode; /* first step began, decoding began */
    double c_step, c_decode;     /* the process's CPU seconds then */
    int last;
} bar;

/* CPU seconds of every thread of the process: on a busy machine the wall
 * clock says little about the work. */
static double cpu_now(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts)) return 0.0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int on_progress(void *user, int step, int steps) {
    bar *b = user;
    const double now = base_now();
    if (step == 0) {
        b->t_step = now;
        b->c_step = cpu_now();
    }
    if (step == steps) {
        b->t_decode = now;
        b->c_decode = cpu_now();
    }
    if (!b->tty) return 0;
    const int width = 30, fill = steps ? step * width / steps : width;
    char line[64];
    for (int i = 0; i < width; i++) line[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    line[width] = 0;
    const double per = step ? (now - b->t_step) / step : 0;
    if (step < steps)
        fprintf(stderr, "\r  step %d/%d [%s] %.2f s/step ", step + 1, steps, line, per);
    else
        fprintf(stderr, "\r  decoding [%s] %.2f s/step    ", line, per);
    fflush(stderr);
    b->last = step;
    return 0;
}

int cli_image(int argc, char **argv) {
    const char *pack = NULL, *prompt = NULL, *outp = "output.png", *tok_sha = NULL;
    image_files files;
    memset(&files, 0, sizeof files);
    int direct = 0, steps = 0, threads = 0, verify = 1;
    float cfg = -1.0f;
    unsigned long long seed = 42;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (cli_help("image", a)) return 0;
        if (!strcmp(a, "--no-verify")) {
            verify = 0;
            continue;
        }
        if (!v) {
            fprintf(stderr, "kiln image: %s needs a value (or is unknown)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            pack = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
            prompt = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output"))
            outp = v;
        else if (!strcmp(a, "--tokenizer-sha256"))
            tok_sha = v;
        else if (!strcmp(a, "--dit") || !strcmp(a, "--t5") || !strcmp(a, "--tokenizer") || !strcmp(a, "--vae")) {
            char *d = a[2] == 'd'                  ? files.dit
                      : a[2] == 't' && a[3] == '5' ? files.t5
                      : a[2] == 't'                ? files.tokenizer
                                                   : files.vae;
            snprintf(d, PATH_MAX, "%s", v);
            direct = 1;
        } else if (!strcmp(a, "--steps") || !strcmp(a, "-t") || !strcmp(a, "--threads")) {
            long n = strtol(v, &end, 10);
            const int is_steps = !strcmp(a, "--steps");
            if (*end || n < 1 || n > (is_steps ? IMAGE_MAX_STEPS : 1024)) {
                fprintf(stderr, "kiln image: %s: '%s' is out of range\n", a, v);
                return 2;
            }
            if (is_steps)
                steps = (int)n;
            else
                threads = (int)n;
        } else if (!strcmp(a, "--cfg")) {
            cfg = strtof(v, &end);
            if (*end || !(cfg >= 0) || cfg > 100) {
                fprintf(stderr, "kiln image: --cfg: '%s' is not a guidance scale (0..100)\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--seed")) {
            seed = strtoull(v, &end, 10);
            if (*end || v[0] == '-') {
                fprintf(stderr, "kiln image: --seed: '%s' is not a non-negative integer\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "kiln image: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (!prompt) {
        fprintf(stderr, "kiln image: no prompt (-p TEXT)\n");
        return 2;
    }
    if (!pack == !direct || (direct && (!files.dit[0] || !files.t5[0] || !files.tokenizer[0] || !files.vae[0]))) {
        fprintf(stderr, "kiln image: give a pack (-m DIR) or all four files (--dit --t5 --tokenizer --vae)\n");
        return 2;
    }
    /* a pack directory (or its pack.json), else a name in the store */
    struct stat pst;
    if (pack && stat(pack, &pst) != 0 && cli_model_path(pack, 0, &pack)) return 1;
    image_config cfgp;
    if (pack) {
        if (image_pack_read(pack, verify, &files, &cfgp)) {
            fprintf(stderr, "kiln: %s\n", kiln_last_error());
            return 1;
        }
    } else {
        image_config_default(&cfgp);
        if (image_tokenizer_pinned(files.tokenizer, tok_sha)) {
            fprintf(stderr, "kiln: %s\n", kiln_last_error());
            return 1;
        }
    }
    const double t0 = base_now();
    image_pipeline *p;
    if (image_pipeline_open(&files, &cfgp, threads, &p)) {
        fprintf(stderr, "kiln: %s\n", kiln_last_error());
        return 1;
    }
    const double t_load = base_now() - t0;
    bar b = {isatty(STDERR_FILENO), base_now(), 0, 0, 0, 0, 0};
    image_request r = {prompt, steps, cfg, seed, on_progress, &b};
    uint8_t *png;
    size_t len;
    const double tg = base_now(), cg = cpu_now();
    const kiln_status rc = image_generate(p, &r, &png, &len);
    const double t_gen = base_now() - tg, c_end = cpu_now();
    if (b.tty) fputc('\n', stderr);
    const image_config *c = image_pipeline_config(p);
    const int n_steps = steps ? steps : c->steps;
    const float g = cfg >= 0 ? cfg : c->cfg;
    const int w = image_pipeline_width(p), h = image_pipeline_height(p);
    image_pipeline_free(p);
    if (rc) {
        fprintf(stderr, "kiln: %s\n", kiln_last_error());
        return 1;
    }
    FILE *f = !strcmp(outp, "-") ? stdout : fopen(outp, "wb");
    int ok = f && fwrite(png, 1, len, f) == len;
    if (f && f != stdout && fclose(f)) ok = 0;
    free(png);
    if (!ok) {
        fprintf(stderr, "kiln: cannot write %s\n", outp);
        return 1;
    }
    const int timed = b.t_decode > b.t_step && b.t_step > 0;
    const double per_step = timed ? (b.t_decode - b.t_step) / n_steps : 0;
    fprintf(stderr,
            "kiln: wrote %s (%dx%d PNG, %d steps, cfg %g, seed %llu): load %.2f s, generate %.2f s "
            "(encode %.2f s, %.3f s per step, decode %.2f s; CPU seconds %.2f, %.3f per step, %.2f)\n",
            !strcmp(outp, "-") ? "standard output" : outp, w, h, n_steps, g, seed, t_load, t_gen,
            timed ? b.t_step - tg : 0.0, per_step, timed ? tg + t_gen - b.t_decode : 0.0, timed ? b.c_step - cg : 0.0,
            timed ? (b.c_decode - b.c_step) / n_steps : 0.0, timed ? c_end - b.c_decode : 0.0);
    return 0;
}
