/* kiln transcribe: speech to text with a Whisper model. */
#include "cli/cli.h"
#include "cli/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct progress {
    const char *file;
    int tty;
    double window;
} progress;

static int show_progress(double done, double total, void *u) {
    progress *p = u;
    if (total <= p->window) return 0; /* one window: nothing to follow */
    fprintf(stderr, "%stranscribing %s: %3.0f %% (%.1f / %.1f s)%s", p->tty ? "\r" : "", p->file, 100.0 * done / total,
            done, total, p->tty ? (done >= total ? "\n" : "") : "\n");
    fflush(stderr);
    return 0;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int cli_transcribe(int argc, char **argv) {
    const char *model = NULL, *format = "txt", *out_dir = NULL;
    const char *files[256];
    int n_files = 0, quiet = 0, verbose = 0;
    kiln_transcribe_params p = kiln_transcribe_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && more)
            model = argv[++i];
        else if ((!strcmp(a, "-l") || !strcmp(a, "--language")) && more)
            p.language = argv[++i];
        else if (!strcmp(a, "--translate"))
            p.translate = 1;
        else if ((!strcmp(a, "--beam-size") || !strcmp(a, "-bs")) && more)
            p.beam_size = atoi(argv[++i]);
        else if ((!strcmp(a, "--best-of") || !strcmp(a, "-bo")) && more)
            p.best_of = atoi(argv[++i]);
        else if (!strcmp(a, "--temperature") && more)
            p.temperature = (float)atof(argv[++i]);
        else if (!strcmp(a, "--temperature-inc") && more)
            p.temperature_inc = (float)atof(argv[++i]);
        else if (!strcmp(a, "--no-fallback"))
            p.temperature_inc = 0.0f;
        else if (!strcmp(a, "--prompt") && more)
            p.initial_prompt = argv[++i];
        else if (!strcmp(a, "--no-timestamps"))
            p.timestamps = 0;
        else if (!strcmp(a, "--no-context"))
            p.condition_on_previous = 0;
        else if (!strcmp(a, "--keep-symbols"))
            p.suppress_non_speech = 0;
        else if (!strcmp(a, "--seed") && more)
            p.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "-t") && more)
            p.n_threads = atoi(argv[++i]);
        else if ((!strcmp(a, "-o") || !strcmp(a, "--output-format")) && more)
            format = argv[++i];
        else if (!strcmp(a, "--output-dir") && more)
            out_dir = argv[++i];
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet"))
            quiet = 1;
        else if (!strcmp(a, "-v"))
            verbose = 1;
        else if (cli_help("transcribe", a))
            return 0;
        else if (a[0] != '-' || !strcmp(a, "-")) {
            if (n_files == (int)(sizeof files / sizeof *files)) {
                fprintf(stderr, "kiln transcribe: more than %zu files\n", sizeof files / sizeof *files);
                return 2;
            }
            files[n_files++] = a;
        } else {
            fprintf(stderr, "kiln transcribe: unknown or incomplete option '%s'\n", a);
            cli_usage("transcribe", stderr);
            return 2;
        }
    }
    if (!model || n_files == 0) {
        cli_usage("transcribe", stderr);
        return 2;
    }
    if (strcmp(format, "txt") && strcmp(format, "srt") && strcmp(format, "vtt") && strcmp(format, "json") &&
        strcmp(format, "verbose_json")) {
        fprintf(stderr, "kiln transcribe: -o takes txt, srt, vtt, json or verbose_json, not '%s'\n", format);
        return 2;
    }
    if (verbose) kiln_set_log(NULL, NULL, KILN_LOG_DEBUG);
    const char *path;
    if (cli_model_path(model, 0, &path)) return 1;
    kiln_stt *m;
    if (kiln_stt_load(path, &m) != KILN_OK) return cli_fail(NULL);
    /* options are checked against the model before any audio is read */
    if (kiln_transcribe_check(m, &p) != KILN_OK) {
        kiln_stt_free(m);
        return cli_fail(NULL);
    }
    kiln_stt_info info;
    kiln_stt_get_info(m, &info);
    progress pr = {NULL, isatty(2), info.window_seconds};
    if (!quiet) {
        p.progress = show_progress;
        p.user = &pr;
    }
    int rc = 0;
    for (int f = 0; f < n_files; f++) {
        float *pcm = NULL;
        int64_t n = 0;
        if (kiln_audio_load(files[f], &pcm, &n, NULL) != KILN_OK) {
            rc = cli_fail(NULL);
            continue;
        }
        pr.file = base_name(files[f]);
        kiln_transcript *t = NULL;
        double t0 = 0;
        if (verbose) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            t0 = ts.tv_sec + ts.tv_nsec * 1e-9;
        }
        kiln_status st = kiln_transcribe(m, pcm, n, &p, &t);
        kiln_audio_free(pcm);
        if (st != KILN_OK) {
            rc = cli_fail(files[f]);
            continue;
        }
        if (verbose) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            double el = ts.tv_sec + ts.tv_nsec * 1e-9 - t0;
            fprintf(stderr,
                    "kiln: %s: %.2f s of audio in %.3f s (real-time factor %.4f), %d windows, %d fallbacks, "
                    "language %s\n",
                    files[f], t->duration, el, t->duration > 0 ? el / t->duration : 0.0, t->n_windows, t->n_fallbacks,
                    t->language);
        }
        char *text = kiln_transcript_format(t, format, p.translate);
        kiln_transcript_free(t);
        if (!text) {
            rc = cli_fail(NULL);
            continue;
        }
        if (out_dir) {
            char out[4096];
            const char *b = base_name(files[f]);
            const char *dot = strrchr(b, '.');
            int bl = dot && dot != b ? (int)(dot - b) : (int)strlen(b);
            size_t dl = strlen(out_dir);
            while (dl > 1 && out_dir[dl - 1] == '/') dl--; /* "out/" names the folder "out" */
            snprintf(out, sizeof out, "%.*s%s%.*s.%s", (int)dl, out_dir, out_dir[dl - 1] == '/' ? "" : "/", bl, b,
                     !strcmp(format, "verbose_json") ? "json" : format);
            FILE *o = fopen(out, "w");
            if (!o || fputs(text, o) < 0 || fclose(o) != 0) {
                fprintf(stderr, "kiln: %s: %s\n", out, strerror(errno));
                rc = 1;
            } else if (!quiet)
                fprintf(stderr, "kiln: wrote %s\n", out);
        } else {
            if (n_files > 1 && (!strcmp(format, "txt") || !strcmp(format, "srt") || !strcmp(format, "vtt")))
                printf("%s==> %s <==\n", f ? "\n" : "", files[f]);
            fputs(text, stdout);
            fflush(stdout);
        }
        free(text);
    }
    kiln_stt_free(m);
    return rc;
}

/* ------------------------------------------------------------- kiln show */

#include "whisper/whisper.h"

int cli_show_whisper(const char *path, int tensors) {
    whisper_model *m;
    if (whisper_load(path, &m)) {
        fprintf(stderr, "kiln: %s\n", kiln_last_error());
        return 1;
    }
    const whisper_hparams *hp = &m->hp;
    printf("file:      %s (whisper.cpp GGML, %.2f MiB)\n", path, (double)m->map.len / (1024.0 * 1024.0));
    printf("params:    %llu (%.2f M), %.2f MiB of tensor data, %.2f bits per weight\n", (unsigned long long)m->n_params,
           (double)m->n_params / 1e6, (double)m->n_bytes / (1024.0 * 1024.0),
           m->n_params ? 8.0 * (double)m->n_bytes / (double)m->n_params : 0.0);
    printf("types:    ");
    for (int t = 0; t < QUANT_TYPE_COUNT; t++)
        if (m->type_count[t]) printf(" %d × %s", m->type_count[t], quant_get(t)->name);
    printf("  (%d tensors)\n\n", m->n_tensors);
    printf("model:     whisper %s, %s%s\n", m->size_name, m->vocab.multilingual ? "multilingual" : "English-only",
           m->vocab.multilingual && strcmp(m->size_name, "large-v3-turbo") ? ", can translate" : "");
    printf("  n_vocab        %d (%d text tokens, %d languages, 1501 timestamps)\n", hp->n_vocab, m->vocab.n_text,
           m->n_langs);
    printf("  n_audio_ctx    %d (%.1f s windows)\n", hp->n_audio_ctx, whisper_window_seconds(m));
    printf("  n_audio_state  %d\n  n_audio_head   %d\n  n_audio_layer  %d\n", hp->n_audio_state, hp->n_audio_head,
           hp->n_audio_layer);
    printf("  n_text_ctx     %d\n  n_text_state   %d\n  n_text_head    %d\n  n_text_layer   %d\n", hp->n_text_ctx,
           hp->n_text_state, hp->n_text_head, hp->n_text_layer);
    printf("  n_mels         %d\n  ftype          %d (%s)\n", hp->n_mels, hp->ftype, quant_get(m->wtype)->name);
    if (tensors) {
        printf("\nspecial tokens: eot %d, sot %d, languages %d..%d, translate %d, transcribe %d, prev %d, "
               "nospeech %d, notimestamps %d, timestamps %d..%d\n",
               m->vocab.eot, m->vocab.sot, m->vocab.lang0, m->vocab.lang0 + m->n_langs - 1, m->vocab.translate,
               m->vocab.transcribe, m->vocab.prev, m->vocab.nosp, m->vocab.notimestamps, m->vocab.ts_begin,
               m->vocab.ts_begin + WHISPER_N_TIMESTAMPS - 1);
    }
    printf("\nrunnable:  yes: speech to text (kiln transcribe), %.2f MiB copied out of the mapping for alignment\n",
           (double)m->copied_bytes / (1024.0 * 1024.0));
    whisper_free(m);
    return 0;
}
