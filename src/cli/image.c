/* kiln image (text to image) and kiln show for checkpoint files. */
#include "cli.h"

#include "ckpt/ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    char err[512];
    ck_file *f = ck_open(path, err, sizeof err);
    if (!f) {
        fprintf(stderr, "kiln: %s\n", err);
        return 1;
    }
    uint64_t n_params = 0, n_bytes = 0;
    int type_count[CK_DTYPE_COUNT] = {0};
    for (int i = 0; i < ck_n_tensors(f); i++) {
        const ck_tensor *t = ck_tensor_at(f, i);
        n_params += (uint64_t)t->numel;
        n_bytes += t->nbytes;
        type_count[t->dtype]++;
    }
    printf("file:      %s (%s, %.2f MiB)\n", path, ck_format_name(ck_format(f)),
           (double)ck_file_size(f) / (1024.0 * 1024.0));
    printf("params:    %llu (%.2f M), %.2f MiB of tensor data\n", (unsigned long long)n_params, (double)n_params / 1e6,
           (double)n_bytes / (1024.0 * 1024.0));
    printf("types:    ");
    for (int t = 0; t < CK_DTYPE_COUNT; t++)
        if (type_count[t]) printf(" %d × %s", type_count[t], ck_dtype_name(t));
    printf("\n");
    if (tensors) {
        printf("\ntensors (%d):\n", ck_n_tensors(f));
        for (int i = 0; i < ck_n_tensors(f); i++) {
            const ck_tensor *t = ck_tensor_at(f, i);
            char shape[128];
            int o = snprintf(shape, sizeof shape, "[");
            for (int d = 0; d < t->n_dims && o < (int)sizeof shape; d++)
                o += snprintf(shape + o, sizeof shape - (size_t)o, d ? ", %lld" : "%lld", (long long)t->shape[d]);
            if (o < (int)sizeof shape) snprintf(shape + o, sizeof shape - (size_t)o, "]");
            printf("  %-48s %-5s %-22s %10.3f KiB\n", t->name, ck_dtype_name(t->dtype), shape,
                   (double)t->nbytes / 1024.0);
        }
    }
    ck_close(f);
    return 0;
}
