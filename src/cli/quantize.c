/* kiln quantize IN|NAME OUT TYPE: the conversion, each tensor that fell
 * back to another type (as a warning on stderr), then a summary on stdout
 * as llama-quantize gives one: the types before and after, with their
 * tensor counts, and the size before and after. */
#include "cli/cli.h"
#include "cli/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TYPES 48 /* distinct type names one summary counts */

typedef struct type_count {
    const char *name; /* a static name from the quantizer's type table */
    int n;
} type_count;

typedef struct summary {
    type_count before[MAX_TYPES], after[MAX_TYPES];
    int n_before, n_after;
    uint64_t bytes_in, bytes_out;
    int n_tensors, n_fallback;
} summary;

static void count_type(type_count *tc, int *n, const char *name) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(tc[i].name, name)) {
            tc[i].n++;
            return;
        }
    if (*n < MAX_TYPES) tc[(*n)++] = (type_count){name, 1};
}

static void on_tensor(const kiln_quantize_tensor *t, void *user) {
    summary *s = user;
    count_type(s->before, &s->n_before, t->type_in);
    count_type(s->after, &s->n_after, t->type_out);
    s->bytes_in += t->bytes_in;
    s->bytes_out += t->bytes_out;
    s->n_tensors = t->count;
    if (t->wanted) {
        s->n_fallback++;
        fprintf(stderr,
                "kiln quantize: warning: %s: rows of %lld are not a multiple of %d, which %s needs: %s instead\n",
                t->name, (long long)t->ne[0], (int)t->wanted_block, t->wanted, t->type_out);
    }
}

static void human(uint64_t b, char *buf, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 4) v /= 1024, i++;
    snprintf(buf, cap, i ? "%.2f %s" : "%.0f %s", v, u[i]);
}

static void print_types(const type_count *tc, int n) {
    for (int i = 0; i < n; i++) printf("%s%s %d", i ? ", " : "", tc[i].name, tc[i].n);
}

int cli_quantize(int argc, char **argv) {
    int threads = 0, requant = 0;
    const char *pos[3];
    int np = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--allow-requantize"))
            requant = 1;
        else if (argv[i][0] != '-' && np < 3)
            pos[np++] = argv[i];
        else if (cli_help("quantize", argv[i]))
            return 0;
        else {
            fprintf(stderr, "kiln quantize: unexpected '%s'\n", argv[i]);
            return 2;
        }
    }
    if (np != 3) {
        cli_usage("quantize", stderr);
        return 2;
    }
    const char *in;
    if (cli_model_path(pos[0], 0, &in)) return 1;
    summary s;
    memset(&s, 0, sizeof s);
    kiln_quantize_params p = kiln_quantize_default_params();
    p.n_threads = threads;
    p.allow_requantize = requant;
    p.on_tensor = on_tensor;
    p.user = &s;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (kiln_quantize_with(in, pos[1], pos[2], &p) != KILN_OK) {
        const int requantize = strstr(kiln_last_error(), "already quantized") != NULL;
        cli_fail(NULL);
        if (requantize) fprintf(stderr, "kiln: quantize: pass --allow-requantize to convert it anyway\n");
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    char a[32], b[32];
    human(s.bytes_in, a, sizeof a);
    human(s.bytes_out, b, sizeof b);
    printf("quantized %s to %s as %s: %d tensors\n", pos[0], pos[1], pos[2], s.n_tensors);
    printf("types: ");
    print_types(s.before, s.n_before);
    printf(" -> ");
    print_types(s.after, s.n_after);
    printf("\nsize:  %s -> %s (%.1f %%), tensor data, in %.2f s\n", a, b,
           s.bytes_in ? 100.0 * (double)s.bytes_out / (double)s.bytes_in : 0.0,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    if (s.n_fallback)
        printf("%d of %d tensors fell back to another type: their rows do not divide into the type's blocks\n",
               s.n_fallback, s.n_tensors);
    return 0;
}
