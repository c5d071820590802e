#include "testutil.h"

#include "gguf/gguf.h"

#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

int t_failures;
int t_checks;

int t_done(void) {
    printf("%d passed, %d failed\n", t_checks - t_failures, t_failures);
    return t_failures ? 1 : 0;
}

char *t_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return NULL;
    }
    long n = ftell(f);
    if (n < 0) {
        fclose(f);
        return NULL;
    }
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    if (!buf) {
        fclose(f);
        return NULL;
    }
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    if (got != (size_t)n) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

double t_cosine(const float *a, const double *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += b[i] * b[i];
    }
    return ab / sqrt(aa * bb);
}

double t_max_diff(const float *a, const float *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

int t_run_capture(const char *cmd, const char *dir, char **out, char **err) {
    char o[1024], e[1024], full[8192];
    snprintf(o, sizeof o, "%s/out.txt", dir);
    snprintf(e, sizeof e, "%s/err.txt", dir);
    snprintf(full, sizeof full, "%s >'%s' 2>'%s'", cmd, o, e);
    int rc = system(full);
    *out = t_read_file(o, NULL);
    *err = t_read_file(e, NULL);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

int t_write_chat_model(const char *src, const char *dst) {
    return t_write_chat_model_with(src, dst,
                                   "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
                                   "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ "
                                   "'<|im_start|>assistant\\n' }}{% endif %}"
                                   /* Qwen3's switch: enable_thinking false writes an empty reasoning block */
                                   "{% if enable_thinking is defined and enable_thinking is false %}"
                                   "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}");
}

int t_write_chat_model_with(const char *src, const char *dst, const char *t) {
    char err[256];
    gguf_file *f;
    if (gguf_open(src, &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    if (!f) return -1;
    gguf_writer *w = gguf_writer_new();
    for (int i = 0; i < gguf_n_kv(f); i++) gguf_w_copy_kv(w, gguf_kv_at(f, i));
    gguf_w_str(w, "tokenizer.chat_template", t, strlen(t));
    for (int i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *x = gguf_tensor_at(f, i);
        gguf_w_tensor(w, x->name, x->type, (int)x->n_dims, x->ne, x->data);
    }
    int rc = gguf_writer_save(w, dst, NULL, NULL);
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}

uint8_t *t_png_pixels(const uint8_t *png, size_t len, int *w, int *h) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, png, len)) return NULL;
    im.format = PNG_FORMAT_RGB;
    uint8_t *buf = malloc(PNG_IMAGE_SIZE(im));
    if (!buf || !png_image_finish_read(&im, NULL, buf, 0, NULL)) {
        free(buf);
        png_image_free(&im);
        return NULL;
    }
    *w = (int)im.width;
    *h = (int)im.height;
    return buf;
}
